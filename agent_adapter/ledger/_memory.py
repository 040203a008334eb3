"""``MemoryLedger``: the in-process store, with the same chain as the durable ones."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from ._chain import _TAGS, Record, Verification, _sha256, make_record, verify_records
from ._events import Event, _encoder, decode_event

__all__ = ["MemoryLedger"]


class MemoryLedger:
    """Events in a list; lost with the process. For tests, demos and ephemeral agents.

    Appends are synchronous under the hood (no await between taking the last hash and
    storing the record), so concurrent tasks always get a gap-free, valid chain.
    """

    def __init__(self, *, key: bytes | None = None) -> None:
        self._key = key
        self._records: list[Record] = []
        self._last_hash = ""
        self._closed = False

    @property
    def records(self) -> list[Record]:
        """The stored records, in seq order (the list itself: tests may tamper with it)."""
        return self._records

    def _append(self, event: Event) -> Event:
        record = make_record(event, len(self._records) + 1, self._last_hash, self._key)
        self._records.append(record)
        self._last_hash = record.hash
        return event

    async def append(self, event: Event) -> Event:
        """Store ``event``; returns it with ``seq``, ``prev`` and ``hash`` set."""
        return self._append(event)

    async def append_many(self, events: Sequence[Event]) -> list[Event]:
        """Store ``events`` contiguously, in order."""
        if self._key is not None:
            return [self._append(event) for event in events]
        # make_record inlined for the unkeyed chain (the executor's per-call path appends
        # 2-4 events at a time): the same payload, hash and Record, with the lookups
        # hoisted out of the loop. No await inside: the chain stays gap-free.
        records = self._records
        store = records.append
        encode = _encoder.encode
        tags = _TAGS
        seq = len(records)
        prev = self._last_hash
        for event in events:
            if event.seq or event.prev or event.hash:
                event.seq = 0
                event.prev = ""
                event.hash = ""
            payload = encode(event)
            seq += 1
            digest = _sha256(b"%d:%b:%b" % (seq, prev.encode(), payload)).hexdigest()
            event.seq = seq
            event.prev = prev
            event.hash = digest
            cls = type(event)
            tag = tags.get(cls)
            if tag is None:
                tag = tags[cls] = event.type
            store(
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
        self._last_hash = prev
        return list(events)

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
            event = decode_event(record.payload)
            event.seq, event.prev, event.hash = record.seq, record.prev, record.hash
            yield event

    async def verify(self, *, deep: bool = False) -> Verification:
        """Check the whole chain. ``deep`` checks nothing more here: the records are the
        whole store (there is no index or file that could be damaged apart from them)."""
        return verify_records(self._records, self._key)

    async def close(self) -> None:
        """Nothing to release; present for the protocol."""
        self._closed = True
