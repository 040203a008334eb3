"""One-use approval tokens, bound to a framework's call and to the approved digest.

A token is the decision a host's port gave for one pending call, held until the
framework runs that call. It is keyed by its binding (the framework's per-state scope,
the tool call id, the tool), carries the digest of the arguments that were approved,
and is used at most once within its TTL. The executor still checks the digest: a
decision for other arguments is ignored there (``Decision.digest``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from ._approval import Decision

__all__ = ["TokenTable"]

Binding = tuple[str, str, str]


class TokenTable:
    """Tokens in issue order (so expiry order: one TTL for all), capped at ``capacity``.

    ``issue`` drops the oldest token when the table is full and returns how many it
    dropped; ``take`` pops the token for a binding and returns its decision (with the
    approved digest bound into it), or None when there is none or it expired.
    """

    def __init__(
        self,
        *,
        capacity: int = 4096,
        ttl_s: float = 60.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.ttl_s = ttl_s
        self._clock = clock or time.monotonic
        # OrderedDict, not dict: evicting from the front of a plain dict leaves dummies
        # that make every later eviction slower (measured ~20 us per issue at 100k).
        self._tokens: OrderedDict[Binding, tuple[Decision, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tokens)

    def issue(self, binding: Binding, digest: str, decision: Decision) -> int:
        """Hold ``decision`` for ``binding`` and arguments of ``digest``; returns tokens dropped."""
        return self._issue(binding, digest, decision, self._clock())

    def issue_many(self, entries: Iterable[tuple[Binding, str, Decision]]) -> int:
        """``issue`` each (binding, digest, decision) at one instant; returns tokens dropped.

        One clock reading for all: the tokens of one batch (one resolve's approvals) share
        one lifetime, starting when the batch is issued, however long issuing takes.
        """
        now = self._clock()
        return sum(
            self._issue(binding, digest, decision, now) for binding, digest, decision in entries
        )

    def _issue(self, binding: Binding, digest: str, decision: Decision, now: float) -> int:
        tokens = self._tokens
        while tokens:
            first = next(iter(tokens.values()))
            if first[1] > now:
                break
            tokens.popitem(last=False)
        tokens.pop(binding, None)
        dropped = 0
        while len(tokens) >= self.capacity:
            tokens.popitem(last=False)
            dropped += 1
        bound = Decision(
            approved=decision.approved,
            reviewer=decision.reviewer,
            reason=decision.reason,
            edits=decision.edits,
            digest=digest,
        )
        tokens[binding] = (bound, now + self.ttl_s)
        return dropped

    def take(self, binding: Binding) -> Decision | None:
        """Use the token for ``binding`` (once): its decision, or None (missing or expired)."""
        entry = self._tokens.pop(binding, None)
        if entry is None:
            return None
        decision, expires_at = entry
        if self._clock() >= expires_at:
            return None
        return decision

    def clear(self) -> None:
        """Drop every token."""
        self._tokens.clear()
