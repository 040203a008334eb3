"""The SQLite ledger's head in meta: its statements, and the refusal to key an unkeyed chain.

Every append transaction also stores the ledger's head in meta: the last seq and hash
(``head_seq``, ``head_hash``) and ``head_mac`` (``_head``: what the head is for, its MAC
and what ``verify()`` checks of it). A WAL damaged after a crash takes the head back with
the events it loses: the mark (``_sqlite_mark``) is kept outside the WAL for that. The
head is one more statement per transaction, not per event, and the writer refuses to
append past a head that is ahead of the table (appending would overwrite the evidence).
A file written before heads were kept has none: it verifies, with a reason saying
deletions from its end cannot be detected, and gets its head on its next append. Two
limits no in-file head can lift: whoever keeps a copy of an older head (all three rows)
can truncate back to it and restore it, and a keyed ledger whose tail and head rows are
both deleted reads as one written before heads were kept.
"""

from __future__ import annotations

import sqlite3

from ..errors import LedgerError
from ._chain import _damage, chain_hash
from ._head import head_mac, parse_head_seq

# The head (None, None without one) beside the last row (all None in an empty table):
# one statement, so reading the head costs the append transaction nothing extra.
_LAST = (
    "SELECT (SELECT value FROM meta WHERE name = 'head_seq'),"
    " (SELECT value FROM meta WHERE name = 'head_hash'),"
    " last.seq, last.prev, last.hash, last.payload"
    " FROM (SELECT 1) LEFT JOIN"
    " (SELECT seq, prev, hash, payload FROM events ORDER BY seq DESC LIMIT 1) AS last"
)
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
        and head_mac(parse_head_seq(head_seq, path), head_hash or "", key) == meta.get("head_mac")
    ):
        raise LedgerError(
            f"ledger {path} is marked unkeyed, but it was written with this key: "
            "its 'keyed' flag was altered"
        )
    raise LedgerError(
        f"ledger {path} was written without a key; a key cannot be added to an existing chain"
    )
