"""``SQLiteLedger``: the durable, embedded store (one file, WAL mode, group commit).

This module holds the ledger class: its lifecycle (open, create, close), appends staged
for the writer, and reads and verification submitted to the reader. Its parts live
beside it: ``_sqlite_threads`` (the writer and reader threads, group commit, delivery
to the event loop), ``_sqlite_files`` (schema, the read-only probe, snapshot opening,
error translation), ``_sqlite_head`` (the authenticated head's rows in meta),
``_sqlite_mark`` (the mark beside the file, which a damaged WAL cannot take back) and
``_sqlite_verify`` (what ``verify`` checks, in order); their docstrings say how each
works. What it shares with the Postgres store lives in neutral modules: ``_staging``
(the front of a group commit), ``_batches`` and ``_chaining`` (a commit's batches:
chained, handed to the followers, their waiters woken) and ``_head`` (the head's MAC
and its check).

Durability. ``synchronous="FULL"`` (the default) fsyncs the WAL at every commit: an
acknowledged event survives a power cut. ``"NORMAL"`` skips that fsync: an acknowledged
event survives a crash of the process, not of the machine.

Read-only. ``readonly=True`` starts no writer: one thread with a query-only connection
that never takes the write lock, so it reads while another process holds it, and works
on a file or directory it cannot write. See ``_connect_snapshot`` for how it avoids
creating -wal/-shm files.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from ..errors import LedgerError
from ._batches import Batch
from ._chain import Progress, Record, Verification, _damage
from ._events import Event, decode_event
from ._follow import Follow
from ._head import head_mac
from ._protocol import LOCK_TIMEOUT_S
from ._sqlite_files import (
    _CORRUPT,
    _FORMAT,
    _MIGRATIONS,
    _NOTADB,
    _SCHEMA,
    SCHEMA_VERSION,
    _inspect,
    _is_busy,
    _primary_code,
    _probe,
    _translate,
)

# Re-exported: tests reach the snapshot helpers through this module.
from ._sqlite_files import _Changed as _Changed
from ._sqlite_files import _checked as _checked
from ._sqlite_files import _connect_snapshot as _connect_snapshot
from ._sqlite_head import _PUT_HEAD, _refuse_unkeyed_chain
from ._sqlite_mark import check_before_create, mark_path, missing_message
from ._sqlite_threads import _ReadOnlyReader, _Worker, _Writer
from ._sqlite_verify import _verify_file, unreadable_row
from ._staging import GroupCommit

__all__ = ["SCHEMA_VERSION", "SQLiteLedger"]

_READ_PAGE = 2048
# A call's seqs from the call index alone (covering: no row is read), in index order;
# a read by call id alone holds the lowest _CALL_SEQS_HELD of them at a time.
# (Never past the table's last seq: an index entry naming a row that is not there, a
# damaged index, would otherwise move the next page's start past what is committed.)
_CALL_SEQS = (
    "SELECT seq FROM events WHERE call_id = ? AND seq > ? AND seq <= (SELECT max(seq) FROM events)"
)
_CALL_SEQS_HELD = 64 * _READ_PAGE
_log = logging.getLogger("agent_adapter.ledger")


class SQLiteLedger(GroupCommit):
    """A ledger in one SQLite file (WAL mode), shared safely by several processes.

    ``SQLiteLedger(path, *, synchronous="FULL", key=None, busy_timeout_s=30.0,
    readonly=False)``.

    - ``append``/``append_many`` return once the events are committed; concurrent
      appends share one transaction (group commit). With ``synchronous="FULL"`` a
      returned append survives a power cut; with ``"NORMAL"`` only a process crash.
    - Several processes may append to one file at once: seq stays gap-free and the
      chain valid, because each transaction takes the last seq and hash under the
      write lock. A lock held by another process is waited for up to
      ``busy_timeout_s`` (``LOCK_TIMEOUT_S``, 30 s), then ``LedgerError``.
    - ``key`` (bytes) makes every hash an HMAC; the file records that it is keyed
      (never the key). Without the key such a file can be read, but ``verify()``
      reports that it cannot check and appends raise ``LedgerError``.
    - Each append transaction also stores the head (last seq and hash, with a MAC):
      ``verify()`` reports events deleted from the end. The MAC is an HMAC with a key;
      without one it is plain SHA-256, which catches an accidental truncation, not a
      deliberate one. With a key, a 'keyed' flag altered to 0 is reported too.
    - After each commit the writer also writes the head to ``<path>-mark`` beside the
      file, before the appends return: events a damaged WAL took back (with the head)
      are reported by ``verify()``, and appends are refused while the table ends before
      the mark. ``verify(deep=True)`` also runs ``PRAGMA integrity_check`` (indexes).
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
        busy_timeout_s: float = LOCK_TIMEOUT_S,
        readonly: bool = False,
        created_meta: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.path = os.fspath(path)
        # Extra meta rows (name, value) written in the transaction that creates a new file
        # (never into an existing one): the demo marks its ledger this way, so that it
        # replaces only a file it wrote itself (read back with ``SQLiteLedger.probe``).
        self._created_meta = tuple((str(k), str(v)) for k, v in created_meta)
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
        self._staged: list[Batch] = []
        self._kick_scheduled = False
        self._closed = False
        self._follows: tuple[Follow, ...] = ()  # replaced whole: the writer reads it
        # Said at open and by every verify() of this object: the mark file was missing
        # while the table held events, so earlier losses from the WAL cannot be detected.
        self._mark_note = ""

    def __repr__(self) -> str:
        if self.readonly:
            return f"SQLiteLedger({self.path!r}, readonly=True)"
        return f"SQLiteLedger({self.path!r}, synchronous={self.synchronous!r})"

    @staticmethod
    def probe(path: str | os.PathLike[str]) -> dict[str, str] | None:
        """The meta rows of the ledger file at ``path``, read without changing anything
        (no -wal or -shm is created); None for a missing or empty database. Raises
        ``LedgerError`` for a file that is not an agent-adapter ledger."""
        return _probe(os.fspath(path))

    @staticmethod
    def files(path: str | os.PathLike[str]) -> list[str]:
        """Every file a ledger at ``path`` keeps: the database, SQLite's -wal, -shm and
        -journal beside it, and the ledger's head mark (wherever links lead)."""
        base = os.fspath(path)
        return [mark_path(base), *(base + suffix for suffix in ("", "-wal", "-shm", "-journal"))]

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
                if only.without_mark:
                    self._warn_without_mark(_head_seq(only.meta))
                return
            writer = _Writer(self, self._connect_writer)
            await writer.start()
            self._warn_without_mark(writer.mark_restarted_at)
            reader = _Worker(
                f"agent-adapter ledger reader {self.path}", self.path, self._connect_reader
            )
            try:
                await reader.start()
            except BaseException:
                await writer.stop()
                raise
            self._writer, self._reader = writer, reader

    def _warn_without_mark(self, seq: int) -> None:
        """Once per open: a ledger of ``seq`` events opened without its mark file."""
        if seq > 0:
            self._mark_note = missing_message(self.path, seq)
            _log.warning("ledger %s: %s", self.path, self._mark_note)

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
        migrate = False
        try:
            # Checked again under the write lock: another process may have created it.
            meta = _inspect(conn, self.path)
            if meta is None:
                # An empty database beside a mark that names events lost all of them.
                check_before_create(self.path)
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.executemany(
                    "INSERT INTO meta (name, value) VALUES (?, ?)",
                    [
                        ("format", _FORMAT),
                        ("schema_version", str(SCHEMA_VERSION)),
                        ("keyed", "1" if self._key is not None else "0"),
                        *self._created_meta,
                    ],
                )
                # A head from the start: deleting every event is then caught too.
                conn.execute(_PUT_HEAD, (0, "", head_mac(0, "", self._key)))
                self._keyed = self._key is not None
            else:
                migrate = _outdated(conn)
                self._keyed = meta.get("keyed") == "1"
                if self._key is not None and not self._keyed:
                    _refuse_unkeyed_chain(conn, self.path, self._key, meta)
                    conn.execute("UPDATE meta SET value = '1' WHERE name = 'keyed'")
                    conn.execute(_PUT_HEAD, (0, "", head_mac(0, "", self._key)))
                    self._keyed = True
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if migrate:
            self._migrate(conn)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Bring a file made by an earlier version up to this one's indexes, in a
        transaction of its own after the opening's. An index that cannot be built (a
        damaged page: the build reads every row) leaves the file as it was, and the
        ledger opens as before: its events still read, replay and verify, and appends
        go on; only the reads by run and call are slower."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _MIGRATIONS:
                conn.execute(statement)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if _is_busy(exc):
                raise
            damaged = _primary_code(exc) in (_CORRUPT, _NOTADB)
            _log.warning(
                "ledger %s: its call index could not be brought up to date (%s); it was "
                "left as it was, and reads by run and call are slower%s",
                self.path,
                exc,
                ": see agent-adapter ledger verify --deep" if damaged else "",
            )
            return
        # The build went through the WAL (about the new index's size): give the space
        # back now rather than when the last connection closes. Best effort, without
        # waiting: a reader of another process may hold it, and other writers wait.
        with contextlib.suppress(sqlite3.Error):
            wait_ms = conn.execute("PRAGMA busy_timeout").fetchone()[0]
            conn.execute("PRAGMA busy_timeout=0")
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                conn.execute(f"PRAGMA busy_timeout={int(wait_ms)}")

    def _connect_reader(self) -> sqlite3.Connection:
        conn = self._connect()
        conn.execute("PRAGMA query_only=ON")
        return conn

    # -- appends ------------------------------------------------------------------------

    async def _open_for_appends(self) -> None:
        # Off the hot path: only reached while no writer runs, which read-only is always.
        if self.readonly:
            raise LedgerError(self._readonly_message)
        await self.open()

    def follow(self, apply: Callable[[Event], None], after: int) -> Follow:
        """Keep a projection up with everyone else's appends (``Executor.start`` calls it).

        From now on, before an append of this follower's returns, ``apply`` is called (on
        this loop, in seq order) with every event someone else committed since it last
        heard, or since seq ``after`` (what it has read already): other processes, the
        object's other followers, and appends of nobody's. Never with its own: an append
        is the follower's while ``_follow.appending`` holds it (the executor sets it). And
        an append of its own holding ``effect.claimed`` is refused with ``EffectTaken``
        (nothing of it written) when someone else claimed the same key after what the
        follower had applied, or earlier in the same group commit.

        A ledger object serves any number of followers, each with these guarantees.
        ``close()`` on the returned ``Follow`` ends it (``Executor.close`` does).
        """
        follower = Follow(self, apply, after, asyncio.get_running_loop())
        return self._add_follower(follower)

    _KEY_HINT = "SQLiteLedger(path, key=...)"

    def _where(self) -> str:
        return str(self.path)

    def _put_staged(self, writer: Any, staged: list[Batch]) -> None:
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
        # Only the seq (an INTEGER): SQLite compares the filter columns itself, so this
        # names a row whose text the sqlite3 module cannot decode.
        first_sql = f"SELECT seq FROM events WHERE {where} ORDER BY seq LIMIT 1"
        path, wait_s = self.path, self._busy_timeout_s
        filtered = run_id is not None or call_id is not None
        # By call id alone the index (call_id, run_id) holds the call's seqs in run order,
        # so a page "ORDER BY seq LIMIT" would sort all of them again for every page. The
        # lowest seqs (up to _CALL_SEQS_HELD) are taken from the index at once and read a
        # page at a time; then the next ones past them, and what was committed meanwhile.
        # ``held`` is passed in and handed back, never changed in place: the reader may
        # run a page twice (a read-only snapshot that changed under it).
        by_call = call_id is not None and run_id is None

        def page(
            start: int, held: tuple[int, ...], conn: sqlite3.Connection
        ) -> tuple[list[Any], int, tuple[int, ...]]:
            # The rows of the page after ``start``, the seq the next page starts after
            # (0: none follows) and the seqs still held for it.
            if not by_call:
                rows = conn.execute(sql, (start, *params, _READ_PAGE)).fetchall()
                if len(rows) < _READ_PAGE:
                    return rows, 0, ()
                # Strictly forward, whatever order a damaged index gave the rows in.
                after = max(start, max(row[0] for row in rows))
                return rows, after if after > start else 0, ()
            fresh = not held
            if fresh:
                seqs = (row[0] for row in conn.execute(_CALL_SEQS, (call_id, start)))
                held = tuple(heapq.nsmallest(_CALL_SEQS_HELD, seqs))
            # SQLite before 3.32 allows 999 variables in a statement.
            size = min(_READ_PAGE, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
            chunk, rest = held[:size], held[size:]
            if not chunk:
                return [], 0, ()
            marks = ",".join("?" * len(chunk))
            rows = conn.execute(
                f"SELECT seq, prev, hash, payload FROM events WHERE seq IN ({marks}) ORDER BY seq",
                chunk,
            ).fetchall()
            if fresh and not rest and len(chunk) < size and len(held) < _CALL_SEQS_HELD:
                return rows, 0, ()  # all the index had past ``start``: a short page ends it
            return rows, chunk[-1], rest

        def fetch(
            start: int, held: tuple[int, ...], conn: sqlite3.Connection
        ) -> tuple[list[Event], int, tuple[int, ...]]:
            # Runs in the reader thread: the rows are decoded there, off the event loop.
            # Returns the page's events, where the next page starts (0: no next page) and
            # the seqs held for it.
            try:
                rows, following, held = page(start, held, conn)
            except sqlite3.Error as exc:
                if unreadable_row(exc):
                    raise _unreadable(conn, (sql, first_sql), start, params, path, exc) from exc
                raise _translate(path, "reading", exc, wait_s) from exc
            events = []
            last = start
            foreign = 0
            for seq, prev, hash_, payload in rows:
                if seq <= last:
                    # A damaged index gave a row twice or out of order: each event once,
                    # in seq order.
                    foreign = foreign or seq
                    continue
                if type(prev) is not str or type(hash_) is not str or type(payload) is not bytes:
                    # A changed byte in a record's header turned a value into another
                    # storage class (_damage, inlined: this runs once per event read).
                    raise LedgerError(
                        f"ledger {path}: seq {seq} is damaged: "
                        f"{_damage(prev, hash_, payload)}; see ledger verify"
                    )
                try:
                    event = decode_event(payload)
                except Exception as exc:
                    raise LedgerError(
                        f"ledger {path}: the payload of seq {seq} cannot be decoded: {exc}"
                    ) from exc
                if filtered and (
                    (run_id is not None and event.run_id != run_id)
                    or (call_id is not None and event.call_id != call_id)
                ):
                    # The index (or a column) named a row of another run or call: never
                    # hand it out as this one's. verify() names the cause.
                    foreign = foreign or seq
                    continue
                event.seq, event.prev, event.hash = seq, prev, hash_
                events.append(event)
                last = seq
            if foreign:
                _log.warning(
                    "ledger %s: a read by run %r / call %r met seq %d, which is not one of "
                    "its events (a damaged index?); it was left out: see agent-adapter "
                    "ledger verify --deep",
                    path,
                    run_id,
                    call_id,
                    foreign,
                )
            return events, following, held

        Page = tuple[list[Event], int, tuple[int, ...]]

        def submit(start: int, held: tuple[int, ...]) -> asyncio.Future[Page]:
            return reader.submit(functools.partial(fetch, start, held))

        future: asyncio.Future[Page] | None = submit(after, ())
        try:
            while future is not None:
                events, following, held = await future
                # Fetch the next page while the caller consumes this one.
                future = submit(following, held) if following else None
                for event in events:
                    yield event
        finally:
            if future is not None:
                # The caller stopped early: retrieve the prefetched page's error, if any.
                future.add_done_callback(_ignore_result)

    async def read_records(self, after: int = 0) -> AsyncIterator[Record]:
        """Stored records with seq > ``after``, in seq order, payloads as stored (undecoded).

        What ``verify()`` checks and ``agent-adapter ledger export`` writes: a field or
        an event type this version does not know is in the payload bytes as written.
        """
        if self._reader is None:
            await self.open()
        reader = self._reader
        if reader is None:
            raise LedgerError(f"ledger {self.path} is closed")
        sql = (
            "SELECT seq, type, run_id, call_id, tool, ts, payload, prev, hash FROM events"
            " WHERE seq > ? ORDER BY seq LIMIT ?"
        )
        path, wait_s = self.path, self._busy_timeout_s

        def fetch(start: int, conn: sqlite3.Connection) -> list[Record]:
            try:
                rows = conn.execute(sql, (start, _READ_PAGE)).fetchall()
            except sqlite3.Error as exc:
                raise _translate(path, "reading", exc, wait_s) from exc
            return [
                Record(
                    seq=seq,
                    type=type_,
                    run_id=run_id,
                    call_id=call_id,
                    tool=tool,
                    ts=ts,
                    payload=payload,  # as stored: a damaged row keeps its type (verify names it)
                    prev=prev,
                    hash=hash_,
                )
                for seq, type_, run_id, call_id, tool, ts, payload, prev, hash_ in rows
            ]

        start = after
        while True:
            records = await reader.submit(functools.partial(fetch, start))
            for record in records:
                yield record
            if len(records) < _READ_PAGE:
                return
            start = records[-1].seq

    async def verify(self, *, deep: bool = False, progress: Progress | None = None) -> Verification:
        """Check the whole stored chain (seq continuity, links, hashes of stored bytes),
        that it ends where its authenticated head says (see ``_check_head``), and that it
        holds every event its mark file names (``_sqlite_mark``: events a damaged WAL
        took back). ``deep=True`` also runs SQLite's ``PRAGMA integrity_check`` over the
        whole file, its run_id/call_id indexes included (slower: it reads every page).
        ``progress(done, total)`` is called from the reader thread every
        ``PROGRESS_EVERY`` records (``total``: the head's seq)."""
        if self._reader is None:
            await self.open()
        reader = self._reader
        if reader is None:
            raise LedgerError(f"ledger {self.path} is closed")
        if self._keyed and self._key is None:
            return self._cannot_check()
        check = functools.partial(
            _verify_file,
            path=self.path,
            key=self._key,
            wait_s=self._busy_timeout_s,
            deep=deep,
            progress=progress,
        )
        result: Verification | None = await reader.submit(check)
        if result is None:
            return self._cannot_check()
        if result.ok and self._mark_note and self._writer is not None:
            # The writer made a new mark at open: the file no longer shows it was missing.
            note = f"{result.reason}; {self._mark_note}" if result.reason else self._mark_note
            return Verification(ok=True, checked=result.checked, reason=note)
        return result

    def _cannot_check(self) -> Verification:
        return Verification(
            ok=False,
            checked=0,
            reason=(
                f"ledger {self.path} is keyed (HMAC): its chain cannot be checked without the key"
            ),
        )


def _head_seq(meta: dict[str, str] | None) -> int:
    """The head's seq in a probed file's meta (0 when absent or not a number)."""
    value = (meta or {}).get("head_seq", "")
    return int(value) if value.isdigit() else 0


def _outdated(conn: sqlite3.Connection) -> bool:
    """Whether the file's indexes are an earlier version's (``_MIGRATIONS`` changes them)."""
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    return "events_call_run" not in names or "events_call_id" in names


def _ignore_result(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _unreadable(
    conn: sqlite3.Connection,
    sqls: tuple[str, str],
    start: int,
    params: list[Any],
    path: str,
    exc: sqlite3.Error,
) -> LedgerError:
    """The LedgerError for a page SQLite could not hand back, naming the row if it can.

    Off the fast path: the rows are read again one per statement (LIMIT 1, so SQLite
    does not step onto the next row, as the sqlite3 module does ahead of a fetch) up to
    the one that fails; that row's seq is then read alone (an INTEGER, which decodes).
    """
    page, first = sqls
    last = start
    for _ in range(_READ_PAGE):
        try:
            row = conn.execute(page, (last, *params, 1)).fetchone()
        except sqlite3.Error:
            break
        if row is None:
            break
        last = row[0]
    try:
        found = conn.execute(first, (last, *params)).fetchone()
    except sqlite3.Error:
        found = None
    where = f"seq {found[0]}" if found is not None else f"a record after seq {last}"
    return LedgerError(
        f"ledger {path}: {where} cannot be read: the file is damaged ({exc}); see ledger verify"
    )
