"""``SQLiteLedger``: the durable, embedded store (one file, WAL mode, group commit).

Threads. A writer thread owns the only write connection and drains a queue of pending
appends: in one ``BEGIN IMMEDIATE`` transaction it reads the last seq and hash from the
table (another process may have appended since), chains every queued event, inserts
them and commits, then wakes every waiter with one hop back to the event loop. Appends
that arrive while a transaction is being written wait in the queue and share the next
one (group commit); each ``append`` returns only once its own transaction committed.
A reader thread owns a second, query-only connection for ``read`` and ``verify``, so
reads never wait behind an fsync. Both are daemon threads with plain ``sqlite3``
connections: one thread hop per batch (not per statement), and a ledger that is never
closed cannot keep the interpreter from exiting.

Durability. ``synchronous="FULL"`` (the default) fsyncs the WAL at every commit: an
acknowledged event survives a power cut. ``"NORMAL"`` skips that fsync: an acknowledged
event survives a crash of the process, not of the machine.

Files. Opening probes the file read-only first: a non-SQLite file, a corrupt file, an
SQLite file with other tables, or a ledger written by a newer schema raises
``LedgerError`` naming the path, and nothing in it or beside it is changed (the probe
creates no -wal/-shm files).

Head. Every append transaction also stores the ledger's head in meta: the last seq
and hash (``head_seq``, ``head_hash``) and ``head_mac``, a ``chain_hash`` over them and
the keyed flag (see ``_head_mac``). A chain alone cannot show that events were deleted
from its end, since what remains still links; the head can. With a key the MAC is an
HMAC, so deleting the tail and rewriting the head needs the key; without one it is
plain SHA-256, which catches an accidental truncation (a lost WAL, a bad copy) but not
a deliberate one. The head is one more statement per transaction, not per event, and
the writer refuses to append past a head that is ahead of the table (appending would
overwrite the evidence). A file written before heads were kept has none: it verifies,
with a reason saying deletions from its end cannot be detected, and gets its head on
its next append. Two limits no in-file head can lift: whoever keeps a copy of an older
head (all three rows) can truncate back to it and restore it, and a keyed ledger whose
tail and head rows are both deleted reads as one written before heads were kept.

Read-only. ``readonly=True`` starts no writer: one thread with a query-only connection
that never takes the write lock, so it reads while another process holds it, and works
on a file or directory it cannot write. See ``_connect_snapshot`` for how it avoids
creating -wal/-shm files.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import os
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

import msgspec

from ..errors import LedgerError
from ._chain import Record, Verification, chain_hash, make_record, verify_records
from ._events import Event, UnknownEvent, decode_event

__all__ = ["SCHEMA_VERSION", "SQLiteLedger"]

#: The schema this version writes; files with a higher version are refused.
SCHEMA_VERSION = 1
_FORMAT = "agent-adapter-ledger"
_SQLITE_HEADER = b"SQLite format 3\x00"
_READ_PAGE = 2048

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
    "CREATE INDEX events_call_id ON events (call_id)",
)
_INSERT = (
    "INSERT INTO events (seq, type, run_id, call_id, tool, ts, payload, prev, hash)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
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

# Primary result codes (the low byte of an extended code).
_BUSY, _LOCKED, _READONLY, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 5, 6, 8, 11, 13, 14, 26
# Files beside a ledger that some connection has open (or that a crashed one left).
_JOURNALS = ("-wal", "-journal")
# Snapshot reads torn by a writer that arrived meanwhile are retried this many times.
_SNAPSHOT_TRIES = 5
_STOP = object()
_astuple = msgspec.structs.astuple


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


def _deliver(
    future: asyncio.Future[Any], result: Any = None, error: BaseException | None = None
) -> None:
    """From a worker thread: settle ``future`` on its loop (a closed loop has no waiter)."""

    def settle() -> None:
        if future.done():
            return  # the waiter was cancelled; the work itself is done (or failed)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):
        future.get_loop().call_soon_threadsafe(settle)


class _Batch:
    """One ``append``/``append_many`` call: its events and the future its caller awaits."""

    __slots__ = ("error", "events", "future")

    def __init__(self, events: list[Event], future: asyncio.Future[None]) -> None:
        self.events = events
        self.future = future
        self.error: BaseException | None = None


def _settle_batches(batches: list[_Batch]) -> None:
    for batch in batches:
        if batch.future.done():
            continue
        if batch.error is not None:
            batch.future.set_exception(batch.error)
        else:
            batch.future.set_result(None)


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
    signature = _signature(path)
    if signature is None:
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


class _Worker:
    """A daemon thread that owns one sqlite3 connection; the loop talks to it by queue."""

    def __init__(self, name: str, path: str, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._closed_message = f"ledger {path} is closed"
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._ready: asyncio.Future[None] | None = None
        self._stopped: asyncio.Future[None] | None = None
        self.stopping = False
        self.conn: sqlite3.Connection | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._stopped = loop.create_future()
        self._thread.start()
        await self._ready

    async def stop(self) -> None:
        # Set on the loop thread before the stop is queued, and checked (on the loop
        # thread) before any work is queued: no work can land behind the stop and wait
        # forever.
        self.stopping = True
        self.queue.put(_STOP)
        assert self._stopped is not None
        await asyncio.shield(self._stopped)

    def _main(self) -> None:
        assert self._ready is not None and self._stopped is not None
        try:
            self.conn = self._connect()
        except BaseException as exc:
            _deliver(self._ready, error=exc)
            _deliver(self._stopped)
            return
        _deliver(self._ready)
        try:
            self.serve()
        finally:
            self.conn.close()
            _deliver(self._stopped)

    def serve(self) -> None:
        """Run ``fn(conn)`` for each queued ``(fn, future)`` until stopped."""
        get = self.queue.get
        while True:
            item = get()
            if item is _STOP:
                return
            fn, future = item
            try:
                result = self.call(fn)
            except BaseException as exc:
                _deliver(future, error=exc)
            else:
                _deliver(future, result)

    def call(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        assert self.conn is not None
        return fn(self.conn)

    def submit(self, fn: Callable[[sqlite3.Connection], Any]) -> asyncio.Future[Any]:
        """Queue ``fn(conn)``; the future gets its result (LedgerError once stopping)."""
        future = asyncio.get_running_loop().create_future()
        if self.stopping:
            future.set_exception(LedgerError(self._closed_message))
        else:
            self.queue.put((fn, future))
        return future


class _ReadOnlyReader(_Worker):
    """The only thread of a read-only ledger: a query-only connection that never writes.

    Its connection comes from ``_connect_snapshot``. A snapshot (immutable) connection
    is checked before each job: once the file changed (a writer arrived or finished),
    it is reopened, live through the writer's WAL when there is one; and each job's
    result is kept only if the file did not change while it ran.
    """

    def __init__(self, ledger: SQLiteLedger) -> None:
        super().__init__(f"agent-adapter ledger reader {ledger.path}", ledger.path, self._open)
        self._path = ledger.path
        self._wait_s = ledger._busy_timeout_s
        self._snapshot: Any = None
        self.meta: dict[str, str] | None = None

    def _open(self) -> sqlite3.Connection:
        # The first open checks the file as a writer's probe would; the file must exist.
        if self.meta is None:
            meta = _probe(self._path, must_exist=True, wait_s=self._wait_s)
            if meta is None:
                raise LedgerError(
                    f"ledger {self._path} is an empty database, not a ledger yet (a "
                    "read-only ledger is never created)"
                )
            self.meta = meta
        conn, self._snapshot = _connect_snapshot(self._path, self._wait_s)
        conn.execute("PRAGMA query_only=ON")
        return conn

    def call(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        for _ in range(_SNAPSHOT_TRIES):
            snapshot = self._snapshot
            if snapshot is not None and _signature(self._path) != snapshot:
                assert self.conn is not None
                self.conn.close()
                self.conn = self._open()
            assert self.conn is not None
            try:
                return _checked(self.conn, self._snapshot, self._path, fn)
            except _Changed:
                continue
        raise LedgerError(
            f"ledger {self._path}: reading: the file kept changing while it was read; try again"
        )


class _Writer(_Worker):
    """The group-commit writer: each wake-up drains the queue into one transaction."""

    def __init__(self, ledger: SQLiteLedger, connect: Callable[[], sqlite3.Connection]) -> None:
        super().__init__(f"agent-adapter ledger writer {ledger.path}", ledger.path, connect)
        self._path = ledger.path
        self._key = ledger._key
        self._wait_s = ledger._busy_timeout_s

    def serve(self) -> None:
        conn = self.conn
        assert conn is not None
        get, get_nowait = self.queue.get, self.queue.get_nowait
        while True:
            item = get()
            batches: list[_Batch] = []
            stop = False
            while True:
                if item is _STOP:
                    stop = True
                    break
                batches.extend(item)
                try:
                    item = get_nowait()
                except queue.Empty:
                    break
            if batches:
                self._write(conn, batches)
                self._wake(batches)
            if stop:
                return

    @staticmethod
    def _wake(batches: list[_Batch]) -> None:
        # One hop back per loop (normally one loop), not one per waiter.
        by_loop: dict[asyncio.AbstractEventLoop, list[_Batch]] = {}
        for batch in batches:
            by_loop.setdefault(batch.future.get_loop(), []).append(batch)
        for loop, group in by_loop.items():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle_batches, group)

    def _write(self, conn: sqlite3.Connection, batches: list[_Batch]) -> None:
        deadline = time.monotonic() + self._wait_s
        pause = 0.001
        while True:
            for batch in batches:
                batch.error = None
            try:
                self._transaction(conn, batches)
                return
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if _is_busy(exc) and time.monotonic() < deadline:
                    # The busy handler already waited; SQLite skips it in some cases
                    # (recovery, deadlock avoidance), so wait a little here too.
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
                    continue
                error: BaseException = _translate(self._path, "appending", exc, self._wait_s)
            except Exception as exc:
                # Anything else (a key that does not fit, a bug) fails these appends and
                # leaves the writer serving: a dead writer would leave waiters hanging.
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if isinstance(exc, LedgerError):
                    error = exc
                else:
                    error = LedgerError(f"ledger {self._path}: appending failed: {exc!r}")
                    error.__cause__ = exc
            for batch in batches:
                batch.error = error
                _unchain(batch.events)
            return

    def _transaction(self, conn: sqlite3.Connection, batches: list[_Batch]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        # Inside the write lock: another process may have appended since our last commit.
        head_seq, head_hash, last_seq, last_prev, last_hash, last_payload = conn.execute(
            _LAST
        ).fetchone()
        key = self._key
        if last_seq is None:
            seq, prev = 0, ""
        else:
            seq, prev = last_seq, last_hash
            if key is not None and chain_hash(seq, last_prev, last_payload, key) != prev:
                raise LedgerError(
                    f"ledger {self._path}: the key does not match the last record (seq "
                    f"{seq}); appending with it would break the chain (wrong key, or the "
                    "record was altered)"
                )
        if head_seq is not None:
            # Appending past a head that names more (or other) events than the table
            # holds would rewrite the head and erase the evidence of a truncation.
            at = _head_seq(head_seq, self._path)
            if at > seq or (at == seq and head_hash != prev):
                raise LedgerError(
                    f"ledger {self._path}: the ledger ends at seq {seq} but its head says "
                    f"{at}: events were deleted from the end (or replaced); appends are "
                    "refused so that the evidence stays (see ledger verify)"
                )
        rows: list[tuple[Any, ...]] = []
        for batch in batches:
            chained: list[tuple[Any, ...]] = []
            try:
                at, link = seq, prev
                for event in batch.events:
                    at += 1
                    record = make_record(event, at, link, key)
                    # Record's fields are in the column order of _INSERT.
                    chained.append(_astuple(record))
                    link = record.hash
            except Exception as exc:
                # Only this caller's events are refused; the others still commit.
                batch.error = LedgerError(f"ledger {self._path}: cannot encode an event: {exc}")
                batch.error.__cause__ = exc
                _unchain(batch.events)
                continue
            rows.extend(chained)
            seq, prev = at, link
        if rows:
            conn.executemany(_INSERT, rows)
            # In the same transaction: the head is exactly as durable as the events.
            put = _PUT_HEAD if head_seq is None else _UPDATE_HEAD
            conn.execute(put, (seq, prev, _head_mac(seq, prev, key)))
        conn.execute("COMMIT")


def _unchain(events: list[Event]) -> None:
    for event in events:
        event.seq, event.prev, event.hash = 0, "", ""


class SQLiteLedger:
    """A ledger in one SQLite file (WAL mode), shared safely by several processes.

    ``SQLiteLedger(path, *, synchronous="FULL", key=None, busy_timeout_s=30.0,
    readonly=False)``.

    - ``append``/``append_many`` return once the events are committed; concurrent
      appends share one transaction (group commit). With ``synchronous="FULL"`` a
      returned append survives a power cut; with ``"NORMAL"`` only a process crash.
    - Several processes may append to one file at once: seq stays gap-free and the
      chain valid, because each transaction takes the last seq and hash under the
      write lock. A lock held by another process is waited for up to
      ``busy_timeout_s``, then ``LedgerError``.
    - ``key`` (bytes) makes every hash an HMAC; the file records that it is keyed
      (never the key). Without the key such a file can be read, but ``verify()``
      reports that it cannot check and appends raise ``LedgerError``.
    - Each append transaction also stores the head (last seq and hash, with a MAC):
      ``verify()`` reports events deleted from the end. The MAC is an HMAC with a key;
      without one it is plain SHA-256, which catches an accidental truncation, not a
      deliberate one. With a key, a 'keyed' flag altered to 0 is reported too.
    - ``readonly=True`` opens for reading only: no writer thread, one query-only
      connection, nothing created or changed (a missing file is a ``LedgerError``, and
      so is ``append``). It never waits for another process's write lock. While another
      connection has the file open it reads live through that WAL; while nobody does,
      it reads the file as an immutable snapshot and reopens once the file changes. In
      a directory it cannot write, a file with a non-empty WAL but no -shm (a crashed
      writer's) is refused, since its last commits could not be read.
    - ``open()`` is called on first use; ``close()`` waits for queued appends.
      Use one ledger object from one event loop.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        key: bytes | None = None,
        busy_timeout_s: float = 30.0,
        readonly: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        if self.path == ":memory:" or self.path.startswith("file::memory:"):
            raise ValueError("SQLiteLedger needs a file; use MemoryLedger for memory")
        mode = synchronous.upper()
        if mode not in ("FULL", "NORMAL"):
            raise ValueError('synchronous must be "FULL" (power-cut safe) or "NORMAL"')
        if key is not None and not isinstance(key, bytes | bytearray):
            raise TypeError("key must be bytes")
        self.synchronous = mode
        self.readonly = bool(readonly)
        self._key = bytes(key) if key is not None else None
        self._busy_timeout_s = float(busy_timeout_s)
        self._keyed = False
        self._writer: _Writer | None = None
        self._reader: _Worker | None = None
        self._readonly_message = f"ledger {self.path} is open read-only"
        self._open_lock = asyncio.Lock()
        self._staged: list[_Batch] = []
        self._kick_scheduled = False
        self._closed = False

    def __repr__(self) -> str:
        if self.readonly:
            return f"SQLiteLedger({self.path!r}, readonly=True)"
        return f"SQLiteLedger({self.path!r}, synchronous={self.synchronous!r})"

    @property
    def keyed(self) -> bool:
        """True when the file's chain is HMAC-keyed (known once opened)."""
        return self._keyed

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Check (read-only first) or create the file and start the threads; idempotent.

        Raises ``LedgerError`` naming the file when it is not a ledger, is corrupt, was
        written by a newer version, or does not fit the key; read-only, also when it is
        missing or an empty database.
        """
        if self._reader is not None:
            return
        async with self._open_lock:
            if self._reader is not None:
                return
            if self._closed:
                raise LedgerError(f"ledger {self.path} is closed")
            if self.readonly:
                only = _ReadOnlyReader(self)
                await only.start()
                self._keyed = (only.meta or {}).get("keyed") == "1"
                self._reader = only
                return
            writer = _Writer(self, self._connect_writer)
            await writer.start()
            reader = _Worker(
                f"agent-adapter ledger reader {self.path}", self.path, self._connect_reader
            )
            try:
                await reader.start()
            except BaseException:
                await writer.stop()
                raise
            self._writer, self._reader = writer, reader

    async def close(self) -> None:
        """Commit what is queued, then stop the threads and close the file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        async with self._open_lock:  # an open in progress finishes first
            writer, reader = self._writer, self._reader
            self._writer = self._reader = None
        if writer is not None:
            staged, self._staged = self._staged, []
            if staged:
                writer.queue.put(staged)  # queued before the stop: committed, not dropped
            await writer.stop()
        if reader is not None:
            await reader.stop()

    async def __aenter__(self) -> SQLiteLedger:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise _translate(self.path, "opening", exc, self._busy_timeout_s) from exc
        return conn

    def _connect_writer(self) -> sqlite3.Connection:
        # Runs in the writer thread. Nothing writes to the file before the read-only
        # probe has said it is a ledger this version can extend (or an empty database).
        _probe(self.path, wait_s=self._busy_timeout_s)
        conn = self._connect()
        try:
            deadline = time.monotonic() + self._busy_timeout_s
            while True:
                try:
                    self._initialize(conn)
                    break
                except sqlite3.Error as exc:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    if _is_busy(exc) and time.monotonic() < deadline:
                        time.sleep(0.01)
                        continue
                    raise _translate(self.path, "opening", exc, self._busy_timeout_s) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _initialize(self, conn: sqlite3.Connection) -> None:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise LedgerError(f"ledger {self.path}: WAL mode is not available (got {mode})")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Checked again under the write lock: another process may have created it.
            meta = _inspect(conn, self.path)
            if meta is None:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.executemany(
                    "INSERT INTO meta (name, value) VALUES (?, ?)",
                    [
                        ("format", _FORMAT),
                        ("schema_version", str(SCHEMA_VERSION)),
                        ("keyed", "1" if self._key is not None else "0"),
                    ],
                )
                # A head from the start: deleting every event is then caught too.
                conn.execute(_PUT_HEAD, (0, "", _head_mac(0, "", self._key)))
                self._keyed = self._key is not None
            else:
                self._keyed = meta.get("keyed") == "1"
                if self._key is not None and not self._keyed:
                    self._refuse_unkeyed_chain(conn, self._key, meta)
                    conn.execute("UPDATE meta SET value = '1' WHERE name = 'keyed'")
                    conn.execute(_PUT_HEAD, (0, "", _head_mac(0, "", self._key)))
                    self._keyed = True
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _refuse_unkeyed_chain(
        self, conn: sqlite3.Connection, key: bytes, meta: dict[str, str]
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
            last_seq is not None and chain_hash(last_seq, last_prev, last_payload, key) == last_hash
        ) or (
            head_seq is not None
            and _head_mac(_head_seq(head_seq, self.path), head_hash or "", key)
            == meta.get("head_mac")
        ):
            raise LedgerError(
                f"ledger {self.path} is marked unkeyed, but it was written with this key: "
                "its 'keyed' flag was altered"
            )
        raise LedgerError(
            f"ledger {self.path} was written without a key; a key cannot be added to an "
            "existing chain"
        )

    def _connect_reader(self) -> sqlite3.Connection:
        conn = self._connect()
        conn.execute("PRAGMA query_only=ON")
        return conn

    # -- appends ------------------------------------------------------------------------

    async def append(self, event: Event) -> Event:
        """Store ``event``; returns it with ``seq``, ``prev`` and ``hash`` set, once committed."""
        if self._writer is None:
            await self._open_for_appends()
        await self._stage([event])
        return event

    async def append_many(self, events: Sequence[Event]) -> list[Event]:
        """Store ``events`` contiguously, in order, in one transaction."""
        batch = list(events)
        if batch:
            if self._writer is None:
                await self._open_for_appends()
            await self._stage(batch)
        return batch

    async def _open_for_appends(self) -> None:
        # Off the hot path: only reached while no writer runs, which read-only is always.
        if self.readonly:
            raise LedgerError(self._readonly_message)
        await self.open()

    def _stage(self, events: list[Event]) -> asyncio.Future[None]:
        """Queue ``events`` for the next commit; the future is settled once it committed."""
        if self._closed:
            raise LedgerError(f"ledger {self.path} is closed")
        if self._keyed and self._key is None:
            raise LedgerError(
                f"ledger {self.path} is keyed (HMAC): appending needs its key "
                "(SQLiteLedger(path, key=...))"
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._staged.append(_Batch(events, future))
        if not self._kick_scheduled:
            # Hand everything staged in this loop iteration to the writer at once: all
            # appenders woken by one commit join the next one together.
            self._kick_scheduled = True
            loop.call_soon(self._kick)
        return future

    def _kick(self) -> None:
        self._kick_scheduled = False
        staged, self._staged = self._staged, []
        if not staged:
            return
        writer = self._writer
        if writer is None:
            error = LedgerError(f"ledger {self.path} is closed")
            for batch in staged:
                batch.error = error
            _settle_batches(staged)
            return
        writer.queue.put(staged)

    # -- reads --------------------------------------------------------------------------

    async def read(
        self, after: int = 0, *, run_id: str | None = None, call_id: str | None = None
    ) -> AsyncIterator[Event]:
        """Committed events with seq > ``after``, in seq order, optionally of one run/call.

        Events are read in pages (each page its own snapshot), so events committed by
        any process while reading are included as the pages reach them.
        """
        if self._reader is None:
            await self.open()
        reader = self._reader
        if reader is None:
            raise LedgerError(f"ledger {self.path} is closed")
        where = "seq > ?"
        params: list[Any] = []
        if run_id is not None:
            where += " AND run_id = ?"
            params.append(run_id)
        if call_id is not None:
            where += " AND call_id = ?"
            params.append(call_id)
        sql = f"SELECT seq, prev, hash, payload FROM events WHERE {where} ORDER BY seq LIMIT ?"
        path, wait_s = self.path, self._busy_timeout_s

        def fetch(start: int, conn: sqlite3.Connection) -> list[Event]:
            # Runs in the reader thread: the rows are decoded there, off the event loop.
            try:
                rows = conn.execute(sql, (start, *params, _READ_PAGE)).fetchall()
            except sqlite3.Error as exc:
                raise _translate(path, "reading", exc, wait_s) from exc
            events = []
            for seq, prev, hash_, payload in rows:
                try:
                    event = decode_event(payload)
                except Exception as exc:
                    raise LedgerError(
                        f"ledger {path}: the payload of seq {seq} cannot be decoded: {exc}"
                    ) from exc
                event.seq, event.prev, event.hash = seq, prev, hash_
                events.append(event)
            return events

        def submit(start: int) -> asyncio.Future[list[Event]]:
            return reader.submit(functools.partial(fetch, start))

        future: asyncio.Future[list[Event]] | None = submit(after)
        try:
            while future is not None:
                events = await future
                # Fetch the next page while the caller consumes this one.
                future = submit(events[-1].seq) if len(events) == _READ_PAGE else None
                for event in events:
                    yield event
        finally:
            if future is not None:
                # The caller stopped early: retrieve the prefetched page's error, if any.
                future.add_done_callback(_ignore_result)

    async def verify(self) -> Verification:
        """Check the whole stored chain (seq continuity, links, hashes of stored bytes)
        and that it ends where its authenticated head says (see ``_check_head``)."""
        if self._reader is None:
            await self.open()
        reader = self._reader
        if reader is None:
            raise LedgerError(f"ledger {self.path} is closed")
        if self._keyed and self._key is None:
            return self._cannot_check()
        key, path = self._key, self.path

        def check(conn: sqlite3.Connection) -> Verification:
            # The hash covers the payload; reads filter on the indexed columns. So the
            # columns must say what the payload says, or a filtered read could hide events.
            mismatch: list[int] = []
            # The hash of the last record, and of the one at the head's seq.
            last = [""]
            at_head: list[str] = []
            head_at = -1

            def records(cursor: sqlite3.Cursor) -> Iterator[Record]:
                for row in cursor:
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
                    if not mismatch and not _columns_match(record):
                        mismatch.append(record.seq)
                    if record.seq == head_at:
                        at_head.append(record.hash)
                    last[0] = record.hash
                    yield record

            try:
                # One read transaction: the head and the records are of one snapshot,
                # or a commit between the two reads would look like a truncation.
                conn.execute("BEGIN")
                try:
                    meta = {str(k): str(v) for k, v in conn.execute(_READ_HEAD)}
                    if meta.get("head_seq") is not None:
                        with contextlib.suppress(LedgerError):
                            head_at = _head_seq(meta["head_seq"], path)
                    cursor = conn.execute(
                        "SELECT seq, type, run_id, call_id, tool, ts, payload, prev, hash"
                        " FROM events ORDER BY seq"
                    )
                    result = verify_records(records(cursor), key)
                    cursor.close()
                finally:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")  # it only read
            except sqlite3.Error as exc:
                raise _translate(path, "verifying", exc, self._busy_timeout_s) from exc
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
            if key is None and meta.get("keyed") == "1":
                return self._cannot_check()  # marked keyed since this ledger was opened
            return _check_head(
                path, result.checked, last[0], at_head[0] if at_head else None, meta, key
            )

        result: Verification = await reader.submit(check)
        return result

    def _cannot_check(self) -> Verification:
        return Verification(
            ok=False,
            checked=0,
            reason=(
                f"ledger {self.path} is keyed (HMAC): its chain cannot be checked without the key"
            ),
        )


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


def _columns_match(record: Record) -> bool:
    """True when the indexed columns of ``record`` are those of its payload's event."""
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


def _ignore_result(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
