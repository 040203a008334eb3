"""The batches of a group commit, shared by the stores that have a writer (SQLite, Postgres).

A batch is one ``append``/``append_many`` call: its events and the future its caller
awaits (``Batch``). ``_staging`` stages them, the store's writer commits them, then hands
each follower what it did not append (``hand_over``) and wakes the waiters with one hop
per event loop (``wake``, ``settle_batches``). Both writers call these after each of
their commits, so the follower contract (``_follow``) is one piece of code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ._events import Event, decode_event
from ._follow import Follow

__all__ = ["Batch", "Written", "hand_over", "settle_batches", "wake"]

_log = logging.getLogger("agent_adapter.ledger")

# One written batch, for the followers that did not append it: (its owner, its events,
# its rows in the column order of the stores' inserts).
Written = tuple[Follow | None, list[Event], list[tuple[Any, ...]]]


class Batch:
    """One ``append``/``append_many`` call: its events and the future its caller awaits.

    ``owner``: the follower that appended it (None: nobody's); ``horizon``: the owner's
    horizon when the batch was staged (see ``_follow``).
    """

    __slots__ = ("error", "events", "future", "horizon", "owner")

    def __init__(
        self,
        events: list[Event],
        future: asyncio.Future[None],
        horizon: int = 0,
        owner: Follow | None = None,
    ) -> None:
        self.events = events
        self.future = future
        self.horizon = horizon
        self.owner = owner
        self.error: BaseException | None = None


def settle_batches(batches: list[Batch]) -> None:
    """On the batches' loop: settle each waiter (its error, or done)."""
    for batch in batches:
        if batch.future.done():
            continue
        if batch.error is not None:
            batch.future.set_exception(batch.error)
        else:
            batch.future.set_result(None)


def hand_over(
    follows: tuple[Follow, ...],
    batches: list[Batch],
    done: tuple[list[Event], int, list[Written]] | None,
) -> None:
    """After a commit: hand each follower what it did not append and has not heard.

    That is the other writers' events read in the transaction (past what it had
    heard) and this commit's batches that are not its own, in seq order.
    """
    if len(follows) == 1 and done is not None and not done[0]:
        # The common case (one executor on the ledger, nobody else committed): it is
        # handed nothing, only told how far it has heard.
        follow = follows[0]
        staged_at = 0
        for batch in batches:
            owner = batch.owner
            if owner is not None:
                owner.written += 1  # taken, whatever became of it
                if owner is follow:
                    staged_at = batch.horizon
        _, through, written = done
        heard: list[Event] = []
        for owner, events, rows in written:
            if owner is not follow:
                heard.extend(_decoded(events, rows))
        follow.committed(heard, through, staged_at)
        if heard:
            follow.deliver(heard, through)
        return
    last: dict[Follow, int] = {}
    for batch in batches:
        owner = batch.owner
        if owner is not None:
            owner.written += 1  # taken, whatever became of it
            last[owner] = batch.horizon
    if done is None or not follows:
        return
    foreign, through, written = done
    decoded: dict[int, list[Event]] = {}
    for follow in follows:
        delivered = follow.delivered
        heard = [e for e in foreign if e.seq > delivered] if foreign else []
        for i, (owner, events, rows) in enumerate(written):
            if owner is not follow:
                theirs = decoded.get(i)
                if theirs is None:
                    theirs = decoded[i] = _decoded(events, rows)
                heard.extend(theirs)
        follow.committed(heard, through, last.get(follow, 0))
        if heard:
            # (With nothing new the horizon may lag: it only matters against others'
            # claims, and those always come this way.)
            follow.deliver(heard, through)


def wake(batches: list[Batch]) -> None:
    """Settle ``batches`` on their loops: one hop back per loop (normally one loop), not
    one per waiter. Safe from any thread; on the batches' own loop (a writer task, as
    Postgres's) at once, without the hop (a write to the loop's self-pipe, a read, and
    one more turn of the loop for every commit)."""
    loop = batches[0].future.get_loop()
    if len(batches) == 1 or all(b.future.get_loop() is loop for b in batches):
        if _running_loop() is loop:
            settle_batches(batches)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle_batches, batches)
        return
    by_loop: dict[asyncio.AbstractEventLoop, list[Batch]] = {}
    for batch in batches:
        by_loop.setdefault(batch.future.get_loop(), []).append(batch)
    for loop, group in by_loop.items():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle_batches, group)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The loop running in this thread, or None (a writer thread)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _decoded(events: list[Event], rows: list[tuple[Any, ...]]) -> list[Event]:
    """A written batch as another follower gets it: decoded from the stored bytes (as a
    reader would), so that no two followers share an event object with its appender."""
    out = []
    for event, (seq, _type, _run, _call, _tool, _ts, payload, prev, hash_) in zip(
        events, rows, strict=True
    ):
        try:
            copy = decode_event(payload)
        except Exception:  # what we just encoded: never expected; the event as appended
            _log.exception("seq %d cannot be decoded for the other followers", seq)
            copy = event
        copy.seq, copy.prev, copy.hash = seq, prev, hash_
        out.append(copy)
    return out
