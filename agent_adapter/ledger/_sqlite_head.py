"""The SQLite ledger's authenticated head, and the checks ``verify()`` makes past the chain.

Head. Every append transaction also stores the ledger's head in meta: the last seq and
hash (``head_seq``, ``head_hash``) and ``head_mac``, a ``chain_hash`` over them and the
keyed flag (see ``_head_mac``). A chain alone cannot show that events were deleted from
its end, since what remains still links; the head can. With a key the MAC is an HMAC, so
deleting the tail and rewriting the head needs the key; without one it is plain SHA-256,
which catches an accidental truncation (a bad copy, rows deleted by hand) but not a
deliberate one. A WAL damaged after a crash takes the head back with the events it
loses: the mark (``_sqlite_mark``) is kept outside the WAL for that. The head is one
more statement per transaction, not per event, and the writer refuses to append past a
head that is ahead of the table (appending would overwrite the evidence). A file written
before heads were kept has none: it verifies, with a reason saying deletions from its
end cannot be detected, and gets its head on its next append. Two limits no in-file head
can lift: whoever keeps a copy of an older head (all three rows) can truncate back to it
and restore it, and a keyed ledger whose tail and head rows are both deleted reads as
one written before heads were kept.

Besides the head's SQL and MAC, this holds ``_check_head`` (what ``verify()``, in
``_sqlite_verify``, checks after the chain) and the refusal to add a key to an unkeyed
chain.
"""

from __future__ import annotations

import hmac
import sqlite3

from ..errors import LedgerError
from ._chain import Verification, _damage, chain_hash

# The head (None, None without one) beside the last row (all None in an empty table):
# one statement, so reading the head costs the append transaction nothing extra.
_LAST = (
    "SELECT (SELECT value FROM meta WHERE name = 'head_seq'),"
    " (SELECT value FROM meta WHERE name = 'head_hash'),"
    " last.seq, last.prev, last.hash, last.payload"
    " FROM (SELECT 1) LEFT JOIN"
    " (SELECT seq, prev, hash, payload FROM events ORDER BY seq DESC LIMIT 1) AS last"
)
_HEAD_NAMES = ("head_seq", "head_hash", "head_mac")
_PUT_HEAD = (
    "INSERT OR REPLACE INTO meta (name, value)"
    " VALUES ('head_seq', ?), ('head_hash', ?), ('head_mac', ?)"
)
# Once the rows exist: values only, so the commit rewrites the meta table's page but
# not its name index (REPLACE rewrites both; every page costs WAL bytes at each commit).
_UPDATE_HEAD = (
    "UPDATE meta SET value = CASE name WHEN 'head_seq' THEN ? WHEN 'head_hash' THEN ?"
    " ELSE ? END WHERE name IN ('head_seq', 'head_hash', 'head_mac')"
)
_READ_HEAD = (
    "SELECT name, value FROM meta WHERE name IN ('keyed', 'head_seq', 'head_hash', 'head_mac')"
)
# What the head's MAC covers besides seq and hash: the keyed flag. Not JSON, so a head
# MAC can never equal a record's hash (whose payload is an encoded event).
_HEAD_KEYED, _HEAD_UNKEYED = b"head keyed=1", b"head keyed=0"


def _head_mac(seq: int, hash_: str, key: bytes | None) -> str:
    """The head's MAC: ``chain_hash`` over (seq, hash, keyed flag), an HMAC with ``key``.

    The flag is ``key is not None``: a keyed ledger's head is an HMAC over "keyed=1",
    an unkeyed one's is plain SHA-256 over "keyed=0". So a key-holder can tell that a
    meta 'keyed' flag of 0 was altered: the head still verifies under the key.
    """
    return chain_hash(seq, hash_, _HEAD_KEYED if key is not None else _HEAD_UNKEYED, key)


def _head_seq(value: object, path: str) -> int:
    try:
        seq = int(str(value))
    except ValueError:
        seq = -1
    if seq < 0:
        raise LedgerError(f"ledger {path}: its head is unreadable (head_seq {value!r})")
    return seq


