"""The hash chain: stored records, their hashes, and verification.

A stored record is the event's encoded bytes (``payload``) plus the columns a store
indexes. Each record's hash covers its seq, the previous record's hash and the payload
bytes exactly as stored, so verification never depends on decoding (and a newer
version's fields are covered too). With a key, every hash is an HMAC-SHA256, so only
the key's holder can re-chain a ledger after editing it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

import msgspec

from ._events import Event
from ._recordable import payload as checked_payload

__all__ = ["Record", "Verification", "chain_hash", "make_record", "verify_records"]


class Verification(msgspec.Struct, frozen=True, kw_only=True):
    """The result of ``Ledger.verify()``.

    ``ok`` is True only when every record was checked and is intact; ``first_bad_seq``
    names the first record that is missing, reordered or altered. A keyed chain checked
    without its key is not ``ok``: ``reason`` says it cannot be checked.
    """

    ok: bool
    checked: int
    first_bad_seq: int | None = None
    reason: str = ""


class Record(msgspec.Struct, kw_only=True):
    """One stored event: indexed columns, the payload bytes, and the chain fields."""

    seq: int
    type: str
    run_id: str
    call_id: str
    tool: str
    ts: float
    payload: bytes
    prev: str
    hash: str


_sha256 = hashlib.sha256

# Event class -> its tag, filled on first use: the ``type`` property costs a descriptor
# call and two attribute lookups per record otherwise. Classes only; tags are permanent.
_TAGS: dict[type, str] = {}


def chain_hash(seq: int, prev: str, payload: bytes, key: bytes | None = None) -> str:
    """H(seq, prev hash, payload): SHA-256, or HMAC-SHA256 with ``key``."""
    message = b"%d:%b:%b" % (seq, prev.encode(), payload)
    if key is None:
        return _sha256(message).hexdigest()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def make_record(event: Event, seq: int, prev: str, key: bytes | None = None) -> Record:
    """Encode ``event`` and chain it after ``prev``; sets the event's seq, prev and hash.

    Raises ``UnrecordableEvent`` (nothing set) for an event that would not read back.
    """
    # The payload is encoded with the chain fields at their defaults (left out), so the
    # stored bytes are the event alone and the chain binds them from outside. A new event
    # has them at their defaults already; only a re-appended one needs the reset.
    if event.seq or event.prev or event.hash:
        event.seq = 0
        event.prev = ""
        event.hash = ""
    payload = checked_payload(event)
    if key is None:
        # chain_hash inlined: this runs once per appended event.
        digest = _sha256(b"%d:%b:%b" % (seq, prev.encode(), payload)).hexdigest()
    else:
        digest = chain_hash(seq, prev, payload, key)
    event.seq = seq
    event.prev = prev
    event.hash = digest
    return Record(
        seq=seq,
        type=event.type,
        run_id=event.run_id,
        call_id=event.call_id,
        tool=event.tool,
        ts=event.ts,
        payload=payload,
        prev=prev,
        hash=digest,
    )


#: The reason of a keyed chain none of whose hashes verifies under the key it was given.
WRONG_KEY = "no event's hash verifies under this key: wrong key, or the ledger was altered"


def _any_verifies(records: Iterable[Record], key: bytes) -> bool:
    """True when the hash of one of ``records`` verifies under ``key`` (each covers its
    own seq and stored ``prev``, so it is checked alone)."""
    for record in records:
        stored = record.hash
        computed = chain_hash(record.seq, record.prev, record.payload, key)
        if stored.isascii() and hmac.compare_digest(computed, stored):
            return True
    return False


def verify_records(records: Iterable[Record], key: bytes | None = None) -> Verification:
    """Check seq continuity (from 1), each ``prev`` link and each hash; name the first bad seq.

    With a ``key`` under which no hash verifies, no seq is named: ``reason`` is
    ``WRONG_KEY`` (a wrong key, or a ledger altered throughout, cannot be told apart).
    """
    expected_seq = 1
    prev = ""
    checked = 0
    records = iter(records)
    for record in records:
        if record.seq != expected_seq:
            bad = min(record.seq, expected_seq)
            return Verification(
                ok=False,
                checked=checked,
                first_bad_seq=bad,
                reason=f"seq {expected_seq} is missing (found {record.seq})",
            )
        if record.prev != prev:
            return Verification(
                ok=False,
                checked=checked,
                first_bad_seq=record.seq,
                reason=f"seq {record.seq} does not link to the hash of seq {record.seq - 1}",
            )
        stored = record.hash
        # A tampered hash may hold any text; compare_digest refuses non-ASCII str (TypeError),
        # and such a hash is altered by definition.
        if not stored.isascii() or not hmac.compare_digest(
            chain_hash(record.seq, prev, record.payload, key), stored
        ):
            if key is not None and checked == 0 and not _any_verifies(records, key):
                # Under a wrong key no hash verifies, exactly as when every record was
                # altered: nothing says which, so neither is claimed. One later hash that
                # verifies proves the key, and then this record was altered.
                return Verification(ok=False, checked=0, reason=WRONG_KEY)
            return Verification(
                ok=False,
                checked=checked,
                first_bad_seq=record.seq,
                reason=f"seq {record.seq} does not match its hash (altered)",
            )
        prev = record.hash
        expected_seq += 1
        checked += 1
    return Verification(ok=True, checked=checked)
