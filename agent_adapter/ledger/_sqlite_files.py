"""The SQLite ledger's file: its schema, opening it safely, and sqlite3's errors.

Everything here works on a path or a connection, never on a ledger object: the schema
and the meta a ledger file must hold, the read-only probe that runs before anything
opens a file for writing, the snapshot connection a read-only ledger reads through,
and the one place where ``sqlite3`` errors become ``LedgerError`` naming the file.

Files. Opening probes the file read-only first: a non-SQLite file, a corrupt file, an
SQLite file with other tables, or a ledger written by a newer schema raises
``LedgerError`` naming the path, and nothing in it or beside it is changed (the probe
creates no -wal/-shm files).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from ..errors import LedgerError

#: The schema this version writes; files with a higher version are refused.
SCHEMA_VERSION = 1
_FORMAT = "agent-adapter-ledger"
_SQLITE_HEADER = b"SQLite format 3\x00"

#: A read of one call of one run (a repeated call id's step 0, a retried Temporal activity)
#: seeks both ids in the call index: call ids repeat across runs ("c1" in every
#: workflow), so a call_id index alone made it scan every run's "c1". Files made before
#: it hold ``events_call_id (call_id)``; the first writer to open one replaces it
#: (``_MIGRATIONS``); read-only opens read such a file through the old index.
_CALL_INDEX = "CREATE INDEX IF NOT EXISTS events_call_run ON events (call_id, run_id)"
_MIGRATIONS = (_CALL_INDEX, "DROP INDEX IF EXISTS events_call_id")

_SCHEMA = (
    "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE events ("
    " seq INTEGER PRIMARY KEY,"
    " type TEXT NOT NULL,"
    " run_id TEXT NOT NULL,"
    " call_id TEXT NOT NULL,"
    " tool TEXT NOT NULL,"
    " ts REAL NOT NULL,"
    " payload BLOB NOT NULL,"
    " prev TEXT NOT NULL,"
    " hash TEXT NOT NULL)",
    "CREATE INDEX events_run_id ON events (run_id)",
    _CALL_INDEX,
)

# Primary result codes (the low byte of an extended code).
_BUSY, _LOCKED, _READONLY, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 5, 6, 8, 11, 13, 14, 26
# Files beside a ledger that some connection has open (or that a crashed one left).
_JOURNALS = ("-wal", "-journal")
# Snapshot reads torn by a writer that arrived meanwhile are retried this many times.
_SNAPSHOT_TRIES = 5


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _is_busy(exc: sqlite3.Error) -> bool:
    return _primary_code(exc) in (_BUSY, _LOCKED)


def _translate(path: str, doing: str, exc: sqlite3.Error, wait_s: float) -> LedgerError:
    """One place where sqlite3's errors become ``LedgerError`` naming the file."""
    code = _primary_code(exc)
    if code in (_BUSY, _LOCKED):
        # Never "database is locked": say who holds what, and for how long we waited.
        message = (
            f"ledger {path}: {doing}: another connection held the write lock for more "
            f"than {wait_s:g} s"
        )
    elif code in (_CORRUPT, _NOTADB):
        message = f"ledger {path} is corrupt ({doing}): {exc}"
    elif code == _FULL:
        message = f"ledger {path}: {doing}: the disk is full"
    else:
        message = f"ledger {path}: {doing} failed: {exc}"
    error = LedgerError(message)
    error.__cause__ = exc
    return error


def _inspect(conn: sqlite3.Connection, path: str) -> dict[str, str] | None:
    """The ledger's meta, or None for an empty database; LedgerError for anything else."""
    tables = {
        row[0]
        for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not row[0].startswith("sqlite_")
    }
    if not tables:
        return None
    if not {"meta", "events"} <= tables:
        listed = ", ".join(sorted(tables))
        raise LedgerError(
            f"{path} is not an agent-adapter ledger (it has other tables: {listed}); "
            "it was left unchanged"
        )
    meta = {str(k): str(v) for k, v in conn.execute("SELECT name, value FROM meta")}
    if meta.get("format") != _FORMAT:
        raise LedgerError(f"{path} is not an agent-adapter ledger; it was left unchanged")
    try:
        version = int(meta.get("schema_version", ""))
    except ValueError:
        raise LedgerError(
            f"ledger {path} has an unreadable schema version "
            f"{meta.get('schema_version')!r}; it was left unchanged"
        ) from None
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"ledger {path} was written by a newer version of agent-adapter (schema "
            f"{version}; this version reads up to {SCHEMA_VERSION}); it was left unchanged"
        )
    return meta