def _check_head(
    path: str,
    last_seq: int,
    last_hash: str,
    hash_at_head: str | None,
    meta: dict[str, str],
    key: bytes | None,
) -> Verification:
    """After records 1..``last_seq`` verified: does the chain end where its head says?

    The rule for the keyed flag: a verifier with the key checks the head under the key
    (an HMAC over "keyed=1"), whatever meta says. So when meta says unkeyed but the
    records (or, in an empty ledger, the head) verify under the key, the ledger was
    written keyed and its flag was altered: not ok. One without the key can check an
    unkeyed ledger's head (plain SHA-256) and a keyed one's not at all.
    """
    names = [name for name in _HEAD_NAMES if name in meta]
    flag_altered = key is not None and meta.get("keyed") != "1" and bool(last_seq or names)
    if not names:
        if flag_altered:
            return _flag_altered(path)
        return Verification(
            ok=True,
            checked=last_seq,
            reason=(
                "no head recorded (the ledger was written before heads were kept): "
                "deletions from its end cannot be detected until an append records one"
            ),
        )
    if len(names) < len(_HEAD_NAMES):
        return _bad_head(last_seq, "the head is incomplete (part of it was deleted)")
    try:
        head_seq = _head_seq(meta["head_seq"], path)
    except LedgerError:
        return _bad_head(last_seq, f"the head is unreadable (head_seq {meta['head_seq']!r})")
    head_hash, head_mac = meta["head_hash"], meta["head_mac"]
    expected = _head_mac(head_seq, head_hash, key)
    if not head_mac.isascii() or not hmac.compare_digest(expected, head_mac):
        if key is not None and meta.get("keyed") != "1":
            return _bad_head(
                last_seq,
                f"ledger {path} is marked unkeyed and its head does not verify under this "
                "key: it was not written with the key (or was rewritten without it)",
            )
        if key is not None and not last_seq:
            # No record vouches for the key: a wrong one cannot be told from an altered
            # head, so no seq is named (as verify_records does for records).
            return Verification(
                ok=False,
                checked=0,
                reason="the head does not verify under this key: wrong key, or the ledger "
                "was altered",
            )
        return _bad_head(
            last_seq,
            f"the head (it says seq {head_seq}) does not match its MAC: it was altered"
            + (", or written without the key" if key is not None else ""),
        )
    if flag_altered:
        return _flag_altered(path)
    if head_seq > last_seq:
        return Verification(
            ok=False,
            checked=last_seq,
            first_bad_seq=last_seq + 1,
            reason=(
                f"the ledger ends at seq {last_seq} but its head says {head_seq}: "
                "events were deleted from the end"
            ),
        )
    if head_hash != (last_hash if head_seq == last_seq else hash_at_head or ""):
        return Verification(
            ok=False,
            checked=head_seq - 1,
            first_bad_seq=head_seq,
            reason=f"seq {head_seq} is not the record its head names (replaced)",
        )
    if head_seq < last_seq:
        # Appended by a writer that keeps no head (a version from before heads).
        return Verification(
            ok=True,
            checked=last_seq,
            reason=(
                f"the head names seq {head_seq} but the ledger ends at seq {last_seq}: "
                f"the events after seq {head_seq} were appended without updating it, so "
                "deleting them would go undetected"
            ),
        )
    return Verification(ok=True, checked=last_seq)


def _bad_head(last_seq: int, reason: str) -> Verification:
    # Nothing after the last intact record can be vouched for without a sound head.
    return Verification(ok=False, checked=last_seq, first_bad_seq=last_seq + 1, reason=reason)


def _flag_altered(path: str) -> Verification:
    # The flag says how every record is checked, from seq 1: none is vouched for.
    return Verification(
        ok=False,
        checked=0,
        first_bad_seq=1,
        reason=(
            f"ledger {path} is marked unkeyed, but it was written with this key: its "
            "'keyed' flag was altered"
        ),
    )


def _refuse_unkeyed_chain(
    conn: sqlite3.Connection, path: str, key: bytes, meta: dict[str, str]
) -> None:
    """LedgerError unless the unkeyed ledger is empty, so that ``key`` can be added."""
    head_seq, head_hash, last_seq, last_prev, last_hash, last_payload = conn.execute(
        _LAST
    ).fetchone()
    if last_seq is None and head_seq in (None, "0"):
        return
    # A record or a head that verifies under the key was written with it: the
    # flag, not the caller, is wrong.
    if (
        last_seq is not None
        and not _damage(last_prev, last_hash, last_payload)
        and chain_hash(last_seq, last_prev, last_payload, key) == last_hash
    ) or (
        head_seq is not None
        and _head_mac(_head_seq(head_seq, path), head_hash or "", key) == meta.get("head_mac")
    ):
        raise LedgerError(
            f"ledger {path} is marked unkeyed, but it was written with this key: "
            "its 'keyed' flag was altered"
        )
    raise LedgerError(
        f"ledger {path} was written without a key; a key cannot be added to an existing chain"
    )
