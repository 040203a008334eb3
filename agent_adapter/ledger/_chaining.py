"""Chaining one batch of a group commit, shared by the stores that have a writer.

In its write transaction, each writer (SQLite's thread, Postgres's task) chains the
batches it took after the tail it read (or expected): ``chain_batch`` refuses a batch
whose effect claim another writer or an earlier batch of the commit took first (only
that caller's events: the others still commit), encodes each event and hashes it onto
the chain, and returns the rows in the column order of the stores' inserts. A refused
or failed batch is left unchained (``unchain``), so that a retried append starts clean.
"""

from __future__ import annotations

from typing import Any

from ..errors import LedgerError
from ._batches import Batch
from ._chain import _TAGS, _sha256, chain_hash
from ._events import EffectClaimed, Event
from ._follow import Follow
from ._recordable import PAYLOADS, UnrecordableEvent
from ._recordable import payload as checked_payload

__all__ = ["chain_batch", "mixed", "unchain"]


def mixed(batches: list[Batch]) -> bool:
    """Whether ``batches`` have more than one owner (nobody counts as one)."""
    first = batches[0].owner
    return any(batch.owner is not first for batch in batches)


def chain_batch(
    batch: Batch,
    seq: int,
    prev: str,
    key: bytes | None,
    where: str,
    foreign: list[Event],
    here: dict[str, tuple[int, Follow | None]] | None,
) -> tuple[list[tuple[Any, ...]], int, str] | None:
    """One caller's batch in a group commit, chained after ``seq``/``prev``: its rows
    and the new ``(seq, prev)``; or None when it is refused (``batch.error`` set, its
    events unchained): an effect claim of a closed executor, a claim another writer's
    events (``foreign``) or an earlier batch of this commit (``here``) took first, or an
    event that cannot be recorded. Only this caller's events are refused; the others
    still commit. Both writer stores call it in their transaction."""
    owner = batch.owner
    if owner is not None:
        if owner.closed:
            if any(isinstance(e, EffectClaimed) for e in batch.events):
                # Its projection no longer hears the others: its claim could run an
                # effect twice.
                batch.error = LedgerError(
                    f"ledger {where}: the executor that made this call was closed; its "
                    "effect claim was not written and its body does not run"
                )
                unchain(batch.events)
                return None
        else:
            taken = owner.refused(batch.events, batch.horizon, foreign, here)
            if taken is not None:
                batch.error = taken
                unchain(batch.events)
                return None
    chained: list[tuple[Any, ...]] = []
    keep = chained.append
    tags, payloads = _TAGS, PAYLOADS
    try:
        at, link = seq, prev
        # make_record inlined (this runs once per appended event, and the writer holds
        # the GIL while it does): the same payload and hash, the row built directly in
        # the column order of the stores' inserts (Record's field order) instead of a
        # Record built and taken apart again. tests/test_sqlite_hot_path.py pins it.
        for event in batch.events:
            if event.seq or event.prev or event.hash:
                event.seq = 0
                event.prev = ""
                event.hash = ""
            cls = type(event)
            encode = payloads.get(cls)
            payload = encode(event) if encode is not None else checked_payload(event)
            at += 1
            if key is None:
                digest = _sha256(b"%d:%b:%b" % (at, link.encode(), payload)).hexdigest()
            else:
                digest = chain_hash(at, link, payload, key)
            event.seq = at
            event.prev = link
            event.hash = digest
            tag = tags.get(cls)
            if tag is None:
                tag = tags[cls] = event.type
            keep(
                (at, tag, event.run_id, event.call_id, event.tool, event.ts, payload, link, digest)
            )
            link = digest
    except Exception as exc:
        if isinstance(exc, UnrecordableEvent):
            batch.error = UnrecordableEvent(f"ledger {where}: {exc}", exc.event)
        else:
            batch.error = LedgerError(f"ledger {where}: cannot encode an event: {exc}")
        batch.error.__cause__ = exc
        unchain(batch.events)
        return None
    return chained, at, link


def unchain(events: list[Event]) -> None:
    """Clear the chain fields of events that were not written."""
    for event in events:
        event.seq, event.prev, event.hash = 0, "", ""
