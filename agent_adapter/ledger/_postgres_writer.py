"""The Postgres ledger's group-commit writer task and its ``LISTEN`` connection.

Writer. One task per ledger object owns the write connection. Each wake-up takes every
batch staged since the last one into one transaction, and a transaction is one call of
the schema's function ``append_events`` (``_postgres_schema.append_function_sql``),
outside a transaction block, so that the call is its commit: one round trip.

1. The rows are chained (explicit seq/prev/hash, computed here: the key never reaches
   the database) on the head this writer's last commit left, and the call sends them
   with the head they expect. The function locks the head row ``FOR UPDATE`` (so writers
   of every process commit one at a time, in seq order, and a rollback leaves no gap),
   checks it is the expected one and that the table ends at it, checks and writes the
   effect claims, inserts the rows, moves the head and sends ``pg_notify`` (delivered
   at commit, in commit order, to wake idle followers).
2. Another writer moved the head. Unkeyed (the chain is plain SHA-256), the function
   chains the rows again itself, on the head it holds, and answers ``RECHAINED``: that
   head and the committed rows past what our followers have heard, then ``APPENDED``;
   this writer chains its rows the same way (``_rechain``: the events get their stored
   seq and hash, and the function's head is checked against ours). A fleet sharing one
   ledger so commits once per commit, instead of answering stale and going again
   (measured: 2.2 stale answers per commit of a 4 x 16 fleet before). Effect claims are
   then the claims table's to refuse (step 3: the same rule as ``Follow.refused``).
   Keyed (the key never reaches the database), or with no head known yet: the function
   answers the head and those rows, writing nothing. Those rows are the others' events:
   handed to the followers before any waiter wakes, and their effect claims refuse our
   batches that claim the same keys (``Follow.refused``, as in the SQLite store); the
   survivors are chained again on that head and sent again. After
   ``_OPTIMISTIC_TRIES`` such answers in a row the writer opens a transaction block, so
   the head stays locked from the call that reads it to COMMIT: a writer that keeps
   losing the race is never starved.
3. A claim the function finds held by another holder past the claimer's horizon (a
   claim the events did not show: written around the ledger) refuses its batch, and the
   transaction is sent again without it. A table that does not end at the head refuses
   the append (appending would cover the evidence), with the reason read off the table.

Lost commits. A connection that fails while the call (or a block's COMMIT) is under way
leaves the outcome unknown. The writer reconnects, ends the call's server session and
waits until it is gone (so that a call still on its way, or not yet at the head lock,
cannot run later and chain the rows again on a head they were written on meanwhile),
and takes the head lock (so the old transaction has ended one way or the other).
Behind a pooler (PgBouncer, in either mode) the server session is not known and is not
ended: the head lock alone waits only for a call that had reached it (a call delayed
longer could still land after the read back: stored twice, though chained correctly).
Then the writer looks for its last row
by seq and hash; where the function may have chained the rows again on a moved head
(unkeyed), for its rows by their payloads past the head it chained them on: found, the
batch committed (and its events get the seq and hash they are stored with); not found,
it did not, and only then is it written again. A database that stays away past
``timeout_s`` fails the batches with ``LedgerError``: they are not reported done and
this writer does not write them again (they may have landed; ``ledger verify`` and the
next read show whether they did).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
import time
from hashlib import sha256 as _sha256
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from ..errors import LedgerError
from ._batches import Batch, Written, hand_over, settle_batches, wake
from ._chain import _damage, chain_hash
from ._chaining import chain_batch, mixed, unchain
from ._events import EffectClaimed, Event, decode_event
from ._follow import EffectTaken, Follow
from ._head import head_mac
from ._postgres_schema import (
    APPENDED,
    CLAIM_RACE,
    CLAIMED,
    RECHAINED,
    STALE,
    connection_lost,
    q,
    retryable,
    server_refused,
    translate,
)
from ._recordable import UnrecordableEvent

if TYPE_CHECKING:
    import asyncpg

__all__ = ["PgWriter", "read_since"]

_log = logging.getLogger("agent_adapter.ledger")
_astuple = msgspec.structs.astuple
_UNIQUE_VIOLATION = "23505"
# A digest as this writer writes it (the empty hash of an empty ledger included).
_HEX = re.compile(r"[0-9a-f]{64}|")
# Answers STALE in a row before a writer takes the head and holds it to COMMIT. A stale
# answer costs a round trip and no flush; the block holds the head for three round trips
# and the chaining. Measured with 4 processes x 16 appenders (3 rounds each, load 10): 2
# tries ~1,260-1,700 events/s, 8 tries ~1,430-2,950, unbounded ~1,450-2,400.
_OPTIMISTIC_TRIES = 8
# What a commit leaves for the followers (see _batches.hand_over).
_Done = tuple[list[Event], int, list[Written]]
# Each written batch's events and its rows, in seq order.
_Chunks = list[tuple[list[Event], list[tuple[Any, ...]]]]


class _Store(Protocol):
    """What the writer uses of its ``PostgresLedger`` (which passes itself)."""

    @property
    def schema(self) -> str: ...

    @property
    def where(self) -> str: ...

    @property
    def timeout_s(self) -> float: ...

    @property
    def channel(self) -> str: ...

    @property
    def _key(self) -> bytes | None: ...

    @property
    def _follows(self) -> tuple[Follow, ...]:
        """Read once per wake-up (replaced whole, never changed in place)."""
        ...

    async def _connect(self, doing: str) -> asyncpg.Connection:
        """A new connection; ``LedgerError`` naming the database."""
        ...

    async def _let_go(self, conn: asyncpg.Connection) -> None:
        """Done with ``conn``: back to the pool, or closed."""
        ...

    def _holder(self, owner: Follow | None) -> str:
        """The holder name a claim of ``owner``'s is written with."""
        ...


