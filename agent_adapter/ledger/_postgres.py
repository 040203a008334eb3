"""``PostgresLedger``: one ledger for a fleet of service replicas, on PostgreSQL.

This module holds the ledger class: its lifecycle (connect, check or create the schema,
close), appends staged for the writer, reads, ``verify`` and the ``LISTEN`` connection.
Its parts live beside it: ``_postgres_writer`` (the group-commit writer task, effect
claims, lost commits) and ``_postgres_schema`` (the tables, the checks at open, the
driver's errors as ``LedgerError``). The semantics are ``SQLiteLedger``'s: the same
chain, head and follower contract (``_follow``), so an executor cannot tell them apart.
What both stores share lives in neutral modules: ``_staging`` (the front of a group
commit), ``_batches`` and ``_chaining`` (a commit's batches) and ``_head`` (the head's
MAC and its check).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import LedgerError
from ._batches import Batch
from ._chain import Progress, Record, Verification, columns_match, counted, verify_records
from ._events import Event, decode_event
from ._follow import Follow
from ._head import check_head, head_mac
from ._postgres_schema import (
    FORMAT,
    SCHEMA_VERSION,
    check_schema_name,
    describe_dsn,
    inspect,
    migrate,
    q,
    schema_sql,
    split_dsn,
    translate,
)
from ._postgres_writer import PgWriter
from ._protocol import LOCK_TIMEOUT_S
from ._staging import GroupCommit

if TYPE_CHECKING:
    import asyncpg

__all__ = ["PostgresLedger"]

_READ_PAGE = 2048
_log = logging.getLogger("agent_adapter.ledger")


class PostgresLedger(GroupCommit):
    """A ledger in one PostgreSQL schema, shared by every replica that opens it.

    ``PostgresLedger(dsn, *, schema="agent_adapter", key=None, readonly=False,
    create=True, timeout_s=30.0, pool=None)``; extra ``agent-adapter[postgres]`` (asyncpg).

    - ``append``/``append_many`` return once the events are committed; concurrent
      appends of one ledger object share one transaction (group commit by one writer
      task). seq is gap-free and commit-ordered across every process: each transaction
      locks the schema's head row ``FOR UPDATE`` and writes explicit seq/prev/hash.
    - ``follow``/``catch_up`` as ``SQLiteLedger``: each follower is handed what the
      others committed before its appends return, and a claim of an effect key another
      writer claimed first is refused in the write transaction (``EffectTaken``). A
      ``LISTEN`` connection wakes idle followers (a hint; reading ``seq > last`` is the truth).
    - ``schema`` holds the ledger's tables (created on first open unless ``readonly``
      or ``create=False``; one ledger per schema). A ``?schema=NAME`` in the DSN is
      taken when ``schema`` is not given, and removed before connecting.
    - ``key`` (bytes) makes every hash an HMAC, computed here (the key never reaches
      the database). A keyed ledger opened without its key reads, but cannot be checked
      or appended to.
    - A database that goes away: appends wait up to ``timeout_s`` for it, then fail
      with ``LedgerError`` (not reported done). A commit whose answer was lost is
      resolved by reading the ledger back under the head lock, never by appending again.
    - Connections: its own (``asyncpg.connect`` of ``dsn``), three while open (the
      writer's, the reader's, and the ``LISTEN`` one once something follows) and one more
      during ``verify()``; or, with ``pool`` (an ``asyncpg`` pool the service already
      has, on the same database), those taken from the pool and given back at ``close()``
      (size the pool for them: at least 3 more than the service itself holds). ``dsn``
      still names the database in messages.
    - Every failure is a ``LedgerError`` naming the database (never the password).
      Use one ledger object from one event loop.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        key: bytes | None = None,
        readonly: bool = False,
        create: bool = True,
        timeout_s: float = LOCK_TIMEOUT_S,
        pool: asyncpg.Pool | None = None,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.startswith(("postgresql://", "postgres://")):
            raise ValueError("dsn must be a postgresql:// URL")
        if key is not None and not isinstance(key, bytes | bytearray):
            raise TypeError("key must be bytes")
        dsn, in_dsn = split_dsn(dsn)
        if schema is not None and in_dsn is not None and schema != in_dsn:
            raise ValueError(f"schema {schema!r} and the DSN's ?schema={in_dsn} differ")
        self.schema = check_schema_name(schema or in_dsn or "agent_adapter")
        self._dsn = dsn
        self.where = describe_dsn(dsn, self.schema)
        self._key = bytes(key) if key is not None else None
        self.readonly = bool(readonly)
        self._create = bool(create) and not self.readonly
        self.timeout_s = float(timeout_s)
        if not self.timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        if pool is not None and not (hasattr(pool, "acquire") and hasattr(pool, "release")):
            raise TypeError("pool must be an asyncpg pool (asyncpg.create_pool)")
        self._pool = pool
        self._keyed = False
        self._opened = False
        self._closed = False
        self._open_lock = asyncio.Lock()
        self._writer: PgWriter | None = None
        self._reader: asyncpg.Connection | None = None
        self._read_lock = asyncio.Lock()
        self._listener: asyncpg.Connection | None = None
        self._listening: asyncio.Task[None] | None = None
        self._notified = asyncio.Event()
        self._announced = 0
        self._staged: list[Batch] = []
        self._kick_scheduled = False
        self._follows: tuple[Follow, ...] = ()
        self._holders: dict[Follow, str] = {}
        self._numbers = itertools.count(1)
        # Who holds a claim: this object (process, host) and the follower within it.
        self._token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        digest = self.schema if len(self.schema) <= 40 else self.schema[:40]
        #: the NOTIFY channel of this schema's ledger (a hint, never the truth)
        self.channel = f"agent_adapter_ledger.{digest}"

    def __repr__(self) -> str:
        return f"PostgresLedger({self.where!r})"

    @property
    def keyed(self) -> bool:
        """True when the ledger's chain is HMAC-keyed (known once opened)."""
        return self._keyed

    # -- connections ----------------------------------------------------------------------

    async def _connect(self, doing: str) -> asyncpg.Connection:
        """A new connection; ``LedgerError`` naming the database (its cause kept)."""
        try:
            import asyncpg
        except ImportError:
            raise LedgerError(
                "PostgresLedger needs asyncpg: pip install 'agent-adapter[postgres]'"
            ) from None
        try:
            if self._pool is not None:
                pooled: asyncpg.Connection = await self._pool.acquire(
                    timeout=min(self.timeout_s, 30.0)
                )
                return pooled
            conn: asyncpg.Connection = await asyncpg.connect(
                self._dsn,
                timeout=min(self.timeout_s, 30.0),
                command_timeout=self.timeout_s + 5,
                # No lock_timeout here: PgBouncer refuses startup parameters it does not
                # know. Each transaction that takes the head sets its own wait.
                server_settings={"application_name": "agent-adapter"},
            )
        except Exception as exc:
            raise translate(self.where, doing, exc, self.timeout_s) from exc
        return conn

    async def _let_go(self, conn: asyncpg.Connection) -> None:
        """Done with ``conn``: back to the pool (reset there), or closed."""
        with contextlib.suppress(Exception):
            if self._pool is not None:
                await asyncio.wait_for(self._pool.release(conn), 5)
            else:
                await asyncio.wait_for(conn.close(), 5)

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, check (or create) the schema, start the writer; idempotent.

        ``LedgerError`` naming the database when it cannot be reached or refuses the
        login, is not UTF-8, holds another application's tables in the schema, was
        written by a newer version, or (``readonly``/``create=False``) holds no ledger.
        """
        if self._opened:
            return
        async with self._open_lock:
            if self._opened:
                return
            if self._closed:
                raise LedgerError(f"ledger {self.where} is closed")
            reader = await self._connect("opening")
            try:
                await self._prepare(reader)
                if not self.readonly:
                    conn = await self._connect("opening")
                    self._writer = PgWriter(self, conn)
            except BaseException:
                await self._let_go(reader)
                raise
            self._reader = reader
            self._opened = True

    async def _prepare(self, conn: asyncpg.Connection) -> None:
        try:
            meta = await inspect(conn, self.schema, self.where)
            if meta is None:
                if not self._create:
                    raise LedgerError(
                        f"ledger {self.where}: no ledger in this schema"
                        + (" (a reading command never creates one)" if self.readonly else "")
                    )
                meta = await self._create_schema(conn)
            elif int(meta["schema_version"]) < SCHEMA_VERSION and not self.readonly:
                meta = await migrate(conn, self.schema, self.where, self.timeout_s)
            self._keyed = meta.get("keyed") == "1"
            if self._key is not None and not self._keyed and not self.readonly:
                await self._add_key(conn)
        except LedgerError:
            raise
        except Exception as exc:
            raise translate(self.where, "opening", exc, self.timeout_s) from exc

    async def _create_schema(self, conn: asyncpg.Connection) -> dict[str, str]:
        async with conn.transaction():
            # Two replicas opening a new schema at once: the second waits, then finds it.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                f"agent-adapter:{self.schema}",
            )
            meta = await inspect(conn, self.schema, self.where)
            if meta is not None:
                return meta
            for statement in schema_sql(self.schema):
                await conn.execute(statement)
            meta = {
                "format": FORMAT,
                "schema_version": str(SCHEMA_VERSION),
                "keyed": "1" if self._key is not None else "0",
            }
            await conn.executemany(
                f"INSERT INTO {q(self.schema)}.meta (name, value) VALUES ($1, $2)",
                list(meta.items()),
            )
            # A head from the start: deleting every event is caught too.
            await conn.execute(
                f"INSERT INTO {q(self.schema)}.head (id, seq, hash, mac) VALUES (1, 0, '', $1)",
                head_mac(0, "", self._key),
            )
        return meta

    async def _add_key(self, conn: asyncpg.Connection) -> None:
        """A key for an unkeyed ledger: only while it is empty (an existing chain cannot
        be re-keyed)."""
        s = q(self.schema)
        async with conn.transaction():
            await conn.execute(f"SET LOCAL lock_timeout = {int(self.timeout_s * 1000)}")
            head = await conn.fetchrow(f"SELECT seq FROM {s}.head WHERE id = 1 FOR UPDATE")
            count = await conn.fetchval(
                f"SELECT count(*) FROM (SELECT 1 FROM {s}.events LIMIT 1) e"
            )
            if (head is not None and head[0]) or count:
                raise LedgerError(
                    f"ledger {self.where} was written without a key; a key cannot be added "
                    "to an existing chain"
                )
            await conn.execute(f"UPDATE {s}.meta SET value = '1' WHERE name = 'keyed'")
            await conn.execute(
                f"UPDATE {s}.head SET seq = 0, hash = '', mac = $1 WHERE id = 1",
                head_mac(0, "", self._key),
            )
        self._keyed = True

    async def close(self) -> None:
        """Commit what is queued, then close every connection (idempotent)."""
        if self._closed:
            return
        self._closed = True
        async with self._open_lock:
            writer, self._writer = self._writer, None
            reader, self._reader = self._reader, None
            listener, self._listener = self._listener, None
            listening, self._listening = self._listening, None
        if writer is not None:
            staged, self._staged = self._staged, []
            if staged:
                writer.put(staged)  # queued before the stop: committed, not dropped
            await writer.stop()
        if listening is not None:
            listening.cancel()
            with contextlib.suppress(BaseException):
                await listening
        for conn in (reader, listener):
            if conn is not None:
                await self._let_go(conn)

    async def __aenter__(self) -> PostgresLedger:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- appends ---------------------------------------------------------------------------

    async def _open_for_appends(self) -> None:
        if self.readonly:
            raise LedgerError(f"ledger {self.where} is open read-only")
        await self.open()

    def _holder(self, owner: Follow | None) -> str:
        """The holder name a claim is written with ('' for an append of nobody's)."""
        if owner is None:
            return ""
        holder = self._holders.get(owner)
        if holder is None:
            # Numbered by a counter, never by how many there are: a follower that left
            # must not hand its name to the next one.
            holder = self._holders[owner] = f"{self._token}:{next(self._numbers)}"
        return holder

    def follow(self, apply: Callable[[Event], None], after: int) -> Follow:
        """Keep a projection up with everyone else's appends (``Executor.start`` calls it).

        The contract of ``SQLiteLedger.follow``: before an append of this follower's
        returns, ``apply`` has been called (on this loop, in seq order) with every event
        someone else committed since it last heard (or since ``after``); an append of its
        own holding ``effect.claimed`` is refused (``EffectTaken``) when another writer
        claimed the key after what it had applied. Idle followers are also handed new
        events when a NOTIFY announces them.
        """
        follower = Follow(self, apply, after, asyncio.get_running_loop())
        self._add_follower(follower)
        if self._listening is None and not self._closed:
            self._listening = asyncio.get_running_loop().create_task(self._listen())
        return follower

    def _unfollow(self, follower: Follow) -> None:
        super()._unfollow(follower)
        self._holders.pop(follower, None)

    _KEY_HINT = "PostgresLedger(dsn, key=...)"
    _HAND_OVER_AT_ONCE = True  # the writer is a task of this loop (PgWriter)

    def _where(self) -> str:
        return self.where

    def _put_staged(self, writer: Any, staged: list[Batch]) -> None:
        writer.put(staged)

    # -- LISTEN ----------------------------------------------------------------------------

    async def _listen(self) -> None:
        """Keep a LISTEN connection while open; reconnect when it is lost (a hint only:
        a follower that missed a NOTIFY still hears everything at its next append)."""
        pause = 0.1
        while not self._closed:
            lost = asyncio.Event()
            try:
                conn = await self._connect("listening")
            except LedgerError as exc:
                _log.warning("%s; followers are woken at their appends only", exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
                continue
            pause = 0.1
            self._listener = conn
            try:
                conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                await conn.add_listener(self.channel, self._on_notify)
                # What was committed before LISTEN (or while it was lost) sent no NOTIFY
                # we heard: the head says where the ledger is now.
                head = await conn.fetchval(f"SELECT seq FROM {q(self.schema)}.head WHERE id = 1")
                self._on_notify(conn, 0, self.channel, head)
                await lost.wait()
            except Exception as exc:
                _log.warning("ledger %s: listening failed: %s", self.where, exc)
            finally:
                self._listener = None
                with contextlib.suppress(Exception):
                    conn.terminate()

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        try:
            seq = int(str(payload))
        except ValueError:
            return
        if seq > self._announced:
            self._announced = seq
        self._notified.set()
        writer = self._writer
        if writer is not None and self._follows:
            writer.poke(seq)

    async def wait_appended(self, after: int, timeout_s: float) -> None:
        """Return once a NOTIFY says the ledger is past ``after``, or after ``timeout_s``
        (``ledger tail`` follows this way, then reads ``seq > after`` as the truth)."""
        if self._listening is None and not self._closed:
            self._listening = asyncio.get_running_loop().create_task(self._listen())
        deadline = time.monotonic() + timeout_s
        while self._announced <= after:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._notified.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._notified.wait(), left)

    # -- reads -----------------------------------------------------------------------------

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        """One query on the reader connection (reconnected once when lost)."""
        if not self._opened:
            await self.open()
        async with self._read_lock:
            for attempt in (1, 2):
                conn = self._reader
                if self._closed:
                    raise LedgerError(f"ledger {self.where} is closed")
                try:
                    if conn is None or conn.is_closed():
                        conn = self._reader = await self._connect("reading")
                    rows: list[Any] = await conn.fetch(sql, *args)
                    return rows
                except LedgerError:
                    raise
                except Exception as exc:
                    from ._postgres_schema import connection_lost

                    if attempt == 1 and connection_lost(exc):
                        if conn is not None:
                            with contextlib.suppress(Exception):  # a pool's may be back
                                conn.terminate()
                        self._reader = None
                        continue
                    raise translate(self.where, "reading", exc, self.timeout_s) from exc
        raise AssertionError("unreachable")

    async def read(
        self, after: int = 0, *, run_id: str | None = None, call_id: str | None = None
    ) -> AsyncIterator[Event]:
        """Committed events with seq > ``after``, in seq order, optionally of one run/call.

        Read in pages by seq (each page its own snapshot): events committed while reading
        are included as the pages reach them.
        """
        where = ["seq > $1"]
        params: list[Any] = []
        if run_id is not None:
            params.append(run_id)
            where.append(f"run_id = ${len(params) + 1}")
        if call_id is not None:
            params.append(call_id)
            where.append(f"call_id = ${len(params) + 1}")
        sql = (
            f"SELECT seq, prev, hash, payload FROM {q(self.schema)}.events"
            f" WHERE {' AND '.join(where)} ORDER BY seq LIMIT {_READ_PAGE}"
        )
        start = after
        while True:
            rows = await self._fetch(sql, start, *params)
            for seq, prev, hash_, payload in rows:
                try:
                    event = decode_event(payload)
                except Exception as exc:
                    raise LedgerError(
                        f"ledger {self.where}: the payload of seq {seq} cannot be decoded: {exc}"
                    ) from exc
                event.seq, event.prev, event.hash = seq, prev, hash_
                yield event
            if len(rows) < _READ_PAGE:
                return
            start = rows[-1][0]

    async def read_records(self, after: int = 0) -> AsyncIterator[Record]:
        """Stored records with seq > ``after``, in seq order, payloads as stored."""
        sql = (
            f"SELECT seq, type, run_id, call_id, tool, ts, payload, prev, hash"
            f" FROM {q(self.schema)}.events WHERE seq > $1 ORDER BY seq LIMIT {_READ_PAGE}"
        )
        start = after
        while True:
            rows = await self._fetch(sql, start)
            for row in rows:
                yield _record(row)
            if len(rows) < _READ_PAGE:
                return
            start = rows[-1][0]

    async def verify(self, *, deep: bool = False, progress: Progress | None = None) -> Verification:
        """Check the whole stored chain in one snapshot: seq continuity from 1, links,
        hashes of the stored bytes, the indexed columns against the payload, and the head
        (events deleted from the end are not ok at the last seq + 1; rows past the head,
        written without it, at the head's seq + 1). ``deep`` checks the same (the server
        keeps its own indexes). ``progress(done, total)`` is called from the checking
        thread every ``PROGRESS_EVERY`` records (``total``: the head's seq)."""
        if not self._opened:
            await self.open()
        if self._closed:
            raise LedgerError(f"ledger {self.where} is closed")
        if self._keyed and self._key is None:
            return self._cannot_check()
        conn = await self._connect("verifying")
        try:
            return await self._verify(conn, progress)
        except LedgerError:
            raise
        except Exception as exc:
            raise translate(self.where, "verifying", exc, self.timeout_s) from exc
        finally:
            await self._let_go(conn)

    async def _verify(
        self, conn: asyncpg.Connection, progress: Progress | None = None
    ) -> Verification:
        s = q(self.schema)
        loop = asyncio.get_running_loop()
        mismatch: list[int] = []
        last: list[Any] = [0, ""]
        head_seq = -1
        at_head: list[str] = []
        # One snapshot: a commit between reading the head and the rows is not a truncation.
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            meta = {
                str(k): str(v) for k, v in await conn.fetch(f"SELECT name, value FROM {s}.meta")
            }
            head = await conn.fetchrow(f"SELECT seq, hash, mac FROM {s}.head WHERE id = 1")
            if head is not None:
                head_seq = int(head[0])
                meta.update(head_seq=str(head[0]), head_hash=str(head[1]), head_mac=str(head[2]))
            pages: asyncio.Queue[list[Record] | None] = asyncio.Queue(maxsize=2)

            async def produce() -> None:
                start = 0
                sql = (
                    f"SELECT seq, type, run_id, call_id, tool, ts, payload, prev, hash"
                    f" FROM {s}.events WHERE seq > $1 ORDER BY seq LIMIT {_READ_PAGE}"
                )
                try:
                    while True:
                        rows = await conn.fetch(sql, start)
                        await pages.put([_record(r) for r in rows])
                        if len(rows) < _READ_PAGE:
                            return
                        start = rows[-1][0]
                finally:
                    await pages.put(None)

            ended = [False]

            def records() -> Iterator[Record]:
                while not ended[0]:
                    page = asyncio.run_coroutine_threadsafe(pages.get(), loop).result()
                    if page is None:
                        ended[0] = True
                        return
                    for record in page:
                        if not mismatch and not columns_match(record):
                            mismatch.append(record.seq)
                        if record.seq == head_seq:
                            at_head.append(record.hash)
                        last[0], last[1] = record.seq, record.hash
                        yield record

            def check() -> Verification:
                scanned: Iterator[Record] = records()
                if progress is not None:
                    scanned = counted(scanned, progress, max(head_seq, 0))
                result = verify_records(scanned, self._key, marked_keyed=meta.get("keyed") == "1")
                # Drain what is left, so the producer's last put returns.
                for _ in records():
                    pass
                return result

            producer = loop.create_task(produce())
            try:
                result = await asyncio.to_thread(check)
            finally:
                await producer
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
        last_seq, last_hash = int(last[0]), str(last[1])
        verdict = check_head(
            self.where, last_seq, last_hash, at_head[0] if at_head else None, meta, self._key
        )
        if verdict.ok and 0 <= head_seq < last_seq:
            # Every writer of this schema moves the head in the transaction that appends:
            # rows past it were written around the ledger (by hand, another tool).
            return Verification(
                ok=False,
                checked=head_seq,
                first_bad_seq=head_seq + 1,
                reason=(
                    f"seq {head_seq + 1} to {last_seq} are past the head (seq {head_seq}): "
                    "written without the ledger's head (inserted by hand?)"
                ),
            )
        if head is None:
            return Verification(
                ok=False,
                checked=last_seq,
                first_bad_seq=last_seq + 1,
                reason="the head row is missing (deleted): deletions from the end cannot be told",
            )
        return verdict

    def _cannot_check(self) -> Verification:
        return Verification(
            ok=False,
            checked=0,
            reason=(
                f"ledger {self.where} is keyed (HMAC): its chain cannot be checked without the key"
            ),
        )


def _record(row: Any) -> Record:
    seq, type_, run_id, call_id, tool, ts, payload, prev, hash_ = row
    return Record(
        seq=seq,
        type=type_,
        run_id=run_id,
        call_id=call_id,
        tool=tool,
        ts=ts,
        payload=bytes(payload),
        prev=prev,
        hash=hash_,
    )
