"""``SQLiteLedger.verify`` in the reader thread: the chain, the columns, the head, the mark.

In order, each naming the first bad seq (the first finding wins):

1. The records (``verify_records``): seq continuity, links, hashes of the stored bytes,
   and the kinds of the stored values (a changed byte in a record's header can turn a
   TEXT hash into a BLOB). A row SQLite cannot hand back (text that is not UTF-8, a
   corrupt page) ends the scan: not ok at the seq after the last one read.
2. The indexed columns against the payload: reads filter on the columns, so a column
   that says another run could hide an event from a read by run.
3. The head in meta (``check_head``, in ``_head``): events deleted from the end.
4. The mark beside the file (``_sqlite_mark``): events lost with a damaged WAL, which
   takes the head back with them.
5. The run_id and (call_id, run_id) indexes against the table (``_INDEXES``): the
   executor's recall of a run reads by run, so an index entry that names another run or
   seq (a changed byte in an index page, every record intact) would hide an event from
   it. Each index is scanned alone (a covering scan, in the same read transaction as
   the records) and the sum of the hashes of its (key, seq) entries compared with the
   same sum over the records; on a difference ``PRAGMA integrity_check`` names the row.
6. With ``deep``, ``PRAGMA integrity_check``: the b-trees, every page and every index
   entry. It reads the whole file: a deliberate check.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterator
from typing import Any

from ..errors import LedgerError
from ._chain import Progress, Record, Verification, columns_match, counted, verify_records
from ._head import check_head, parse_head_seq
from ._sqlite_files import _CORRUPT, _NOTADB, _primary_code, _translate
from ._sqlite_head import _READ_HEAD
from ._sqlite_mark import (
    Mark,
    MarkUnreadable,
    lost_message,
    mark_path,
    missing_message,
    read_mark,
    replaced_message,
)

_COLUMNS = "SELECT seq, type, run_id, call_id, tool, ts, payload, prev, hash FROM events"
_SCAN = f"{_COLUMNS} ORDER BY seq"
# One row per statement: LIMIT 1 stops before SQLite reads the row after it.
_NEXT = f"{_COLUMNS} WHERE seq > ? ORDER BY seq LIMIT 1"
# integrity_check names a row only as "row N missing from index X"; N is the rowid, the seq.
_MISSING_ROW = re.compile(r"^row (\d+) missing from index ")
#: Each index reads use, and the covering scan of its (key columns, seq) entries.
_INDEXES = {
    "events_run_id": "SELECT run_id, seq FROM events INDEXED BY events_run_id",
    "events_call_run": "SELECT call_id, run_id, seq FROM events INDEXED BY events_call_run",
}


def unreadable_row(exc: sqlite3.Error) -> bool:
    """True when ``exc`` says a stored row is damaged, not that the file is busy or gone.

    SQLite reports a corrupt page (SQLITE_CORRUPT, SQLITE_NOTADB); the sqlite3 module
    reports TEXT that is not UTF-8 on its own, without a code.
    """
    if _primary_code(exc) in (_CORRUPT, _NOTADB):
        return True
    return isinstance(exc, sqlite3.OperationalError) and str(exc).startswith(
        "Could not decode to UTF-8"
    )


def _read_mark(path: str, key: bytes | None) -> tuple[Mark | None, str]:
    try:
        return read_mark(path, key), ""
    except MarkUnreadable as exc:
        return None, exc.reason


def _verify_file(
    conn: sqlite3.Connection,
    *,
    path: str,
    key: bytes | None,
    wait_s: float,
    deep: bool = False,
    progress: Progress | None = None,
) -> Verification | None:
    """``SQLiteLedger.verify`` in the reader thread (see the module's docstring).

    None when the file was marked keyed since it was opened and no key was given (the
    caller says it cannot check). ``progress`` is told how far the scan is (``counted``).
    """
    # The hash covers the payload; reads filter on the indexed columns. So the
    # columns must say what the payload says, or a filtered read could hide events.
    mismatch: list[int] = []
    # The seq and hash of the last record, and the hashes at the head's and the mark's seq.
    last_seq, last_hash = [0], [""]
    at_head: list[str] = []
    at_mark: list[str] = []
    head_at = -1
    # Why the scan stopped before the end of the table (a row SQLite could not read).
    stopped: list[str] = []
    # Sums of the hashes of (run_id, seq) and (call_id, run_id, seq) over the records:
    # what each index must hold (an order-free digest of a multiset).
    sums = {"events_run_id": 0, "events_call_run": 0}
    # Read before the snapshot: a writer writes the mark after its commit, so the
    # snapshot taken next holds at least what the mark names (no false alarm).
    mark, mark_problem = _read_mark(path, key)
    mark_at = mark.seq if mark is not None else -1

    def rows(cursor: sqlite3.Cursor) -> Iterator[Any]:
        # At a row SQLite cannot hand back, read on one row per statement and stop at the
        # first that fails: the sqlite3 module steps a row ahead, so the scan may fail
        # while the row after the last it returned is intact.
        last = 0
        try:
            for row in cursor:
                last = row[0]
                yield row
            return
        except sqlite3.Error as exc:
            if not unreadable_row(exc):
                raise
        while True:
            try:
                row = conn.execute(_NEXT, (last,)).fetchone()
            except sqlite3.Error as exc:
                if not unreadable_row(exc):
                    raise
                stopped.append(str(exc))
                return
            if row is None:
                return
            last = row[0]
            yield row

    def records(cursor: sqlite3.Cursor) -> Iterator[Record]:
        for row in rows(cursor):
            record = Record(
                seq=row[0],
                type=row[1],
                run_id=row[2],
                call_id=row[3],
                tool=row[4],
                ts=row[5],
                payload=row[6],
                prev=row[7],
                hash=row[8],
            )
            if not mismatch and not columns_match(record):
                mismatch.append(record.seq)
            sums["events_run_id"] += hash((record.run_id, record.seq))
            sums["events_call_run"] += hash((record.call_id, record.run_id, record.seq))
            if record.seq == head_at:
                at_head.append(record.hash)
            if record.seq == mark_at:
                at_mark.append(record.hash)
            last_seq[0], last_hash[0] = record.seq, record.hash
            yield record

    try:
        # One read transaction: the head and the records are of one snapshot,
        # or a commit between the two reads would look like a truncation.
        conn.execute("BEGIN")
        try:
            meta = {str(k): str(v) for k, v in conn.execute(_READ_HEAD)}
            if meta.get("head_seq") is not None:
                with contextlib.suppress(LedgerError):
                    head_at = parse_head_seq(meta["head_seq"], path)
            cursor = conn.execute(_SCAN)
            scanned: Iterator[Record] = records(cursor)
            if progress is not None:
                scanned = counted(scanned, progress, max(head_at, 0))
            result = verify_records(scanned, key, marked_keyed=meta.get("keyed") == "1")
            cursor.close()
            # Same snapshot as the records: a commit in between is not a difference.
            unlike = _unlike_indexes(conn, sums) if result.ok and not stopped else []
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")  # it only read
    except sqlite3.Error as exc:
        raise _translate(path, "verifying", exc, wait_s) from exc
    # A broken hash or link at or before that row is the stronger finding.
    bad = result.first_bad_seq
    if mismatch and (result.ok or (bad is not None and mismatch[0] < bad)):
        seq = mismatch[0]
        return Verification(
            ok=False,
            checked=seq - 1,
            first_bad_seq=seq,
            reason=f"seq {seq}: its indexed columns do not match its payload (altered)",
        )
    if not result.ok:
        return result
    if stopped:
        seq = last_seq[0] + 1
        return Verification(
            ok=False,
            checked=last_seq[0],
            first_bad_seq=seq,
            reason=f"seq {seq} cannot be read: the file is damaged ({stopped[0]})",
        )
    if key is None and meta.get("keyed") == "1":
        return None  # marked keyed since this ledger was opened
    hash_at_head = at_head[0] if at_head else None
    head = check_head(path, result.checked, last_hash[0], hash_at_head, meta, key)
    if not head.ok:
        return head
    found = _check_mark(path, result.checked, last_hash[0], mark, mark_problem, at_mark)
    if found is not None:
        return found
    if deep or unlike:
        problems = _integrity(conn, path, wait_s)
        if problems:
            return _damaged_file(problems)
        if unlike:  # (integrity_check found nothing it could name)
            return Verification(
                ok=False,
                checked=0,
                first_bad_seq=1,
                reason=(
                    f"the index {unlike[0]} does not hold what the table does: reads by run "
                    "or call may miss events"
                ),
            )
    if mark is None and not mark_problem:
        note = (
            missing_message(path, result.checked)
            if result.checked
            else f"no mark file beside it ({mark_path(path)}): events lost with a damaged "
            "WAL cannot be detected until a writer opens it"
        )
        return Verification(
            ok=True, checked=head.checked, reason=f"{head.reason}; {note}" if head.reason else note
        )
    return head


def _unlike_indexes(conn: sqlite3.Connection, sums: dict[str, int]) -> list[str]:
    """The indexes whose entries differ from the records' (``sums``), in the read
    transaction; one SQLite cannot read counts as differing. A file without an index (an
    earlier version's whose migration could not build it) is read without it."""
    present = {
        str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
    }
    unlike = []
    for name, scan in _INDEXES.items():
        if name not in present:
            continue
        try:
            # sum(map(hash, ...)): the rows are (key..., seq) tuples, hashed in C.
            total = sum(map(hash, conn.execute(scan)))
        except sqlite3.Error as exc:
            if not unreadable_row(exc):
                raise
            unlike.append(name)
            continue
        if total != sums[name]:
            unlike.append(name)
    return unlike


def _check_mark(
    path: str,
    last_seq: int,
    last_hash: str,
    mark: Mark | None,
    problem: str,
    at_mark: list[str],
) -> Verification | None:
    """After the chain and the head verified: is the table at least as long as its mark?"""
    if problem:
        # Nothing after the last intact record can be vouched for without a sound mark.
        return Verification(ok=False, checked=last_seq, first_bad_seq=last_seq + 1, reason=problem)
    if mark is None or mark.seq == 0:
        return None
    if mark.seq > last_seq:
        return Verification(
            ok=False,
            checked=last_seq,
            first_bad_seq=last_seq + 1,
            reason=lost_message(path, last_seq, mark),
        )
    stored = last_hash if mark.seq == last_seq else (at_mark[0] if at_mark else "")
    if stored != mark.hash:
        return Verification(
            ok=False,
            checked=mark.seq - 1,
            first_bad_seq=mark.seq,
            reason=replaced_message(path, mark),
        )
    return None


def _integrity(conn: sqlite3.Connection, path: str, wait_s: float) -> list[str]:
    """What ``PRAGMA integrity_check`` found ([] when the file is sound)."""
    try:
        found = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
    except sqlite3.Error as exc:
        if not unreadable_row(exc):
            raise _translate(path, "verifying", exc, wait_s) from exc
        return [str(exc)]
    return [] if found == ["ok"] else found


def _damaged_file(problems: list[str]) -> Verification:
    """Not ok, at the first seq an index misses; from seq 1 when no row is named (a
    damaged b-tree may hide any row from a read by run or call)."""
    rows = [int(m.group(1)) for m in map(_MISSING_ROW.match, problems) if m is not None]
    seq = min(rows) if rows else 1
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return Verification(
        ok=False,
        checked=seq - 1,
        first_bad_seq=seq,
        reason=(
            f"the file is damaged (PRAGMA integrity_check: {problems[0]}{more}): reads by "
            "run or call may miss events or return another's"
        ),
    )
