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
from collections.abc import Callable, Iterable, Iterator

import msgspec

from ._events import Event, UnknownEvent, decode_event
from ._recordable import payload as checked_payload

__all__ = [
    "PROGRESS_EVERY",
    "Progress",
    "Record",
    "Verification",
    "chain_hash",
    "check_chain",
    "counted",
    "make_record",
    "verify_records",
]

#: ``verify(progress=...)`` is called every this many records (and not at all without it).
PROGRESS_EVERY = 4096
#: ``progress(done, total)``: records checked so far, and how many the store holds (0:
#: not known). Called from the thread that verifies: it must be quick and thread-safe.
Progress = Callable[[int, int], None]


def counted(records: Iterable[Record], progress: Progress, total: int = 0) -> Iterator[Record]:
    """``records`` as they are, telling ``progress`` every ``PROGRESS_EVERY`` of them.

    Only wrapped round a verification that was given a ``progress``: one that was not
    runs the same loop as before, with nothing added per record.
    """
    done = 0
    for record in records:
        yield record
        done += 1
        if not done % PROGRESS_EVERY:
            progress(done, total)


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


#: The reason of a keyed chain none of whose hashes verifies under the key it was given.
WRONG_KEY = "no event's hash verifies under this key: wrong key, or the ledger was altered"
#: The same, for a ledger whose meta says it was written without a key.
NO_KEY = (
    "the ledger has no key (it is marked as written without one) and no event's hash "
    "verifies under this key: check it without the key (if it was written with this key, "
    "it was altered)"
)


def _any_verifies(records: Iterable[Record], key: bytes) -> bool:
    """True when the hash of one of ``records`` verifies under ``key`` (each covers its
    own seq and stored ``prev``, so it is checked alone)."""
    for record in records:
        stored = record.hash
        computed = chain_hash(record.seq, record.prev, record.payload, key)
        if stored.isascii() and hmac.compare_digest(computed, stored):
            return True
    return False


def verify_records(
    records: Iterable[Record], key: bytes | None = None, *, marked_keyed: bool = True
) -> Verification:
    """Check seq continuity (from 1), each ``prev`` link and each hash; name the first bad seq.

    A record whose fields are of the wrong kinds (a damaged file) is named too, never a
    ``TypeError``.
    With a ``key`` under which no hash verifies, no seq is named: ``reason`` is
    ``WRONG_KEY`` (a wrong key, or a ledger altered throughout, cannot be told apart), or
    ``NO_KEY`` when the store marks the ledger as written without a key (``marked_keyed``
    False): a key given for a ledger that has none is not a wrong one.
    """
    expected_seq = 1
    prev = ""
    checked = 0
    records = iter(records)
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
            if key is not None and checked == 0 and not _any_verifies(records, key):
                # Under a wrong key no hash verifies, exactly as when every record was
                # altered: nothing says which, so neither is claimed. One later hash that
                # verifies proves the key, and then this record was altered.
                return Verification(
                    ok=False, checked=0, reason=WRONG_KEY if marked_keyed else NO_KEY
                )
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


def columns_match(record: Record) -> bool:
    """True when the indexed columns of ``record`` are those of its payload's event.

    The hash covers the payload; reads filter on the indexed columns. So ``verify()``
    of every store checks that the columns say what the payload says, or a filtered
    read could hide events.
    """
    try:
        event = decode_event(record.payload)
    except Exception:
        return False
    # An event of a type this version does not know decodes as UnknownEvent.
    kind = event.original_type if isinstance(event, UnknownEvent) else event.type
    return (kind, event.run_id, event.call_id, event.tool, event.ts) == (
        record.type,
        record.run_id,
        record.call_id,
        record.tool,
        record.ts,
    )