def _signature(path: str) -> tuple[int, ...] | None:
    """What changes when anyone writes the file: its identity, size and mtime, and
    whether a WAL or rollback journal is beside it (None when it is gone)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    sidecars = tuple(int(os.path.exists(path + suffix)) for suffix in _JOURNALS)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, *sidecars)


def _connect_snapshot(path: str, wait_s: float) -> tuple[sqlite3.Connection, Any]:
    """A read-only connection to ``path`` that creates no file beside it.

    Returns ``(conn, signature)``. With a WAL (or journal) file beside the ledger, some
    connection has it open (or one crashed): ``mode=ro`` shares its -wal/-shm, sees
    every commit and never waits for the write lock; the signature is None. Otherwise
    nobody has the file open, so the file alone holds every committed event: it is
    opened ``immutable=1`` (no locks, and no -wal/-shm created, which ``mode=ro`` would
    do and could not safely remove while another process may have started using them)
    and the signature it had is returned: whoever reads through it must check the
    signature again after reading (``_checked``). When ``mode=ro`` cannot open (the -shm
    is missing in a directory that is not writable), it falls back to ``immutable=1``
    when the WAL is empty (the file alone is then the whole ledger, but no concurrent
    writer is seen), and refuses when the WAL holds commits it could not read.
    """
    signature = _signature(path)
    if signature is None:
        raise LedgerError(f"ledger {path}: no such file")
    uri = f"file:{quote(path)}"
    if any(signature[-len(_JOURNALS) :]):
        conn = sqlite3.connect(
            f"{uri}?mode=ro", uri=True, timeout=wait_s, isolation_level=None,
            check_same_thread=False,
        )  # fmt: skip
        try:
            # Opening is lazy: read the schema now, so a -shm that cannot be made fails here.
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn, None
        except sqlite3.Error as exc:
            conn.close()
            if _primary_code(exc) not in (_CANTOPEN, _READONLY):
                raise _translate(path, "opening read-only", exc, wait_s) from exc
            # Without its -shm a non-empty WAL cannot be read, and the file alone would
            # silently miss the commits in it: refuse rather than show a stale ledger.
            with contextlib.suppress(OSError):
                if os.path.getsize(path + "-wal") > 0:
                    raise LedgerError(
                        f"ledger {path} cannot be read here: {path}-wal holds commits of a "
                        f"writer that did not close, and {path}-shm cannot be created "
                        f"({exc}); open it once where it can be written, which recovers it"
                    ) from exc
    try:
        conn = sqlite3.connect(
            f"{uri}?immutable=1", uri=True, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise _translate(path, "opening read-only", exc, wait_s) from exc
    return conn, signature


class _Changed(Exception):
    """The file changed while it was read as an immutable snapshot: read it again."""


def _checked(
    conn: sqlite3.Connection, signature: Any, path: str, fn: Callable[[sqlite3.Connection], Any]
) -> Any:
    """``fn(conn)``; for a snapshot, ``_Changed`` unless the file was untouched throughout.

    A snapshot takes no lock, so a writer that arrived while it read could have made
    the read torn (a result, or an error such as "malformed", from a half-written file).
    """
    if signature is None:
        return fn(conn)
    try:
        result = fn(conn)
    except Exception:
        if _signature(path) != signature:
            raise _Changed from None
        raise
    if _signature(path) != signature:
        raise _Changed
    return result


def _probe(path: str, *, must_exist: bool = False, wait_s: float = 0.0) -> dict[str, str] | None:
    """Read-only checks before anything opens ``path`` for writing; the ledger's meta.

    Nothing is created or changed (-wal/-shm files included, see ``_connect_snapshot``),
    so a refused file is left exactly as it was. None for a missing or empty database.
    """
    try:
        signature = _signature(path)
    except NotADirectoryError:  # a file where a directory of the path should be
        signature = None
    if signature is None:
        # SQLite's own words for this are "unable to open database file": say which part
        # is missing. The file is created on first open, never its directory.
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            what = "is not a directory" if os.path.exists(parent) else "does not exist"
            raise LedgerError(
                f"ledger {path}: the directory {parent} {what} (a ledger file is created "
                "on first open, its directory is not)"
            )
        if must_exist:
            raise LedgerError(f"ledger {path}: no such file (a read-only ledger is never created)")
        return None
    # Closing any descriptor of a file drops every POSIX lock this process holds on it,
    # those of SQLite connections in other threads included (SQLite's "howtocorrupt"
    # 2.2). With a WAL or journal beside it, a connection may be open, so the header is
    # left to SQLite to judge; without one, no connection in WAL mode exists.
    if not any(signature[-len(_JOURNALS) :]):
        try:
            with open(path, "rb") as f:
                header = f.read(len(_SQLITE_HEADER))
        except FileNotFoundError:
            return _probe(path, must_exist=must_exist, wait_s=wait_s)
        except OSError as exc:
            raise LedgerError(f"ledger {path} cannot be read: {exc}") from exc
        if not header:
            return None  # an empty file is an empty database: it becomes a ledger
        if header != _SQLITE_HEADER:
            raise LedgerError(
                f"{path} is not an SQLite database (so not a ledger); it was left unchanged"
            )

    def inspect(conn: sqlite3.Connection) -> dict[str, str] | None:
        try:
            return _inspect(conn, path)
        except sqlite3.Error as exc:
            raise _translate(path, "reading its schema", exc, wait_s) from exc

    for _ in range(_SNAPSHOT_TRIES):
        conn, signature = _connect_snapshot(path, wait_s)
        try:
            meta: dict[str, str] | None = _checked(conn, signature, path, inspect)
            return meta
        except _Changed:
            continue
        finally:
            conn.close()
    raise LedgerError(f"ledger {path}: reading its schema: the file kept changing; try again")
