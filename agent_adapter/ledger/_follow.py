"""Following a shared ledger: events of other processes, and effect keys they claimed.

Several executors (processes, or ledger objects) may append to one SQLite file. Each
executor's projection knows its own events at once and the others' only when it sees
them. A follower (the executor, through ``SQLiteLedger.follow``) is told, before each
of its appends returns, every event other writers committed since its last append, in
seq order, so its projection keeps up at every commit.

That alone would leave a window: a call checks its effect key against a projection that
has not yet seen another process's claim of the same key, and both bodies run. So the
writer settles claims inside the write transaction: a batch that claims a key is refused
(``EffectTaken``, nothing of it written) when another writer's ``effect.claimed`` for
that key committed after the follower's *horizon*, the seq through which its projection
had applied every event when the batch was staged. The follower then applies what it
was just told and decides again (``call.duplicate`` or ``call.ambiguous``), exactly as
if the claim had been its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable

from ..errors import LedgerError
from ._chain import _damage
from ._events import EffectClaimed, Event, decode_event

__all__ = ["EffectTaken"]

_log = logging.getLogger("agent_adapter.ledger")

_FOREIGN = "SELECT seq, prev, hash, payload FROM events WHERE seq > ? ORDER BY seq"


class EffectTaken(LedgerError):
    """An append was refused: another writer claimed its effect key first (internal).

    Raised only to a follower (an executor) for a batch holding ``effect.claimed``;
    nothing of the batch was written. The events that explain it were delivered first.
    """

    def __init__(self, key: str, seq: int) -> None:
        super().__init__(f"effect {key} was claimed by another writer (seq {seq})")
        self.key = key
        self.seq = seq


class Follow:
    """A follower's state, shared by its event loop and the ledger's writer thread.

    ``horizon`` is written on the loop only; ``delivered`` and ``claims`` in the writer
    thread only.
    """

    __slots__ = ("apply", "claims", "delivered", "horizon", "loop")

    def __init__(
        self, apply: Callable[[Event], None], after: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.apply = apply
        self.loop = loop
        #: every event up to this seq is applied by the follower (own ones at once)
        self.horizon = after
        #: every event up to this seq is the follower's own or was handed to it
        self.delivered = after
        #: (seq, key) of other writers' effect claims a staged batch may not know yet
        self.claims: list[tuple[int, str]] = []

    def read_foreign(self, conn: sqlite3.Connection, last_seq: int) -> list[Event]:
        """In the write transaction: the events other writers committed since ours."""
        if last_seq <= self.delivered:
            return []
        events = []
        for seq, prev, hash_, payload in conn.execute(_FOREIGN, (self.delivered,)):
            damage = _damage(prev, hash_, payload)
            if damage:
                raise LedgerError(
                    f"seq {seq} (appended by another writer) is damaged: {damage}; see "
                    "ledger verify"
                )
            try:
                event = decode_event(payload)
            except Exception as exc:
                raise LedgerError(
                    f"the payload of seq {seq} (appended by another writer) cannot be "
                    f"decoded: {exc}"
                ) from exc
            event.seq, event.prev, event.hash = seq, prev, hash_
            events.append(event)
        return events

    def refused(
        self, events: list[Event], horizon: int, foreign: list[Event]
    ) -> EffectTaken | None:
        """Why a batch staged at ``horizon`` may not claim its keys, or None."""
        claims = self.claims
        if not claims and not foreign:
            return None
        keys = {e.key for e in events if isinstance(e, EffectClaimed)}
        if not keys:
            return None
        for seq, key in claims:
            if seq > horizon and key in keys:
                return EffectTaken(key, seq)
        for event in foreign:
            if isinstance(event, EffectClaimed) and event.key in keys:
                return EffectTaken(event.key, event.seq)
        return None

    def committed(self, foreign: list[Event], through: int, staged_at: int) -> None:
        """In the writer, after a commit: remember foreign claims later batches may miss.

        ``staged_at`` is the horizon of the commit's last batch: batches staged later
        have seen at least that much, so older claims can be forgotten.
        """
        self.delivered = through
        claims = [(s, k) for s, k in self.claims if s > staged_at]
        claims.extend((e.seq, e.key) for e in foreign if isinstance(e, EffectClaimed))
        self.claims = claims

    def deliver(self, foreign: list[Event], through: int) -> None:
        """From the writer thread: hand ``foreign`` to the follower, then move its horizon.

        Scheduled before the commit's waiters are woken, so a refused append finds the
        claim that refused it already applied.
        """

        def run() -> None:
            for event in foreign:
                try:
                    self.apply(event)
                except Exception:  # a follower's bug must not stop the others' events
                    _log.exception("applying seq %d from another writer failed", event.seq)
            if through > self.horizon:
                self.horizon = through

        with contextlib.suppress(RuntimeError):  # the follower's loop is closed
            self.loop.call_soon_threadsafe(run)
