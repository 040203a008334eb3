"""The SQLite ledger's worker threads: the group-commit writer and the readers.

Threads. A writer thread owns the only write connection and drains a queue of pending
appends: in one ``BEGIN IMMEDIATE`` transaction it reads the last seq and hash from the
table (another process may have appended since), chains every queued event, inserts
them and commits, then wakes every waiter with one hop back to the event loop. Appends
that arrive while a transaction is being written wait in the queue and share the next
one (group commit); each ``append`` returns only once its own transaction committed.
A reader thread owns a second, query-only connection for ``read`` and ``verify``, so
reads never wait behind an fsync. Both are daemon threads with plain ``sqlite3``
connections: one thread hop per batch (not per statement), and a ledger that is never
closed cannot keep the interpreter from exiting. What a commit does with its batches
(chain them, hand the followers what they did not append, wake the waiters) is shared
with the Postgres writer: ``_chaining`` and ``_batches``.

A read-only ledger has one thread, ``_ReadOnlyReader``, reading through the snapshot
connections of ``_sqlite_files``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import LedgerError
from ._batches import Batch, Written, hand_over, wake
from ._chain import _damage, chain_hash
from ._chaining import chain_batch, mixed, unchain
from ._events import EffectClaimed, Event
from ._follow import Follow, read_since
from ._head import head_mac, parse_head_seq
from ._sqlite_files import (
    _SNAPSHOT_TRIES,
    _Changed,
    _checked,
    _connect_snapshot,
    _is_busy,
    _probe,
    _signature,
    _translate,
)
from ._sqlite_head import _LAST, _PUT_HEAD, _UPDATE_HEAD
from ._sqlite_mark import MarkWriter, check_before_create, mark_path

_INSERT = (
    "INSERT INTO events (seq, type, run_id, call_id, tool, ts, payload, prev, hash)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_STOP = object()


class _Store(Protocol):
    """What the threads read of their ``SQLiteLedger`` (which passes itself)."""

    @property
    def path(self) -> str: ...

    @property
    def _key(self) -> bytes | None: ...

    @property
    def _busy_timeout_s(self) -> float: ...

    @property
    def _follows(self) -> tuple[Follow, ...]:
        """Read by the writer thread once per commit (replaced whole, never changed)."""
        ...


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

    def __init__(self, ledger: _Store) -> None:
        super().__init__(f"agent-adapter ledger reader {ledger.path}", ledger.path, self._open)
        self._path = ledger.path
        self._wait_s = ledger._busy_timeout_s
        self._snapshot: Any = None
        self.meta: dict[str, str] | None = None
        #: No mark file beside the ledger at the first open (it says so: see open()).
        self.without_mark = False

    def _open(self) -> sqlite3.Connection:
        # The first open checks the file as a writer's probe would; the file must exist.
        if self.meta is None:
            meta = _probe(self._path, must_exist=True, wait_s=self._wait_s)
            if meta is None:
                check_before_create(self._path)  # the events a mark names were lost
                raise LedgerError(
                    f"ledger {self._path} is an empty database, not a ledger yet (a "
                    "read-only ledger is never created)"
                )
            self.meta = meta
            self.without_mark = not os.path.exists(mark_path(self._path))
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
    """The group-commit writer: each wake-up drains the queue into one transaction.

    It keeps the mark (``_sqlite_mark``): checked against the table before the first
    transaction, moved forward after each commit that appended, before the commit's
    appends are acknowledged.
    """

    def __init__(self, ledger: _Store, connect: Callable[[], sqlite3.Connection]) -> None:
        mark = MarkWriter(ledger.path, ledger._key, ledger._busy_timeout_s)

        def connect_and_check() -> sqlite3.Connection:
            conn = connect()
            # Before open() returns: a verify() or an append right after it finds the
            # mark checked (and created, for a new ledger). It never raises.
            mark.start(conn)
            return conn

        super().__init__(
            f"agent-adapter ledger writer {ledger.path}", ledger.path, connect_and_check
        )
        self._ledger = ledger
        self._path = ledger.path
        self._key = ledger._key
        self._wait_s = ledger._busy_timeout_s
        self._mark = mark
        # (seq, hash, head MAC) of the last commit that appended, for the mark; None
        # otherwise.
        self._committed: tuple[int, str, str] | None = None
        # (data_version, last seq, last hash, head_seq) after our last commit: the tail
        # as it stands while no other connection commits. None: read it again.
        self._tail: tuple[int, int, str, object] | None = None

    @property
    def mark_restarted_at(self) -> int:
        """The seq the mark was started again at because its file was missing (0: not)."""
        return self._mark.restarted_at

    def serve(self) -> None:
        conn = self.conn
        assert conn is not None
        try:
            self._serve(conn)
        finally:
            self._mark.close()

    def _serve(self, conn: sqlite3.Connection) -> None:
        q = self.queue
        get, get_nowait, empty = q.get, q.get_nowait, q.empty
        while True:
            item = get()
            batches: list[Batch] = []
            stop = False
            while True:
                if item is _STOP:
                    stop = True
                    break
                batches.extend(item)
                # (This thread is the queue's only consumer: not empty means get_nowait
                # has an item, and no queue.Empty is raised per commit.)
                if empty():
                    break
                item = get_nowait()
            if batches:
                follows = self._ledger._follows
                done = self._write(conn, batches, follows)
                # Before the waiters wake: a refused claim finds its cause applied.
                hand_over(follows, batches, done)
                wake(batches)
            if stop:
                return

    def _write(
        self, conn: sqlite3.Connection, batches: list[Batch], follows: tuple[Follow, ...]
    ) -> tuple[list[Event], int, list[Written]] | None:
        """Commit ``batches``: (others' events since the followers last heard, the last
        seq, the written batches), or None when the transaction failed."""
        deadline = time.monotonic() + self._wait_s
        pause = 0.001
        while True:
            for batch in batches:
                batch.error = None
            self._committed = None
            try:
                done = self._transaction(conn, batches, follows)
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
            else:
                if self._committed is not None:
                    # Before the waiters wake: every acknowledged event is under the mark.
                    self._mark.advance(*self._committed)
                return done
            for batch in batches:
                batch.error = error
                unchain(batch.events)
            return None

    def _read_tail(self, conn: sqlite3.Connection) -> tuple[int, str, object]:
        """(last seq, last hash, the stored head_seq or None), read and checked inside
        the write lock: another process may have appended since our last commit."""
        head_seq, head_hash, last_seq, last_prev, last_hash, last_payload = conn.execute(
            _LAST
        ).fetchone()
        key = self._key
        if last_seq is None:
            seq, prev = 0, ""
        else:
            damage = _damage(last_prev, last_hash, last_payload)
            if damage:
                raise LedgerError(
                    f"ledger {self._path}: the last record (seq {last_seq}) is damaged: "
                    f"{damage}; appends are refused (see ledger verify)"
                )
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
            at = parse_head_seq(head_seq, self._path)
            if at > seq or (at == seq and head_hash != prev):
                raise LedgerError(
                    f"ledger {self._path}: the ledger ends at seq {seq} but its head says "
                    f"{at}: events were deleted from the end (or replaced); appends are "
                    "refused so that the evidence stays (see ledger verify)"
                )
        return seq, prev, head_seq

    def _transaction(
        self, conn: sqlite3.Connection, batches: list[Batch], follows: tuple[Follow, ...]
    ) -> tuple[list[Event], int, list[Written]]:
        conn.execute("BEGIN IMMEDIATE")
        tail, self._tail = self._tail, None
        key = self._key
        # PRAGMA data_version changes when another connection (of any process) commits,
        # never for this connection's own commits. Read inside the write lock and
        # unchanged since our last commit, the table and head are what that commit left
        # (checked before it): they need not be read and checked again.
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if tail is not None and tail[0] == version:
            _, seq, prev, head_seq = tail
        else:
            seq, prev, head_seq = self._read_tail(conn)
        if self._mark.error is not None:
            # The table ends before the mark (a damaged WAL took events back), or the
            # mark cannot be kept: appending would move the mark past the evidence.
            raise LedgerError(str(self._mark.error))
        # What other writers committed since the followers last heard: handed to them,
        # and the claims in it refuse their batches that claim the same key.
        foreign: list[Event] = []
        if follows:
            since = min(f.delivered for f in follows)
            if seq > since:
                foreign = read_since(conn, since)
        # Batches of several owners in one transaction: a key claimed by an earlier one
        # refuses the later ones of other owners (the first wins).
        here: dict[str, tuple[int, Follow | None]] | None = (
            {} if follows and mixed(batches) else None
        )
        written: list[Written] = []
        rows: list[tuple[Any, ...]] = []
        where = str(self._path)
        for batch in batches:
            owner = batch.owner
            done = chain_batch(batch, seq, prev, key, where, foreign, here)
            if done is None:
                continue
            chained, seq, prev = done
            rows.extend(chained)
            if here is not None:
                for event in batch.events:
                    if isinstance(event, EffectClaimed):
                        here.setdefault(event.key, (event.seq, owner))
            if follows:
                written.append((owner, batch.events, chained))
        if rows:
            conn.executemany(_INSERT, rows)
            # In the same transaction: the head is exactly as durable as the events.
            put = _PUT_HEAD if head_seq is None else _UPDATE_HEAD
            mac = head_mac(seq, prev, key)
            conn.execute(put, (seq, prev, mac))
        conn.execute("COMMIT")
        if rows:
            self._committed = (seq, prev, mac)
            head_seq = seq
        self._tail = (version, seq, prev, head_seq)
        return foreign, seq, written
