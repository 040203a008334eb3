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

from ._events import Event, encode_event

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
    """Encode ``event`` and chain it after ``prev``; sets the event's seq, prev and hash."""
    # The payload is encoded with the chain fields at their defaults (left out), so the
    # stored bytes are the event alone and the chain binds them from outside. A new event
    # has them at their defaults already; only a re-appended one needs the reset.
    if event.seq or event.prev or event.hash:
        event.seq = 0
        event.prev = ""
        event.hash = ""
    payload = encode_event(event)
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


def _kind(value: object) -> str:
    """A stored value's kind, in the words of SQLite's storage classes."""
    return {str: "TEXT", bytes: "BLOB", int: "INTEGER", float: "REAL"}.get(
        type(value), "NULL" if value is None else type(value).__name__
    )


def _damage(prev: object, hash_: object, payload: object) -> str:
    """Why a stored record's chain fields are not of the kinds a store writes ('' if they are).

    One changed byte in a database file can turn a TEXT value into a BLOB or an INTEGER
    (the type lives in the record's header): that record is damaged, and hashing or
    comparing it as if it were intact would raise instead of naming it.
    """
    if type(prev) is not str:
        return f"its prev is {_kind(prev)}, not TEXT"
    if type(hash_) is not str:
        return f"its hash is {_kind(hash_)}, not TEXT"
    if type(payload) is not bytes:
        return f"its payload is {_kind(payload)}, not BLOB"
    return ""


def verify_records(records: Iterable[Record], key: bytes | None = None) -> Verification:
    """Check seq continuity (from 1), each ``prev`` link and each hash; name the first bad seq.

    A record whose fields are of the wrong kinds (a damaged file) is named too, never a
    ``TypeError``.
    """
    expected_seq = 1
    prev = ""
    checked = 0
    for record in records:
        if type(record.seq) is not int:
            return Verification(
                ok=False,
                checked=checked,
                first_bad_seq=expected_seq,
                reason=f"seq {expected_seq} is damaged: its seq is {_kind(record.seq)}, "
                "not INTEGER",
            )
        if record.seq != expected_seq:
            bad = min(record.seq, expected_seq)
            return Verification(
                ok=False,
                checked=checked,
                first_bad_seq=bad,
                reason=f"seq {expected_seq} is missing (found {record.seq})",
            )
        damage = _damage(record.prev, record.hash, record.payload)
        if damage:
            return Verification(
                ok=False,
                checked=checked,
                first_bad_seq=record.seq,
                reason=f"seq {record.seq} is damaged: {damage}",
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