class _Final(LedgerError):
    """What reading a lost commit back found that ends it (its outcome unknown, or rows
    stored otherwise than sent): the batches fail with it as it is, not retried (writing
    again could store them twice) and not worded again."""


def _rechain(
    chunks: _Chunks,
    seq: int,
    prev: str,
    last_seq: int,
    last_hash: str,
    last_mac: str | None,
    where: str,
) -> None:
    """Our rows (in place) and events as the append function chained them after ``seq``
    and ``prev`` (unkeyed: the same SHA-256); it ended at ``last_seq``/``last_hash``, and
    moved the head to them with ``last_mac`` (None: not known)."""
    at, link = seq, prev
    for events, chained in chunks:
        for i, (row, event) in enumerate(zip(chained, events, strict=True)):
            at += 1
            payload = row[6]
            digest = _sha256(b"%d:%b:%b" % (at, link.encode(), payload)).hexdigest()
            event.seq, event.prev, event.hash = at, link, digest
            chained[i] = (at, *row[1:7], link, digest)
            link = digest
    if (
        at != last_seq
        or link != last_hash
        or (last_mac is not None and last_mac != head_mac(at, link, None))
    ):
        raise _Final(
            f"ledger {where}: this append was committed through seq {last_seq} "
            f"({last_hash[:12]}), but its rows chain to seq {at} ({link[:12]}) here: "
            "the database's append function is not this version's. The events are "
            "stored as the database chained them: do not append them again (see "
            "ledger verify)"
        )


def _moved_taken(batches: list[Batch], head: int, delta: int) -> None:
    """Batches refused for a claim an earlier batch of the same commit made (its seq past
    ``head``, the head they were chained on), told the seq that claim is stored at once
    the commit's rows were chained again ``delta`` further on."""
    if not delta:
        return
    for batch in batches:
        taken = batch.error
        if isinstance(taken, EffectTaken) and taken.seq > head:
            batch.error = EffectTaken(taken.key, taken.seq + delta)


class _LostCommit(Exception):
    """COMMIT was sent and the connection failed before its answer: outcome unknown.

    ``after``: the head the rows were chained on; ``seq``/``hash``: where our last row is,
    chained as sent; ``moved``: our rows as sent
    (``_Chunks``) when the function may have chained them again on a head another writer
    had moved (``_rechain``), so that they may have landed past ``seq``; else None.
    ``backend``: the server session the call went to (pid, start), None where a pooler
    stands between (its pid is not the server's)."""

    def __init__(
        self,
        after: int,
        seq: int,
        hash_: str,
        done: _Done,
        cause: BaseException,
        moved: _Chunks | None,
        backend: tuple[int, Any] | None,
    ) -> None:
        super().__init__(str(cause))
        self.after, self.seq, self.hash, self.done, self.cause = after, seq, hash_, done, cause
        self.moved, self.backend = moved, backend


