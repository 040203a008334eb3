"""``MemoryLedger``: the in-process store, with the same chain as the durable ones."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence

from ..errors import LedgerError
from ._chain import (
    _TAGS,
    Progress,
    Record,
    Verification,
    _sha256,
    counted,
    make_record,
    verify_records,
)
from ._events import EffectClaimed, Event, decode_event
from ._follow import Follow, Followers, appending
from ._recordable import PAYLOADS
from ._recordable import payload as checked_payload

_log = logging.getLogger("agent_adapter.ledger")

__all__ = ["MemoryLedger"]


class MemoryLedger(Followers):
    """Events in a list; lost with the process. For tests, demos and ephemeral agents.

    Appends are synchronous under the hood (no await between taking the last hash and
    storing the record), so concurrent tasks always get a gap-free, valid chain.

    Several executors may share one MemoryLedger: each follows it (``follow``), and each
    append hands its events to every follower but the one appending, before it returns.
    Since an executor checks an effect key and appends its claim with no await between,
    the others have applied that claim before any of them can check the key again: a
    key runs once across them. (A subclass that awaits inside ``append_many`` before
    storing gives that up: it has no write transaction to refuse a claim in.)
    """

    def __init__(self, *, key: bytes | None = None) -> None:
        self._key = key
        self._records: list[Record] = []
        self._last_hash = ""
        self._closed = False
        self._follows: tuple[Follow, ...] = ()

    @property
    def keyed(self) -> bool:
        """True when the chain's hashes are HMACs (``key=``)."""
        return self._key is not None

    @property
    def records(self) -> list[Record]:
        """The stored records, in seq order (the list itself: tests may tamper with it)."""
        return self._records

    async def append(self, event: Event) -> Event:
        """Store ``event``; returns it with ``seq``, ``prev`` and ``hash`` set.

        Raises ``UnrecordableEvent`` (nothing stored) for an event that would not read back.
        """
        await self.append_many((event,))
        return event

    async def append_many(self, events: Sequence[Event]) -> list[Event]:
        """Store ``events`` contiguously, in order: all of them, or none (``UnrecordableEvent``)."""
        self.append_now(events)
        return list(events)

    def append_now(self, events: Sequence[Event]) -> None:
        """``append_many`` without the coroutine: stores ``events`` before it returns.

        The executor calls it on the per-call path (two appends per call) when the ledger
        is a MemoryLedger whose appends are not overridden; everything else awaits
        ``append_many``, which does exactly this.
        """
        owner = appending.get()
        if owner is not None and owner.closed:
            self._refuse_closed(owner, events)
        start = len(self._records)
        if self._key is not None:
            records = []
            seq, prev = start, self._last_hash
            try:
                for event in events:
                    seq += 1
                    record = make_record(event, seq, prev, self._key)
                    records.append(record)
                    prev = record.hash
            except Exception:
                _unchain(events)
                raise
            self._records.extend(records)
            self._last_hash = prev
            if self._follows:
                self._hand_over(owner, start)
            return
        # make_record inlined for the unkeyed chain (the executor's per-call path appends
        # 2-4 events at a time): the same payload, hash and Record, with the lookups
        # hoisted out of the loop. No await inside: the chain stays gap-free. The records
        # are stored once all of them are built: a refused event leaves nothing behind.
        tags = _TAGS
        payloads = PAYLOADS
        seq = start
        prev = self._last_hash
        built: list[Record] = []
        keep = built.append
        try:
            for event in events:
                if event.seq or event.prev or event.hash:
                    event.seq = 0
                    event.prev = ""
                    event.hash = ""
                cls = type(event)
                encode = payloads.get(cls)
                payload = encode(event) if encode is not None else checked_payload(event)
                seq += 1
                digest = _sha256(b"%d:%b:%b" % (seq, prev.encode(), payload)).hexdigest()
                event.seq = seq
                event.prev = prev
                event.hash = digest
                tag = tags.get(cls)
                if tag is None:
                    tag = tags[cls] = event.type
                keep(
                    Record(
                        seq=seq,
                        type=tag,
                        run_id=event.run_id,
                        call_id=event.call_id,
                        tool=event.tool,
                        ts=event.ts,
                        payload=payload,
                        prev=prev,
                        hash=digest,
                    )
                )
                prev = digest
        except Exception:
            _unchain(events)
            raise
        self._records.extend(built)
        self._last_hash = prev
        follows = self._follows
        if follows and (len(follows) > 1 or follows[0] is not owner):
            self._hand_over(owner, start)

    # -- followers (several executors on one object) -------------------------------------

    def follow(self, apply: Callable[[Event], None], after: int) -> Follow:
        """Hand ``apply`` every event someone else appends from now on (``Executor.start``
        calls it), and at once those past seq ``after`` (what it has read already).

        Each append hands its events (decoded from the stored bytes, as ``read`` returns
        them) to every follower but its own, in seq order, before it returns; an append
        is a follower's own while ``_follow.appending`` holds it (the executor sets it).
        ``close()`` on the returned ``Follow`` ends it (``Executor.close`` does).
        """
        follower = Follow(self, apply, after)
        for record in self._records[after:]:
            _hand(follower, _decoded(record))
        return self._add_follower(follower)

    async def catch_up(self) -> None:
        """Nothing to wait for: every append hands its events to the followers before it
        returns. Present for the protocol of a shared store."""

    def _hand_over(self, owner: Follow | None, start: int) -> None:
        """Hand the records from ``start`` on to every follower but ``owner``."""
        others = [f for f in self._follows if f is not owner]
        if not others:
            return
        events = [_decoded(record) for record in self._records[start:]]
        for follower in others:
            for event in events:
                _hand(follower, event)

    def _refuse_closed(self, owner: Follow, events: Sequence[Event]) -> None:
        # A closed executor no longer hears the others: its claim could run an effect
        # twice. Its other events (outcomes of calls it had running) are kept.
        if owner.ledger is self and any(isinstance(e, EffectClaimed) for e in events):
            raise LedgerError(
                "the executor that made this call was closed; its effect claim was not "
                "written and its body does not run"
            )

    async def read(
        self, after: int = 0, *, run_id: str | None = None, call_id: str | None = None
    ) -> AsyncIterator[Event]:
        """Events with seq > ``after``, optionally of one run and/or one call.

        Events are decoded from the stored bytes, as a durable store would return them.
        """
        for record in self._records[after:]:
            if run_id is not None and record.run_id != run_id:
                continue
            if call_id is not None and record.call_id != call_id:
                continue
            yield _decoded(record)

    async def read_records(self, after: int = 0) -> AsyncIterator[Record]:
        """Stored records with seq > ``after``, in seq order, payloads as stored."""
        for record in self._records[after:]:
            yield record

    async def verify(self, *, deep: bool = False, progress: Progress | None = None) -> Verification:
        """Check the whole chain. ``deep`` checks nothing more here: the records are the
        whole store (there is no index or file that could be damaged apart from them).
        ``progress(done, total)`` is called every ``PROGRESS_EVERY`` records."""
        if progress is None:
            return verify_records(self._records, self._key)
        return verify_records(counted(self._records, progress, len(self._records)), self._key)

    async def close(self) -> None:
        """Nothing to release; present for the protocol."""
        self._closed = True


def _decoded(record: Record) -> Event:
    event = decode_event(record.payload)
    event.seq, event.prev, event.hash = record.seq, record.prev, record.hash
    return event


def _hand(follower: Follow, event: Event) -> None:
    try:
        follower.apply(event)
    except Exception:  # a follower's bug must not stop the others' events
        _log.exception("applying seq %d from another executor failed", event.seq)


def _unchain(events: Sequence[Event]) -> None:
    # A refused batch: none of it is stored, so none of it keeps a seq or hash.
    for event in events:
        event.seq, event.prev, event.hash = 0, "", ""
