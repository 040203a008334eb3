"""Following a shared ledger: events of other writers, and effect keys they claimed.

Several executors may append to one ledger: other processes through their own ledger
objects, and several executors of one process through one object. Each executor's
projection knows its own events at once and the others' only when it is handed them. A
follower (an executor, through ``ledger.follow``) is handed, before each of its appends
returns, every event anyone else committed since it last heard, in seq order: other
processes' events and those of the object's other followers and of its unowned appends
(a ``DeferredApproval`` port's, say). It is never handed its own. A batch is a
follower's own when it is appended while ``appending`` (a context variable) holds that
follower: the executor sets it around its calls, so that a wrapper or subclass of the
store still sees every append go through its ``append_many``.

That alone would leave a window: a call checks its effect key against a projection that
has not yet heard of another writer's claim of the same key, and both bodies run. So the
writer settles claims inside the write transaction: a follower's batch that claims a key
is refused (``EffectTaken``, nothing of it written) when someone else's
``effect.claimed`` for that key committed after the follower's *horizon* (the seq
through which its projection had applied every event when the batch was staged), or
came earlier in the same transaction (two followers of one object in one group commit:
the first wins). The follower then applies what it was just told and decides again
(``call.duplicate`` or ``call.ambiguous``), exactly as if the claim had been its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable
from contextvars import ContextVar
from typing import Protocol

from ..errors import LedgerError
from ._chain import _damage
from ._events import EffectClaimed, Event, decode_event

__all__ = ["EffectTaken", "Follow", "appending"]

_log = logging.getLogger("agent_adapter.ledger")

_SINCE = "SELECT seq, prev, hash, payload FROM events WHERE seq > ? ORDER BY seq"


class EffectTaken(LedgerError):
    """An append was refused: another writer claimed its effect key first (internal).

    Raised only to a follower (an executor) for a batch holding ``effect.claimed``;
    nothing of the batch was written. The events that explain it were delivered first.
    """

    def __init__(self, key: str, seq: int) -> None:
        super().__init__(f"effect {key} was claimed by another writer (seq {seq})")
        self.key = key
        self.seq = seq


class _Followed(Protocol):
    def _unfollow(self, follower: Follow) -> None: ...


class Followers:
    """The followers of one ledger object: the bookkeeping both stores share.

    ``_follows`` is replaced whole, never changed in place, so a writer thread that reads
    it sees one consistent tuple.
    """

    _follows: tuple[Follow, ...] = ()

    def _add_follower(self, follower: Follow) -> Follow:
        self._follows = (*self._follows, follower)
        return follower

    def _unfollow(self, follower: Follow) -> None:
        self._follows = tuple(f for f in self._follows if f is not follower)

    @property
    def followed(self) -> bool:
        """True while some executor follows this ledger object (it closes the ledger
        when it closes only if this is False by then)."""
        return bool(self._follows)


class Follow:
    """One follower of one ledger object, as ``follow(apply, after)`` returns it.

    ``close()`` stops following. The other attributes are the store's bookkeeping,
    shared by the follower's event loop and (SQLite) the ledger's writer thread:
    ``horizon``, ``staged`` and ``closed`` are written on the loop only; ``delivered``,
    ``claims`` and ``written`` in the writer thread only.
    """

    __slots__ = (
        "apply",
        "claims",
        "closed",
        "delivered",
        "horizon",
        "ledger",
        "loop",
        "staged",
        "written",
    )

    def __init__(
        self,
        ledger: _Followed,
        apply: Callable[[Event], None],
        after: int,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        #: the ledger object followed (an append reaches it with its owner's Follow)
        self.ledger = ledger
        self.apply = apply
        self.loop = loop
        self.closed = False
        #: every event up to this seq is applied by the follower (own ones at once)
        self.horizon = after
        #: every event up to this seq is the follower's own or was handed to it
        self.delivered = after
        #: (seq, key) of others' effect claims a staged batch of ours may not know yet
        self.claims: list[tuple[int, str]] = []
        #: batches staged in this follower's name, and how many of them the writer has
        #: taken (written, refused or failed): equal when none is on its way
        self.staged = 0
        self.written = 0

    def close(self) -> None:
        """Stop following (idempotent): nothing more is handed to ``apply``, and a claim
        appended in this follower's name from now on is refused, since its projection no
        longer keeps up with the others'."""
        if not self.closed:
            self.closed = True
            self.ledger._unfollow(self)

    def refused(
        self,
        events: list[Event],
        horizon: int,
        foreign: list[Event],
        here: dict[str, tuple[int, Follow | None]] | None,
    ) -> EffectTaken | None:
        """Why a batch of ours staged at ``horizon`` may not claim its keys, or None.

        ``foreign``: what others committed before this transaction (from the oldest seq
        any follower of the object had heard of: ours are those past ``delivered``);
        ``here``: the keys earlier batches of this transaction claimed, and by whom.
        """
        claims = self.claims
        if not claims and not foreign and not here:
            return None
        keys = {e.key for e in events if isinstance(e, EffectClaimed)}
        if not keys:
            return None
        for seq, key in claims:
            if seq > horizon and key in keys:
                return EffectTaken(key, seq)
        delivered = self.delivered
        for event in foreign:
            if event.seq > delivered and isinstance(event, EffectClaimed) and event.key in keys:
                return EffectTaken(event.key, event.seq)
        if here:
            for key in keys:
                first = here.get(key)
                if first is not None and first[1] is not self:
                    return EffectTaken(key, first[0])
        return None

    def committed(self, heard: list[Event], through: int, staged_at: int) -> None:
        """In the writer, after a commit: ``heard`` is what this follower is handed for it.

        Keeps the claims in ``heard`` for the batches of ours it may not have reached
        before they were staged, and forgets those every later batch will know of:
        ``staged_at`` is the horizon of our last batch in this commit (0 if none), and
        later ones are staged at least there; with no batch of ours on its way, the
        horizon itself bounds every batch staged from now on. (The horizon is read
        before ``staged``: a batch staged in between was staged at that horizon or past
        it, since both are written on the loop, together, in ``_stage``.)
        """
        self.delivered = through
        if not heard and not self.claims:
            return  # nothing kept, nothing to keep (the common case)
        horizon = self.horizon
        idle = self.staged == self.written
        floor = max(staged_at, horizon) if idle else staged_at
        claims = [(s, k) for s, k in self.claims if s > floor] if self.claims else []
        claims.extend((e.seq, e.key) for e in heard if isinstance(e, EffectClaimed))
        self.claims = claims

    def deliver(self, heard: list[Event], through: int) -> None:
        """From the writer thread: hand ``heard`` to the follower, then move its horizon.

        Scheduled before the commit's waiters are woken, so a refused append finds the
        claim that refused it already applied. A follower closed meanwhile is not called.
        """
        loop = self.loop
        if loop is None:
            return

        def run() -> None:
            if self.closed:
                return
            for event in heard:
                try:
                    self.apply(event)
                except Exception:  # a follower's bug must not stop the others' events
                    _log.exception("applying seq %d from another writer failed", event.seq)
            if through > self.horizon:
                self.horizon = through

        with contextlib.suppress(RuntimeError):  # the follower's loop is closed
            loop.call_soon_threadsafe(run)


#: The follower whose events are being appended in this context, or None (an append
#: of nobody's: a port's, a script's). The executor sets it around each of its calls; a
#: store reads it where it stages an append, so the append's owner reaches the store
#: through any wrapper or subclass in between.
appending: ContextVar[Follow | None] = ContextVar("agent_adapter_appending", default=None)


def read_since(conn: sqlite3.Connection, after: int) -> list[Event]:
    """In the write transaction: the committed events past ``after``, decoded."""
    events = []
    for seq, prev, hash_, payload in conn.execute(_SINCE, (after,)):
        damage = _damage(prev, hash_, payload)
        if damage:
            raise LedgerError(
                f"seq {seq} (appended by another writer) is damaged: {damage}; see ledger verify"
            )
        try:
            event = decode_event(payload)
        except Exception as exc:
            raise LedgerError(
                f"the payload of seq {seq} (appended by another writer) cannot be decoded: {exc}"
            ) from exc
        event.seq, event.prev, event.hash = seq, prev, hash_
        events.append(event)
    return events