class _Stale(Exception):
    """The head was not where this writer last left it: write again, reading it first."""


class _ClaimRefused(Exception):
    """The claims table refused keys step 2 let through (a writer we could not see)."""

    def __init__(self, refused: dict[int, EffectTaken]) -> None:
        super().__init__("claims refused")
        self.refused = refused


async def read_since(conn: asyncpg.Connection, schema: str, after: int, where: str) -> list[Event]:
    """The committed events past ``after``, decoded (in a transaction, or without one)."""
    rows = await conn.fetch(
        f"SELECT seq, prev, hash, payload FROM {q(schema)}.events WHERE seq > $1 ORDER BY seq",
        after,
    )
    return _decoded_rows(rows, where)


def _decoded_rows(rows: Any, where: str) -> list[Event]:
    """Rows (seq, prev, hash, payload) another writer committed, checked and decoded."""
    events = []
    for seq, prev, hash_, payload in rows:
        damage = _damage(prev, hash_, payload)
        if damage:
            raise LedgerError(
                f"ledger {where}: seq {seq} (appended by another writer) is damaged: "
                f"{damage}; see ledger verify"
            )
        try:
            event = decode_event(payload)
        except Exception as exc:
            raise LedgerError(
                f"ledger {where}: the payload of seq {seq} (appended by another writer) "
                f"cannot be decoded: {exc}"
            ) from exc
        event.seq, event.prev, event.hash = seq, prev, hash_
        events.append(event)
    return events