def check_chain(
    links: Iterable[tuple[int, str, str, bytes | None]],
    key: bytes | None = None,
    *,
    reencoded: bool = False,
) -> Verification:
    """Check a chain that comes without its store: ``(seq, prev, hash, payload)`` per event.

    For an exported file, or events ``replay`` re-encoded. The checks are those of
    ``verify_records`` (seq continuity from 1, each ``prev`` link, each hash), with two
    differences, because no store says what the chain is:

    - Whether the hashes are HMACs is not known. A hash that does not match is reported
      as altered only when some other event's hash does match (so the chain is checked
      with the right key, or rightly without one); when none matches, the chain *cannot
      be checked* (``ok`` False, ``first_bad_seq`` None): a keyed chain without its key
      or with another one, or every event altered. Never ok, never a false "altered".
    - ``payload`` None marks an event whose bytes are not at hand (one this version
      cannot re-encode byte for byte): its links are checked, its hash is not, and the
      result is not ok ("cannot be checked", naming the first such seq) unless a
      definite problem is found.

    ``reencoded``: the payloads were re-encoded from decoded events (``replay``), not
    read as stored. An event of a newer version with fields this one does not know
    decodes without them and re-encodes to other bytes: it is reported as not matching
    its hash (never as ok), and the reason says so and where the exact check is.

    A definite problem (a missing or reordered seq, a broken link, an altered event) is
    reported at the first place it occurs, as ``verify_records`` reports it.
    """
    expected_seq = 1
    last_hash = ""
    count = 0
    matched = False
    definite: Verification | None = None
    mismatch: Verification | None = None
    unchecked: list[int] = []
    altered = (
        "altered, or written by a newer version with fields this one does not read: "
        "Ledger.verify() checks the stored bytes"
        if reencoded
        else "altered"
    )
    for seq, prev, stored, payload in links:
        count += 1
        if definite is None:
            if seq != expected_seq:
                definite = Verification(
                    ok=False,
                    checked=count - 1,
                    first_bad_seq=min(seq, expected_seq),
                    reason=f"seq {expected_seq} is missing (found {seq})",
                )
            elif prev != last_hash:
                definite = Verification(
                    ok=False,
                    checked=count - 1,
                    first_bad_seq=seq,
                    reason=f"seq {seq} does not link to the hash of seq {seq - 1}",
                )
        # Each hash covers its own seq and prev fields, so it is checked on past a broken
        # link too: one matching hash anywhere tells an altered event from a keyed chain.
        if payload is None:
            unchecked.append(seq)
        else:
            if key is None:
                # A plain SHA-256 guards no secret: == is as good as compare_digest here.
                good = _sha256(b"%d:%b:%b" % (seq, prev.encode(), payload)).hexdigest() == stored
            else:
                # An HMAC is compared in constant time. A tampered hash may hold any text;
                # compare_digest refuses non-ASCII str, and such a hash is altered.
                computed = chain_hash(seq, prev, payload, key)
                good = stored.isascii() and hmac.compare_digest(computed, stored)
            if good:
                matched = True
            elif mismatch is None:
                mismatch = Verification(
                    ok=False,
                    checked=count - 1,
                    first_bad_seq=seq,
                    reason=f"seq {seq} does not match its hash ({altered})",
                )
        if definite is None:
            expected_seq = seq + 1
        last_hash = stored
    if mismatch is not None and matched:
        if definite is None or (mismatch.checked < definite.checked):
            return mismatch
    if definite is not None:
        return definite
    if mismatch is not None:
        return Verification(
            ok=False,
            checked=0,
            reason=(
                "no event's hash verifies under this key: a wrong key, or a chain written "
                "(or rewritten) without it"
                if key is not None
                else "no event's hash is the SHA-256 of its bytes: the chain is keyed (HMAC) "
                "and cannot be checked without its key, or every event was altered"
            ),
        )
    if unchecked:
        more = f" (and {len(unchecked) - 1} more)" if len(unchecked) > 1 else ""
        return Verification(
            ok=False,
            checked=count - len(unchecked),
            reason=(
                f"seq {unchecked[0]}{more} cannot be re-encoded to its stored bytes by this "
                "version (an event type it does not know, written by a newer one): its hash "
                "is not checked; check the stored bytes with Ledger.verify() or "
                "`agent-adapter ledger verify`"
            ),
        )
    return Verification(ok=True, checked=count)
