"""A ledger's authenticated head, shared by the stores (SQLite's meta rows, Postgres's
head row): its MAC and what ``verify()`` checks of it after the chain.

Every append transaction also stores the ledger's head: the last seq and hash and a MAC,
a ``chain_hash`` over them and the keyed flag (see ``head_mac``). A chain alone cannot
show that events were deleted from its end, since what remains still links; the head
can. With a key the MAC is an HMAC, so deleting the tail and rewriting the head needs
the key; without one it is plain SHA-256, which catches an accidental truncation (a bad
copy, rows deleted by hand) but not a deliberate one. ``check_head`` is what ``verify()``
checks once the records verified: does the chain end where its head says? Where each
store keeps its head, and how it reads and writes it, is the store's (``_sqlite_head``,
``_postgres_writer``).
"""

from __future__ import annotations

import hmac

from ..errors import LedgerError
from ._chain import Verification, chain_hash

__all__ = ["check_head", "head_mac", "parse_head_seq"]

# The meta rows (names) of a head; a store without meta rows passes its head as these.
_HEAD_NAMES = ("head_seq", "head_hash", "head_mac")
# What the head's MAC covers besides seq and hash: the keyed flag. Not JSON, so a head
# MAC can never equal a record's hash (whose payload is an encoded event).
_HEAD_KEYED, _HEAD_UNKEYED = b"head keyed=1", b"head keyed=0"


def head_mac(seq: int, hash_: str, key: bytes | None) -> str:
    """The head's MAC: ``chain_hash`` over (seq, hash, keyed flag), an HMAC with ``key``.

    The flag is ``key is not None``: a keyed ledger's head is an HMAC over "keyed=1",
    an unkeyed one's is plain SHA-256 over "keyed=0". So a key-holder can tell that a
    meta 'keyed' flag of 0 was altered: the head still verifies under the key.
    """
    return chain_hash(seq, hash_, _HEAD_KEYED if key is not None else _HEAD_UNKEYED, key)


def parse_head_seq(value: object, path: str) -> int:
    """A stored head seq as an int; ``LedgerError`` naming ``path`` when it is not one."""
    try:
        seq = int(str(value))
    except ValueError:
        seq = -1
    if seq < 0:
        raise LedgerError(f"ledger {path}: its head is unreadable (head_seq {value!r})")
    return seq


def check_head(
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
        head_seq = parse_head_seq(meta["head_seq"], path)
    except LedgerError:
        return _bad_head(last_seq, f"the head is unreadable (head_seq {meta['head_seq']!r})")
    head_hash, stored_mac = meta["head_hash"], meta["head_mac"]
    expected = head_mac(head_seq, head_hash, key)
    if not stored_mac.isascii() or not hmac.compare_digest(expected, stored_mac):
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