class PgWriter:
    """The group-commit writer of one ``PostgresLedger`` (see the module docstring)."""

    def __init__(self, ledger: _Store, conn: asyncpg.Connection) -> None:
        self._ledger = ledger
        self._schema = ledger.schema
        self._where = ledger.where
        self._key = ledger._key
        self._wait_s = ledger.timeout_s
        self._conn: asyncpg.Connection | None = conn
        self._pending: list[Batch] = []
        self._wakeup = asyncio.Event()
        self._stopping = False
        #: the highest seq a NOTIFY announced (a hint that idle followers lag)
        self.hint = 0
        #: (seq, hash, mac) of the head as this writer's last transaction left it
        self._known: tuple[int, str, str] | None = None
        #: the write connection's server session: (the pid the connection was told, the
        #: server's pid, start), the server's None behind a pooler (``_session``)
        self._backend: tuple[int, int | None, Any] | None = None
        self._unseen = False  # warned that the role cannot see its own session
        self._task = asyncio.get_running_loop().create_task(
            self._serve(), name=f"agent-adapter ledger writer {self._where}"
        )
        s = q(self._schema)
        self._lock_ms = str(int(self._wait_s * 1000))
        # One append transaction (see _postgres_schema.append_function_sql).
        self._append = (
            "SELECT o_kind, o_seq, o_text, o_hash, o_payload FROM"
            f" {s}.append_events({', '.join(f'${i}' for i in range(1, 16))})"
        )
        self._lock_head = f"SELECT seq, hash, mac FROM {s}.head WHERE id = 1 FOR UPDATE"
        # (A pool's connection has the service's settings: the wait is set here.)
        self._lock_wait = f"SET LOCAL lock_timeout = {int(self._wait_s * 1000)}"
        # The head and the last row in one statement (one snapshot: no commit between).
        self._head_and_last = (
            f"SELECT h.seq, h.hash, h.mac, l.seq, l.prev, l.hash, l.payload FROM {s}.head h"
            f" LEFT JOIN LATERAL (SELECT seq, prev, hash, payload FROM {s}.events"
            " ORDER BY seq DESC LIMIT 1) l ON true WHERE h.id = 1"
        )
        self._hash_at = f"SELECT hash FROM {s}.events WHERE seq = $1"
        self._own_session = (
            "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        )
        # A lost call's session, ended (a no-op once it has): no row once it is gone.
        self._end_session = (
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid = $1 AND backend_start = $2"
        )
        self._between = (
            f"SELECT seq, prev, hash, payload FROM {s}.events"
            " WHERE seq > $1 AND seq <= $2 ORDER BY seq"
        )
        # Unkeyed, the append function may chain our rows again on a head others moved
        # (SHA-256, the same as ours); keyed, the key stays here and a moved head is
        # answered STALE.
        self._rechains = self._key is None

    # -- the loop side -------------------------------------------------------------------

    def put(self, batches: list[Batch]) -> None:
        """Queue ``batches`` for the next transaction (refused once stopping)."""
        if self._stopping:
            error = LedgerError(f"ledger {self._where} is closed")
            for batch in batches:
                batch.error = error
            settle_batches(batches)
            return
        self._pending.extend(batches)
        self._wakeup.set()

    def poke(self, seq: int) -> None:
        """A NOTIFY said the ledger reached ``seq``: idle followers are handed it."""
        if seq > self.hint:
            self.hint = seq
            self._wakeup.set()

    async def stop(self) -> None:
        """Write what is queued, then end the task and close the connection."""
        self._stopping = True
        self._wakeup.set()
        await asyncio.shield(self._task)
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._ledger._let_go(conn)

    async def _serve(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batches, self._pending = self._pending, []
            follows = self._ledger._follows
            try:
                if batches:
                    done = await self._write(batches, follows)
                    # Before the waiters wake: a refused claim finds its cause applied.
                    hand_over(follows, batches, done)
                    wake(batches)
                elif follows and self.hint > min(f.delivered for f in follows):
                    await self._deliver(follows)
            except Exception:  # never out of the task: its waiters would hang
                _log.exception("ledger %s: the writer failed", self._where)
                error = LedgerError(f"ledger {self._where}: the writer failed; see the log")
                for batch in batches:
                    if batch.error is None and not batch.future.done():
                        batch.error = error
                settle_batches(batches)
            if self._stopping and not self._pending:
                return

    async def _deliver(self, follows: tuple[Follow, ...]) -> None:
        """Idle followers: hand them what others committed (a read, no lock: commits are
        serialized by the head lock, so what is committed is always a gap-free prefix)."""
        since = min(f.delivered for f in follows)
        try:
            conn = await self._connection(time.monotonic() + self._wait_s)
            foreign = await read_since(conn, self._schema, since, self._where)
        except Exception as exc:
            _log.warning("ledger %s: catching up followers failed: %s", self._where, exc)
            return
        if foreign:
            hand_over(follows, [], (foreign, foreign[-1].seq, []))

    # -- transactions --------------------------------------------------------------------

    async def _connection(self, deadline: float) -> asyncpg.Connection:
        """The write connection, reconnected (waiting up to ``deadline``) when lost."""
        conn = self._conn
        if conn is not None and not conn.is_closed():
            said = conn.get_server_pid()  # the server's, or a pooler's own number
            if self._backend is None or self._backend[0] != said:
                self._backend = await self._own(conn, said)
            return conn
        self._conn = None
        pause = 0.05
        while True:
            try:
                conn = await self._ledger._connect("appending")
            except LedgerError as exc:
                cause = exc.__cause__
                if cause is None or not connection_lost(cause) or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 1.0)
                continue
            self._conn = conn
            return await self._connection(deadline)

    async def _own(self, conn: asyncpg.Connection, said: int) -> tuple[int, int | None, Any]:
        """Once a connection: the server session a lost call of it is ended by (``_end``).
        Not known behind a pooler (the pid the connection was told is the pooler's), nor
        where the role may not read ``pg_stat_activity``: then nothing is ended."""
        try:
            row = await conn.fetchrow(self._own_session)
        except Exception as exc:
            if not server_refused(exc):
                raise
            if not self._unseen:
                self._unseen = True
                _log.warning(
                    "ledger %s: this role cannot read its own session in pg_stat_activity "
                    "(%s): a lost commit's server session cannot be ended before it is "
                    "read back",
                    self._where,
                    exc,
                )
            return said, None, None
        pid = int(row[0]) if row is not None else None
        if pid != said:
            pid = None  # a pooler's connection: its server session is not known
        return said, pid, row[1] if row is not None else None

    def _session(self, conn: asyncpg.Connection) -> tuple[int, Any] | None:
        """The server session ``conn``'s calls go to (pid, start); None if not known."""
        backend = self._backend
        if backend is None or backend[0] != conn.get_server_pid() or backend[1] is None:
            return None
        return backend[1], backend[2]

    def _drop(self) -> None:
        self._known = None
        self._backend = None  # a new connection's session is read again (a pid reused)
        conn, self._conn = self._conn, None
        if conn is not None:
            # A pooled connection the server closed may already be back in its pool
            # (asyncpg releases it on close): then there is nothing left to end.
            with contextlib.suppress(Exception):
                conn.terminate()

    async def _write(self, batches: list[Batch], follows: tuple[Follow, ...]) -> _Done | None:
        """Commit ``batches`` (see the module docstring); None when they failed."""
        deadline = time.monotonic() + self._wait_s
        pause = 0.05
        refused: dict[int, EffectTaken] = {}
        while True:
            for i, batch in enumerate(batches):
                batch.error = refused.get(i)
            try:
                conn = await self._connection(deadline)
                return await self._transaction(conn, batches, follows, refused)
            except _ClaimRefused as found:
                # Each answer refuses batches not refused before: this ends.
                refused.update(found.refused)
                continue
            except _Stale:
                # A claim written around the head lock (nothing was written): go again,
                # but not past the deadline (such a writer could win every time).
                if time.monotonic() < deadline:
                    continue
                self._fail(
                    batches,
                    LedgerError(
                        f"ledger {self._where}: appending: effect claims kept being written "
                        f"around the head lock for {self._wait_s:g} s (by something that "
                        "is not an agent-adapter writer); nothing was written"
                    ),
                )
                return None
            except _LostCommit as lost:
                try:
                    landed = await self._landed(lost)
                except _Final as exc:
                    self._fail(batches, exc)
                    return None
                except Exception as exc:
                    later = " or, on a head another writer moved, later" if lost.moved else ""
                    self._fail(
                        batches,
                        LedgerError(
                            f"ledger {self._where}: appending: the connection was lost during "
                            f"COMMIT and the ledger could not be read back ({exc}); whether "
                            f"the batch was written (after seq {lost.after}{later}) is unknown: "
                            "this writer does not write it again; do not append it again "
                            "(see ledger verify)"
                        ),
                    )
                    return None
                if landed is not None:
                    if lost.moved is not None:  # chained again, maybe further on
                        _moved_taken(batches, lost.after, landed[1] - lost.seq)
                    return landed
                _log.warning(
                    "ledger %s: COMMIT was lost and did not land; writing it again", self._where
                )
                continue
            except Exception as exc:
                # Ours (LedgerError, an unrecordable event) or the server's refusal of a
                # statement leave the connection usable; anything else (a lost or
                # confused connection, a timeout) may not, so it is dropped, which rolls
                # the transaction back on the server: it had not reached COMMIT.
                ours = isinstance(exc, LedgerError | UnrecordableEvent)
                lost_conn = not ours and not server_refused(exc)
                if lost_conn:
                    self._drop()
                else:
                    await self._rollback()
                if (lost_conn or retryable(exc)) and time.monotonic() < deadline:
                    # Nothing of it committed (the transaction had not reached COMMIT).
                    await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                    pause = min(pause * 2, 1.0)
                    continue
                if isinstance(exc, LedgerError):
                    error = exc
                elif isinstance(exc, UnrecordableEvent):
                    error = exc
                else:
                    error = translate(self._where, "appending", exc, self._wait_s)
                self._fail(batches, error)
                return None

    def _fail(self, batches: list[Batch], error: BaseException) -> None:
        for batch in batches:
            if batch.error is None:
                batch.error = error
            unchain(batch.events)

    async def _rollback(self) -> None:
        self._known = None
        conn = self._conn
        if conn is not None and not conn.is_closed() and conn.is_in_transaction():
            try:
                await conn.execute("ROLLBACK")
            except Exception:
                self._drop()

    async def _landed(self, lost: _LostCommit) -> _Done | None:
        """After a lost COMMIT: what it committed (``_transaction``'s answer), or None if
        nothing. The call's server session is ended first (``_end``), then the head lock
        taken, so that the old call has ended (committed or rolled back) and can no
        longer run. Rows the function may have chained on a moved head (``lost.moved``)
        are looked for past where we chained them, by their payloads. It has ``timeout_s``
        of its own (a call lost to the client's timeout comes past the append's)."""
        self._drop()
        deadline = time.monotonic() + self._wait_s
        pause = 0.05
        while True:
            try:
                conn = await self._connection(deadline)
                if lost.backend is not None:
                    await self._end(conn, lost.backend, deadline)
                async with conn.transaction():
                    await conn.execute(self._lock_wait)
                    head = await conn.fetchrow(self._lock_head)
                    found = await conn.fetchval(self._hash_at, lost.seq)
                    if found == lost.hash:
                        return lost.done
                    if lost.moved is None:
                        return None
                    past = await conn.fetch(self._between, lost.after, int(head[0]))
                return self._moved_to(lost, past, lost.seq - lost.after)
            except _Final:
                raise
            except Exception as exc:
                if server_refused(exc) or time.monotonic() >= deadline:
                    raise
                self._drop()
                await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 1.0)

    async def _end(
        self, conn: asyncpg.Connection, backend: tuple[int, Any], deadline: float
    ) -> None:
        """End the server session of a lost call and wait until it is gone: a call whose
        bytes reached the server late, or that had not yet asked for the head lock, would
        otherwise run after we read the head (and, unkeyed, chain its rows again on it:
        stored twice). A session that has ended already is a no-op."""
        start, pause = time.monotonic(), 0.005
        while await conn.fetch(self._end_session, *backend):
            # Signalled; it ends at its next check for interrupts (waiting for a lock
            # included). The server's process state: polled, there is no event to wait on.
            now = time.monotonic()
            if now >= deadline:
                raise _Final(
                    f"ledger {self._where}: appending: the connection was lost during "
                    f"COMMIT and its server session (pid {backend[0]}) had not ended "
                    f"{now - start:.1f} s after it was terminated; whether the batch was "
                    "written is unknown: do not append it again (see ledger verify)"
                )
            await asyncio.sleep(min(pause, max(0.0, deadline - now)))
            pause = min(pause * 2, 0.1)

    def _moved_to(self, lost: _LostCommit, past: list[Any], count: int) -> _Done | None:
        """Our rows (``lost.moved``) among ``past`` (seq, prev, hash, payload: the committed
        rows past the head we chained on): found, ours chained as they are stored and the
        rows before them the others' (handed to the followers); None if not there. Found
        twice (another writer stored the same bytes), which is ours is not known: a
        ``LedgerError``, neither acknowledged nor written again."""
        assert lost.moved is not None
        ours = [row[6] for _, rows in lost.moved for row in rows]
        payloads = [bytes(row[3]) for row in past]
        found = [
            start
            for start in range(len(past) - count + 1)
            if payloads[start : start + count] == ours
        ]
        if not found:
            return None
        if len(found) > 1:
            raise _Final(
                f"ledger {self._where}: appending: the connection was lost during COMMIT "
                f"and the batch's events are stored {len(found)} times past seq "
                f"{int(past[0][0]) - 1} (at seq {', '.join(str(past[i][0]) for i in found)}), "
                "by this writer and another or by others only: whether this batch was "
                "written is unknown; do not append it again (see ledger verify)"
            )
        start = found[0]
        first, last = past[start], past[start + count - 1]
        start_seq, start_prev = int(first[0]) - 1, str(first[1])
        _rechain(lost.moved, start_seq, start_prev, int(last[0]), str(last[2]), None, self._where)
        foreign, _, written = lost.done
        # (Rows already read in the transaction, past the head we chained on, are in
        # ``foreign``: only those after them are news.)
        heard = foreign[-1].seq if foreign else 0
        news = [tuple(r) for r in past[:start] if int(r[0]) > heard]
        foreign = foreign + _decoded_rows(news, self._where)
        return foreign, int(last[0]), written

    async def _transaction(
        self,
        conn: asyncpg.Connection,
        batches: list[Batch],
        follows: tuple[Follow, ...],
        refused: dict[int, EffectTaken],
    ) -> _Done:
        """One append transaction (see the module docstring)."""
        where, key, schema = self._where, self._key, self._schema
        heard = min(f.delivered for f in follows) if follows else None
        foreign: list[Event] = []
        if not any(batch.events for batch in batches):
            # Only catching up. What is committed is always a gap-free prefix (commits
            # are serialized by the head lock), so a read without a lock is the truth.
            if heard is None:
                return foreign, 0, []
            foreign = await read_since(conn, schema, heard, where)
            through = max(f.delivered for f in follows)
            return foreign, max(foreign[-1].seq if foreign else 0, through), []
        # The head as our last commit left it; without one, the first call only asks
        # for it (it answers STALE with the head, writing nothing).
        expected = self._known or (-1, "", "")
        since = heard
        if since is not None and since < expected[0]:
            # A follower that has not heard all of the committed prefix the rows go on
            # (a new one): its claims must be seen before the batches are chained.
            foreign = await read_since(conn, schema, since, where)
            if foreign:
                since = foreign[-1].seq
        tries = 0
        in_block = False  # an explicit transaction holds the head between calls
        # The server session to end if a call's answer is lost (read now: a lost
        # connection may no longer say).
        session = self._session(conn)
        while True:
            head_seq, head_hash = expected[0], expected[1]
            here: dict[str, tuple[int, Follow | None]] | None = (
                {} if follows and mixed(batches) else None
            )
            written: list[Written] = []
            rows: list[tuple[Any, ...]] = []
            chunks: _Chunks = []  # for ``_rechain``
            # The claims to write: key -> (seq, holder, horizon, batch index)
            claims: dict[str, tuple[int, str, int, int]] = {}
            seq, prev = head_seq, head_hash
            if head_seq >= 0:
                for index, batch in enumerate(batches):
                    batch.error = refused.get(index)
                    if batch.error is not None:  # refused by the claims in an earlier try
                        unchain(batch.events)
                        continue
                    owner = batch.owner
                    done = chain_batch(batch, seq, prev, key, where, foreign, here)
                    if done is None:
                        continue
                    chained, seq, prev = done
                    rows.extend(chained)
                    chunks.append((batch.events, chained))
                    holder = self._ledger._holder(owner)
                    horizon = batch.horizon if owner is not None else 0
                    for event in batch.events:
                        if isinstance(event, EffectClaimed):
                            if here is not None:
                                here.setdefault(event.key, (event.seq, owner))
                            claims[event.key] = (event.seq, holder, horizon, index)
                    if follows:
                        written.append((owner, batch.events, chained))
                if not rows:  # every batch refused: nothing to write
                    if in_block:
                        await conn.execute("ROLLBACK")
                    return foreign, head_seq, written
            mac = head_mac(seq, prev, key) if rows else ""
            try:
                answer = await self._call(conn, expected, since, in_block, rows, claims, prev, mac)
            except (LedgerError, _Stale):
                raise
            except Exception as exc:
                if rows and not in_block and not server_refused(exc):
                    # Sent, and no answer: the call may have committed (on another head,
                    # if the function could chain the rows again: see ``_landed``).
                    moved = chunks if self._rechains else None
                    raise _LostCommit(
                        head_seq, seq, prev, (foreign, seq, written), exc, moved, session
                    ) from exc
                raise
            kind = answer[0][0]
            if kind == RECHAINED:
                # Unkeyed: the function chained the rows on the head as it found it.
                foreign_rows = answer[1:-1]
                if since is not None and foreign_rows:
                    foreign.extend(_decoded_rows([r[1:] for r in foreign_rows], where))
                _, seq, mac, prev, _ = answer[-1]
                _rechain(chunks, int(answer[0][1]), str(answer[0][3]), seq, prev, mac, where)
                _moved_taken(batches, head_seq, int(answer[0][1]) - head_seq)
                kind = APPENDED
            if kind == APPENDED:
                if in_block:
                    try:
                        await conn.execute("COMMIT")
                    except Exception as exc:
                        if server_refused(exc):
                            raise
                        raise _LostCommit(
                            head_seq, seq, prev, (foreign, seq, written), exc, None, session
                        ) from exc
                self._known = (seq, prev, mac)
                # Our own NOTIFY is no news: it does not wake this writer for followers.
                self.hint = max(self.hint, seq)
                return foreign, seq, written
            if kind == STALE:
                _, at, at_mac, at_hash, _ = answer[0]
                expected = (int(at), str(at_hash), str(at_mac))
                if not _HEX.fullmatch(expected[1]) or not hmac.compare_digest(
                    expected[2], head_mac(expected[0], expected[1], key)
                ):
                    # A wrong key (or an altered head): appending would chain under a
                    # key the ledger was not written with.
                    await self._refuse(conn)
                if since is not None:
                    foreign.extend(_decoded_rows([r[1:] for r in answer[1:]], where))
                    if foreign:
                        since = max(since, foreign[-1].seq)
                tries += 1
                if tries >= _OPTIMISTIC_TRIES and not in_block:
                    # Other writers keep moving the head between our answers: take it
                    # and hold it until COMMIT, so this writer is never starved.
                    await conn.execute("BEGIN")
                    in_block = True
                    expected = (-1, "", "")
                continue
            if in_block:
                await conn.execute("ROLLBACK")
            if kind == CLAIMED:
                raise _ClaimRefused(
                    {claims[str(r[2])][3]: EffectTaken(str(r[2]), int(r[1])) for r in answer}
                )
            # UNEVEN, about the head the function holds (rechaining, not the one we knew).
            self._known = None
            await self._refuse(conn)

    async def _call(
        self,
        conn: asyncpg.Connection,
        expected: tuple[int, str, str],
        since: int | None,
        in_block: bool,
        rows: list[tuple[Any, ...]],
        claims: dict[str, tuple[int, str, int, int]],
        hash_: str,
        mac: str,
    ) -> list[Any]:
        """The append function's call (one round trip; outside a block its commit)."""
        values = list(claims.values())
        try:
            answer: list[Any] = await conn.fetch(
                self._append,
                *expected,
                since,
                not in_block,
                self._lock_ms,
                rows,
                list(claims),
                [v[0] for v in values],
                [v[1] for v in values],
                [v[2] for v in values],
                hash_,
                mac,
                self._ledger.channel,
                self._rechains and not in_block,
            )
            return answer
        except Exception as exc:
            if server_refused(exc):
                if in_block:
                    await conn.execute("ROLLBACK")
                if CLAIM_RACE in str(exc):
                    # A claim was written around the head lock between the function's
                    # check and its insert: nothing was written; go again.
                    raise _Stale() from exc
                if getattr(exc, "sqlstate", None) == _UNIQUE_VIOLATION:
                    # Rows past the head (or a row that raced in): say which.
                    self._known = None
                    await self._refuse(conn)
            raise

    async def _refuse(self, conn: asyncpg.Connection) -> None:
        """Raise the LedgerError that says why this ledger may not be appended to (off the
        fast path: the head's MAC does not fit the key, or the table does not end at it),
        read off the head and the last row as one snapshot shows them (no commit between
        them mistaken for tampering)."""
        where, key = self._where, self._key
        row = await conn.fetchrow(self._head_and_last)
        if row is None:
            raise LedgerError(
                f"ledger {where}: its head row is missing: the ledger was altered; appends "
                "are refused so that the evidence stays (see ledger verify)"
            )
        head_seq, head_hash, mac = int(row[0]), str(row[1]), str(row[2])
        seq, prev = 0, ""
        if row[3] is not None:
            seq, last_prev, prev, payload = int(row[3]), row[4], str(row[5]), bytes(row[6])
            if key is not None and chain_hash(seq, last_prev, payload, key) != prev:
                raise LedgerError(
                    f"ledger {where}: the key does not match the last record (seq {seq}); "
                    "appending with it would break the chain (wrong key, or the record was "
                    "altered)"
                )
        if head_seq != seq or (seq and head_hash != prev):
            raise LedgerError(
                f"ledger {where}: the ledger ends at seq {seq} but its head says {head_seq}: "
                "events were deleted from the end, replaced, or written without the head; "
                "appends are refused so that the evidence stays (see ledger verify)"
            )
        if not _HEX.fullmatch(head_hash) or not hmac.compare_digest(
            mac, head_mac(head_seq, head_hash, key)
        ):
            raise LedgerError(
                f"ledger {where}: its head does not verify under "
                + ("this key" if key is not None else "no key")
                + ": a wrong key, or the head was altered; appends are refused (see ledger "
                "verify)"
            )
        raise LedgerError(f"ledger {where}: the table changed under the head lock; try again")
