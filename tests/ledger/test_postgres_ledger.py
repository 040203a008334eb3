"""PostgresLedger on a real server: faults, tampering and bad input.

Each test has its own schema on the session's throwaway cluster (``_pg_fixtures``); the
test of a database that goes away starts a cluster of its own, so that stopping it
touches no other test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from _helpers import timeline

from agent_adapter.errors import LedgerError
from agent_adapter.ledger import CallRequested, EffectClaimed, PostgresLedger, Verification
from agent_adapter.ledger._follow import EffectTaken, appending
from agent_adapter.ledger._postgres_schema import RECHAINED
from agent_adapter.testing.postgres import Cluster, binaries


def _event(i: int, run_id: str = "r") -> CallRequested:
    return CallRequested(ts=1.0, run_id=run_id, call_id=f"c{i}", tool="t", args={"i": i})


async def _admin(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn)


class _FlakyCommit:
    """The writer's connection, with the answer of an append's commit lost once (the
    connection dies)."""

    def __init__(self, conn: Any, commit_sql: str, *, lands: bool) -> None:
        self._conn = conn
        self._commit_sql = commit_sql
        self._lands = lands
        self.tripped = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def fetch(self, sql: str, *args: Any) -> Any:
        # An append is one call of the schema's function, outside a transaction block:
        # the call is its commit.
        if sql == self._commit_sql and not self.tripped and self._conn.is_in_transaction():
            raise AssertionError("the append's call was expected to be its own transaction")
        if sql == self._commit_sql and not self.tripped and args[6]:  # rows to write
            self.tripped = True
            if self._lands:
                await self._conn.fetch(sql, *args)  # committed; the answer is what is lost
            self._conn.terminate()  # not committed: never sent
            raise ConnectionResetError("connection lost during COMMIT")
        return await self._conn.fetch(sql, *args)


@pytest.mark.parametrize("after", [1, 0], ids=["follower-caught-up", "follower-behind"])
@pytest.mark.parametrize("moved", [False, True], ids=["same-head", "moved-head"])
@pytest.mark.parametrize("lands", [True, False], ids=["committed", "rolled-back"])
async def test_a_lost_commit_is_read_back_never_appended_twice(
    postgres_dsn: str, pg_schema: str, lands: bool, moved: bool, after: int
) -> None:
    """COMMIT's answer lost: the writer reconnects, reads the head under its lock, and
    either acknowledges the batch that landed or writes once the one that did not. With
    the head moved by another writer just before, the function chained the batch again
    on that head (an unkeyed ledger): it is found there, by its rows, not written again,
    and the other writer's event is handed to the follower once, whether the follower
    heard it in the transaction (one that started behind the writer's head) or not."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        # Followers hear the others only through the append (no NOTIFY to read first).
        ledger._on_notify = lambda *_: None  # type: ignore[method-assign]
        await ledger.append(_event(0))
        heard: list[tuple[int, str]] = []
        follower = ledger.follow(lambda e: heard.append((e.seq, e.call_id)), after)
        if moved:
            async with PostgresLedger(postgres_dsn, schema=pg_schema) as other:
                await other.append(_event(9, run_id="other"))
        writer = ledger._writer
        assert writer is not None and writer._conn is not None
        flaky = _FlakyCommit(writer._conn, writer._append, lands=lands)
        writer._conn = flaky
        token = appending.set(follower)  # the batch is the follower's own
        try:
            stored = await ledger.append_many([_event(1), _event(2)])
        finally:
            appending.reset(token)
        assert flaky.tripped
        first = 3 if moved else 2
        assert [e.seq for e in stored] == [first, first + 1]
        events = [(e.seq, e.call_id, e.hash) async for e in ledger.read()]
        theirs = [events[1]] if moved else []
        assert events == [
            (1, "c0", events[0][2]),
            *theirs,
            *((e.seq, e.call_id, e.hash) for e in stored),
        ]
        assert [(e.seq, e.prev) for e in stored] == [
            (first, events[first - 2][2]),
            (first + 1, stored[0].hash),
        ]
        assert await ledger.verify() == Verification(ok=True, checked=first + 1)
        await asyncio.sleep(0)  # the follower is handed what it heard on the loop
        assert heard == [(1, "c0")][after:] + ([(2, "c9")] if moved else [])
        follower.close()


async def test_a_lost_batch_another_writer_stored_too_is_neither_claimed_nor_rewritten(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A lost commit, chained again on a moved head, whose rows another writer had
    stored byte for byte just before (after one of its own): found twice past the head,
    which is ours is not known. The append fails saying so; nothing is written again or
    taken as ours. (Stored where ours were chained, the same bytes would be the same
    rows, hashes included: that is taken as ours.)"""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(_event(0))
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as other:
            await other.append_many([_event(5), _event(1), _event(2)])
        writer = ledger._writer
        assert writer is not None and writer._conn is not None
        flaky = _FlakyCommit(writer._conn, writer._append, lands=True)
        writer._conn = flaky
        with pytest.raises(LedgerError, match=r"stored 2 times past seq 1 \(at seq 3, 5\)"):
            await ledger.append_many([_event(1), _event(2)])
        assert flaky.tripped
        stored = [e.call_id async for e in ledger.read()]
        assert stored == ["c0", "c5", "c1", "c2", "c1", "c2"]
        assert await ledger.verify() == Verification(ok=True, checked=6)
        await ledger.append(_event(3))  # the writer goes on from the head as it is
        assert await ledger.verify() == Verification(ok=True, checked=7)


@pytest.mark.parametrize("lost", [False, True], ids=["answered", "answer-lost"])
async def test_a_claim_refused_by_its_own_commit_names_the_seq_it_is_stored_at(
    postgres_dsn: str, pg_schema: str, lost: bool
) -> None:
    """Two followers claim one key in the same commit, chained on a head another writer
    has moved since (the function chains the rows again one further on): the second is
    refused naming the seq the first's claim is stored at, not the one it was chained
    at first; so too when the commit's answer was lost and it is found by reading back."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(_event(0))
        f1 = ledger.follow(lambda event: None, 1)
        f2 = ledger.follow(lambda event: None, 1)
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as other:
            await other.append(_event(9, run_id="other"))
        if lost:
            writer = ledger._writer
            assert writer is not None and writer._conn is not None
            writer._conn = _FlakyCommit(writer._conn, writer._append, lands=True)

        def claim(run_id: str) -> EffectClaimed:
            return EffectClaimed(
                ts=1.0, run_id=run_id, call_id="c", tool="refund", key="refund:o1", digest="d"
            )

        staged = []
        for follower, run in ((f1, "r1"), (f2, "r2")):  # one commit: nothing awaited
            token = appending.set(follower)
            try:
                staged.append(ledger._stage([claim(run)]))
            finally:
                appending.reset(token)
        await staged[0]
        with pytest.raises(EffectTaken) as taken:
            await staged[1]
        stored = [(e.seq, e.run_id) async for e in ledger.read()]
        assert stored == [(1, "r"), (2, "other"), (3, "r1")]
        assert (taken.value.key, taken.value.seq) == ("refund:o1", 3)
        f1.close()
        f2.close()


async def test_a_lost_commit_during_an_outage_says_its_outcome_is_unknown(
    postgres_dsn: str, pg_schema: str
) -> None:
    """COMMIT's answer lost, then the database unreachable for longer than ``timeout_s``:
    the append fails saying the batch's fate is unknown and that it is not written
    again (not as a plain connection error, which a caller might retry)."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema, timeout_s=0.5) as ledger:
        await ledger.append(_event(0))
        writer = ledger._writer
        assert writer is not None and writer._conn is not None
        flaky = _FlakyCommit(writer._conn, writer._append, lands=True)
        writer._conn = flaky
        connect = ledger._connect
        refused = ConnectionRefusedError(111, "connection refused")

        async def unreachable(doing: str) -> Any:
            raise LedgerError(f"{doing}: cannot connect") from refused

        ledger._connect = unreachable  # type: ignore[method-assign]
        with pytest.raises(LedgerError) as failed:
            await ledger.append_many([_event(1), _event(2)])
        assert flaky.tripped
        message = str(failed.value)
        assert "lost during COMMIT and the ledger could not be read back" in message
        assert "(after seq 1" in message and "do not append it again" in message
        ledger._connect = connect  # type: ignore[method-assign]
        # It had landed: read back as stored once, and the writer goes on after it.
        assert [e.call_id async for e in ledger.read()] == ["c0", "c1", "c2"]
        (stored,) = await ledger.append_many([_event(3)])
        assert stored.seq == 4
        assert await ledger.verify() == Verification(ok=True, checked=4)


class _NoActivityView:
    """The writer's connection, for a role refused ``pg_stat_activity``."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        if "pg_stat_activity" in sql:
            raise asyncpg.InsufficientPrivilegeError("permission denied for view pg_stat_activity")
        return await self._conn.fetchrow(sql, *args)


async def test_a_role_that_cannot_see_its_session_still_appends(
    postgres_dsn: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the role may not read ``pg_stat_activity`` (revoked from PUBLIC), appends
    work as behind a pooler: the session is not known (nothing to end after a lost
    commit), said once in the log."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(_event(0))
        writer = ledger._writer
        assert writer is not None and writer._conn is not None
        writer._conn = _NoActivityView(writer._conn)
        for i in (1, 2):
            writer._backend = None  # read again, as for a new connection
            await ledger.append(_event(i))
        assert writer._backend is not None and writer._session(writer._conn) is None
        said = [r for r in caplog.records if "cannot read its own session" in r.message]
        assert len(said) == 1
        assert await ledger.verify() == Verification(ok=True, checked=3)


class _HeldCall:
    """The writer's connection, with an append's call held back and its answer lost: the
    bytes still on their way to the server (a slow network, a busy backend), the
    connection dropped on the client's side only, its server session alive."""

    def __init__(self, conn: Any, append_sql: str, lost_after_s: float = 0.0) -> None:
        self._conn = conn
        self._append_sql = append_sql
        self._lost_after_s = lost_after_s
        self.held: tuple[str, tuple[Any, ...]] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def terminate(self) -> None:
        """Dropped by the writer: the session stays (the bytes are in flight)."""

    async def fetch(self, sql: str, *args: Any) -> Any:
        if sql == self._append_sql and self.held is None and args[6]:  # rows to write
            self.held = (sql, args)
            await asyncio.sleep(self._lost_after_s)  # (a client's timeout, say)
            raise ConnectionResetError("connection lost during COMMIT")
        return await self._conn.fetch(sql, *args)


@pytest.mark.parametrize(
    ("moved", "lost_after_s"),
    [(False, 0.0), (True, 0.0), (False, 1.2)],
    ids=["same-head", "moved-head", "lost-past-the-append-deadline"],
)
async def test_a_lost_call_arriving_late_cannot_store_the_batch_twice(
    postgres_dsn: str, pg_schema: str, moved: bool, lost_after_s: float
) -> None:
    """A lost call whose bytes reach the server after the writer has read the head back
    and written the batch again: the writer ended the call's server session first, so
    the late call finds no session to run in. Left alive, it would have chained the
    rows again on the head it found (an unkeyed ledger): stored twice. A call lost only
    after the append's ``timeout_s`` is read back too (the read back has a budget of
    its own)."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema, timeout_s=1.0) as ledger:
        await ledger.append(_event(0))
        if moved:
            async with PostgresLedger(postgres_dsn, schema=pg_schema) as other:
                await other.append(_event(9, run_id="other"))
        writer = ledger._writer
        assert writer is not None and writer._conn is not None
        real = writer._conn
        held = _HeldCall(real, writer._append, lost_after_s)
        writer._conn = held
        stored = await ledger.append_many([_event(1), _event(2)])
        assert held.held is not None
        first = 3 if moved else 2
        assert [e.seq for e in stored] == [first, first + 1]
        # The held call arrives now: its session was ended, so it does not run.
        sql, args = held.held
        with pytest.raises((asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError)):
            await real.fetch(sql, *args)
        assert [e.call_id async for e in ledger.read()] == (
            ["c0", "c9", "c1", "c2"] if moved else ["c0", "c1", "c2"]
        )
        assert await ledger.verify() == Verification(ok=True, checked=first + 1)


async def _until(admin: asyncpg.Connection, sql: str, *args: Any) -> None:
    """Poll the server (its sessions' state has no event to wait on) until ``sql`` is
    true; a minute without is a failure (a bound for a broken run, not a measure)."""
    async with asyncio.timeout(60):
        while True:
            if await admin.fetchval(sql, *args):
                return
            await asyncio.sleep(0.01)


class _BusyCall:
    """The writer's connection, with an append's call sent and left waiting on the head
    lock (another session holds it), and its answer lost: the server session busy."""

    def __init__(self, conn: Any, append_sql: str, admin: asyncpg.Connection) -> None:
        self._conn = conn
        self._append_sql = append_sql
        self._admin = admin
        self.call: asyncio.Task[Any] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def terminate(self) -> None:
        """Dropped by the writer: the session stays, busy with the call."""

    async def fetch(self, sql: str, *args: Any) -> Any:
        if sql == self._append_sql and self.call is None and args[6]:  # rows to write
            self.call = asyncio.create_task(self._conn.fetch(sql, *args))
            await _until(
                self._admin,
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
                self._conn.get_server_pid(),
            )
            raise ConnectionResetError("connection lost during COMMIT")
        return await self._conn.fetch(sql, *args)


async def test_a_lost_call_waiting_for_the_head_lock_is_ended_before_the_read_back(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A lost call still waiting for the head lock (another session holds it): its
    session is ended while it waits, the read back then takes the lock, finds nothing
    of the batch and writes it once; the call itself never runs."""
    s = f'"{pg_schema}"'
    admin = await _admin(postgres_dsn)
    try:
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
            await ledger.append(_event(0))
            writer = ledger._writer
            assert writer is not None and writer._conn is not None
            pid = writer._conn.get_server_pid()
            busy = _BusyCall(writer._conn, writer._append, admin)
            writer._conn = busy
            holder = await _admin(postgres_dsn)
            try:
                locked = holder.transaction()
                await locked.start()
                await holder.execute(f"SELECT 1 FROM {s}.head WHERE id = 1 FOR UPDATE")
                appending_task = asyncio.create_task(ledger.append_many([_event(1), _event(2)]))
                # The head is let go once the lost call's session is gone.
                await _until(
                    admin, "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid
                )
                await locked.rollback()
            finally:
                await holder.close()
            stored = await appending_task
            assert busy.call is not None
            with pytest.raises((asyncpg.ConnectionDoesNotExistError, asyncpg.AdminShutdownError)):
                await busy.call
            assert [e.seq for e in stored] == [2, 3]
            assert [e.call_id async for e in ledger.read()] == ["c0", "c1", "c2"]
            assert await ledger.verify() == Verification(ok=True, checked=3)
    finally:
        await admin.close()


class _ForeignChain:
    """The writer's connection, with the append function's RECHAINED answer ending on
    another hash than this version chains to (an append function of another version)."""

    def __init__(self, conn: Any, append_sql: str) -> None:
        self._conn = conn
        self._append_sql = append_sql
        self.altered = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def fetch(self, sql: str, *args: Any) -> Any:
        answer = await self._conn.fetch(sql, *args)
        if sql != self._append_sql or not answer or answer[0][0] != RECHAINED:
            return answer
        self.altered = True
        rows = [tuple(r) for r in answer]
        kind, seq, mac, hash_, payload = rows[-1]
        rows[-1] = (kind, seq, mac, "0" * len(hash_), payload)
        return rows


async def test_rows_the_database_chained_otherwise_are_refused_and_stored_once(
    postgres_dsn: str, pg_schema: str
) -> None:
    """The append function chained our rows on a moved head, and its answer does not end
    where this version's chaining does: the append fails with an error that says the rows
    are stored (never to write them again); they are read back once, and the ledger goes
    on."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(_event(0))
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as other:
            await other.append(_event(9, run_id="other"))
        writer = ledger._writer
        assert writer is not None and writer._conn is not None
        real = writer._conn
        foreign = _ForeignChain(real, writer._append)
        writer._conn = foreign
        with pytest.raises(LedgerError, match="stored as the database chained them: do not"):
            await ledger.append_many([_event(1), _event(2)])
        assert foreign.altered
        writer._conn = real
        assert [(e.seq, e.call_id) async for e in ledger.read()] == [
            (1, "c0"),
            (2, "c9"),
            (3, "c1"),
            (4, "c2"),
        ]
        assert await ledger.verify() == Verification(ok=True, checked=4)
        (next_,) = await ledger.append_many([_event(3)])
        assert next_.seq == 5
        assert await ledger.verify() == Verification(ok=True, checked=5)


async def test_appends_survive_their_backend_being_terminated(
    postgres_dsn: str, pg_schema: str
) -> None:
    """pg_terminate_backend on the writer's connection, four times while 16 tasks append
    (each kill 100 acknowledgements after the last): every append is acknowledged once,
    stored once, and the chain is valid."""
    admin = await _admin(postgres_dsn)
    acked: list[tuple[int, str, str]] = []
    kills: list[int] = []
    try:
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
            due = asyncio.Event()
            done = asyncio.Event()
            target = [100]
            counter = iter(range(10**6))

            async def appender() -> None:
                # Each task goes on until the killer is done, and appends at least 20.
                for n in range(10**6):
                    if done.is_set() and n >= 20:
                        return
                    event = await ledger.append(_event(next(counter)))
                    acked.append((event.seq, event.call_id, event.hash))
                    if len(acked) >= target[0]:
                        due.set()

            async def killer() -> None:
                while len(kills) < 4:
                    await due.wait()
                    due.clear()
                    writer = ledger._writer
                    conn = writer._conn if writer is not None else None
                    if conn is None or conn.is_closed():
                        continue  # reconnecting: the next acknowledgement tries again
                    if await admin.fetchval(
                        "SELECT pg_terminate_backend($1)", conn.get_server_pid()
                    ):
                        kills.append(len(acked))
                        target[0] = len(acked) + 100
                done.set()

            kill = asyncio.create_task(killer())
            await asyncio.gather(*(appender() for _ in range(16)))
            await kill
            events = [(e.seq, e.call_id, e.hash) async for e in ledger.read()]
            verification = await ledger.verify()
    finally:
        await admin.close()
    assert len(kills) == 4
    assert sorted(acked) == events
    assert [e[0] for e in events] == list(range(1, len(acked) + 1))
    assert verification == Verification(ok=True, checked=len(acked))


async def test_a_row_altered_with_sql_is_named_by_verify(postgres_dsn: str, pg_schema: str) -> None:
    """An UPDATE of one event's payload: verify names its seq; the executor's chain
    check on open finds it too."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append_many([_event(i) for i in range(6)])
    admin = await _admin(postgres_dsn)
    try:
        done = await admin.execute(
            f'UPDATE "{pg_schema}".events SET payload = convert_to(replace('
            f"convert_from(payload, 'UTF8'), '\"i\":3', '\"i\":4'), 'UTF8') WHERE seq = 4"
        )
        assert done == "UPDATE 1"
    finally:
        await admin.close()
    async with PostgresLedger(postgres_dsn, schema=pg_schema, readonly=True) as ledger:
        assert await ledger.verify() == Verification(
            ok=False,
            checked=3,
            first_bad_seq=4,
            reason="seq 4 does not match its hash (altered)",
        )


async def test_the_last_row_deleted_is_caught_by_the_head(
    postgres_dsn: str, pg_schema: str
) -> None:
    """DELETE of the last event leaves a chain that links: the head says it ended later.
    verify names the missing seq, and appends are refused so that the evidence stays."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append_many([_event(i) for i in range(5)])
    admin = await _admin(postgres_dsn)
    try:
        await admin.execute(f'DELETE FROM "{pg_schema}".events WHERE seq = 5')
    finally:
        await admin.close()
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        assert await ledger.verify() == Verification(
            ok=False,
            checked=4,
            first_bad_seq=5,
            reason="the ledger ends at seq 4 but its head says 5: events were deleted from the end",
        )
        with pytest.raises(LedgerError, match="ends at seq 4 but its head says 5"):
            await ledger.append(_event(9))


async def test_rows_written_past_the_head_are_not_ok(postgres_dsn: str, pg_schema: str) -> None:
    """A row inserted by hand after the last one, chained correctly but without moving
    the head: verify says not ok at head + 1."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append_many([_event(i) for i in range(3)])
    copy = MemoryLedgerCopy()
    for i in range(4):
        copy.add(_event(i))
    admin = await _admin(postgres_dsn)
    try:
        r = copy.records[3]
        await admin.execute(
            f'INSERT INTO "{pg_schema}".events VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)',
            r.seq,
            r.type,
            r.run_id,
            r.call_id,
            r.tool,
            r.ts,
            r.payload,
            r.prev,
            r.hash,
        )
    finally:
        await admin.close()
    async with PostgresLedger(postgres_dsn, schema=pg_schema, readonly=True) as ledger:
        assert await ledger.verify() == Verification(
            ok=False,
            checked=3,
            first_bad_seq=4,
            reason=(
                "seq 4 to 4 are past the head (seq 3): written without the ledger's head "
                "(inserted by hand?)"
            ),
        )
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        with pytest.raises(LedgerError, match="ends at seq 4 but its head says 3"):
            await ledger.append(_event(7))
        assert [e.seq async for e in ledger.read()] == [1, 2, 3, 4]


class _CommitBeforeLastRow:
    """The writer's connection, with ``commit`` awaited just before the ledger's last row
    is read (another writer's commit landing while the writer looks)."""

    def __init__(self, conn: Any, commit: Callable[[], Awaitable[None]]) -> None:
        self._conn = conn
        self._commit: Callable[[], Awaitable[None]] | None = commit

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        if self._commit is not None and "events ORDER BY seq DESC LIMIT 1" in sql:
            commit, self._commit = self._commit, None
            await commit()
        return await self._conn.fetchrow(sql, *args)


@pytest.mark.parametrize("late", [False, True], ids=["quiet", "commit-while-refusing"])
async def test_a_row_raced_in_after_a_moved_head_is_not_called_tampering(
    postgres_dsn: str, pg_schema: str, late: bool
) -> None:
    """A row written around the head lock lands between the append function's check of
    the table's end and its insert (a trigger writes it first; the insert then collides),
    after another writer moved the head: the append fails as a race, nothing of it
    written, not as a ledger that ends past the head this writer last knew (it does
    not); the next append lands. So too when another writer commits while the refusal
    reads the ledger: the head and the last row are read as one snapshot."""
    s = f'"{pg_schema}"'

    async def drop_trigger() -> None:
        admin = await _admin(postgres_dsn)
        try:  # the racing writer goes
            await admin.execute(f"DROP TRIGGER IF EXISTS race_in ON {s}.events")
        finally:
            await admin.close()

    async with (
        PostgresLedger(postgres_dsn, schema=pg_schema) as ledger,
        PostgresLedger(postgres_dsn, schema=pg_schema) as other,
    ):
        await ledger.append(_event(0))
        await other.append(_event(1, run_id="other"))

        async def commit() -> None:
            await drop_trigger()
            await other.append(_event(2, run_id="other"))

        if late:
            writer = ledger._writer
            assert writer is not None and writer._conn is not None
            writer._conn = _CommitBeforeLastRow(writer._conn, commit)
        admin = await _admin(postgres_dsn)
        try:
            await admin.execute(
                f"""CREATE FUNCTION {s}.race_in() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF pg_trigger_depth() = 1 THEN
                        INSERT INTO {s}.events VALUES (NEW.*);
                    END IF;
                    RETURN NEW;
                END $$;
                CREATE TRIGGER race_in BEFORE INSERT ON {s}.events
                    FOR EACH ROW EXECUTE FUNCTION {s}.race_in();"""
            )
        finally:
            await admin.close()
        with pytest.raises(LedgerError, match="the table changed under the head lock"):
            await ledger.append(_event(7))
        theirs = [(3, "c2")] if late else []
        assert [(e.seq, e.call_id) async for e in ledger.read()] == [
            (1, "c0"),
            (2, "c1"),
            *theirs,
        ]
        await drop_trigger()
        (stored,) = await ledger.append_many([_event(8)])
        assert stored.seq == 3 + len(theirs)
        assert await ledger.verify() == Verification(ok=True, checked=stored.seq)


class MemoryLedgerCopy:
    """The records a ledger would hold for the same events (chained the same way)."""

    def __init__(self) -> None:
        from agent_adapter.ledger._chain import Record

        self.records: list[Record] = []

    def add(self, event: CallRequested) -> None:
        from agent_adapter.ledger._chain import make_record

        prev = self.records[-1].hash if self.records else ""
        self.records.append(make_record(event, len(self.records) + 1, prev))


# -- bad input ------------------------------------------------------------------------


def _with(dsn: str, **parts: str) -> str:
    split = urlsplit(dsn)
    user = parts.get("user", split.username or "")
    password = parts.get("password", split.password or "")
    netloc = (
        f"{user}:{password}@{parts.get('host', split.hostname)}:{parts.get('port', split.port)}"
    )
    return split._replace(netloc=netloc, path="/" + parts.get("db", split.path[1:])).geturl()


async def _refused(dsn: str, schema: str, **kwargs: Any) -> str:
    ledger = PostgresLedger(dsn, schema=schema, **kwargs)
    with pytest.raises(LedgerError) as caught:
        await ledger.open()
    await ledger.close()
    return str(caught.value)


async def test_a_wrong_password_is_one_clear_error_without_the_password(
    postgres_dsn: str, pg_schema: str
) -> None:
    """The server refuses the password: LedgerError naming the database, not the secret."""
    message = await _refused(_with(postgres_dsn, password="wrong-secret"), pg_schema)
    assert "refused the password" in message
    assert "127.0.0.1" in message and f"schema {pg_schema}" in message
    assert "wrong-secret" not in message and "\n" not in message


async def test_a_missing_database_or_role_is_one_clear_error(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A database or a role that does not exist: the server's reason, one line each."""
    missing_db = await _refused(_with(postgres_dsn, db="nope"), pg_schema)
    assert 'database "nope" does not exist' in missing_db
    missing_role = await _refused(_with(postgres_dsn, user="nobody"), pg_schema)
    assert "refused" in missing_role and "nobody" in missing_role


async def test_a_server_that_is_down_at_open(postgres_dsn: str, pg_schema: str) -> None:
    """Nothing listens on the port: 'connection refused', naming the database."""
    import socket

    with socket.socket() as sock:  # a port nobody listens on (bound, never listening)
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
        message = await _refused(_with(postgres_dsn, port=port), pg_schema, timeout_s=2)
    assert f"127.0.0.1:{port}" in message and "connection refused" in message


async def test_a_schema_of_a_newer_version_is_refused(postgres_dsn: str, pg_schema: str) -> None:
    """schema_version above this version's: refused, nothing written."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(_event(0))
    admin = await _admin(postgres_dsn)
    try:
        await admin.execute(
            f"UPDATE \"{pg_schema}\".meta SET value = '99' WHERE name = 'schema_version'"
        )
        message = await _refused(postgres_dsn, pg_schema)
        count = await admin.fetchval(f'SELECT count(*) FROM "{pg_schema}".events')
    finally:
        await admin.close()
    assert "written by a newer version of agent-adapter (schema version 99" in message
    assert count == 1


async def test_tables_of_another_application_are_never_written(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A schema holding someone else's tables: refused, and nothing is created there."""
    admin = await _admin(postgres_dsn)
    try:
        await admin.execute(f'CREATE SCHEMA "{pg_schema}"')
        await admin.execute(f'CREATE TABLE "{pg_schema}".orders (id int)')
        message = await _refused(postgres_dsn, pg_schema)
        tables = await admin.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", pg_schema
        )
    finally:
        await admin.close()
    assert "holds tables that are not a ledger's (orders)" in message
    assert [t[0] for t in tables] == ["orders"]


async def test_a_database_that_is_not_utf8_is_refused(postgres_dsn: str, pg_schema: str) -> None:
    """An SQL_ASCII database: refused before anything is created in it."""
    admin = await _admin(postgres_dsn)
    name = f"latin_{pg_schema}"
    try:
        await admin.execute(
            f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'"
            " TEMPLATE template0"
        )
        message = await _refused(_with(postgres_dsn, db=name), pg_schema)
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name}")
        await admin.close()
    assert "the database's encoding is SQL_ASCII, not UTF8" in message


async def test_a_keyed_ledger_without_its_key(postgres_dsn: str, pg_schema: str) -> None:
    """Written with a key, opened without: it reads, verify says it cannot check, and
    appends are refused (they would break the chain)."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema, key=b"k1") as ledger:
        await ledger.append(_event(0))
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        assert [e.call_id async for e in ledger.read()] == ["c0"]
        verification = await ledger.verify()
        assert (verification.ok, verification.checked) == (False, 0)
        assert "cannot be checked without the key" in verification.reason
        with pytest.raises(LedgerError, match="keyed \\(HMAC\\): appending needs its key"):
            await ledger.append(_event(1))
    async with PostgresLedger(postgres_dsn, schema=pg_schema, key=b"wrong") as ledger:
        with pytest.raises(LedgerError, match="the key does not match the last record"):
            await ledger.append(_event(1))
    async with PostgresLedger(postgres_dsn, schema=pg_schema, key=b"k1") as ledger:
        assert await ledger.verify() == Verification(ok=True, checked=1)


async def test_reading_never_creates_a_schema(postgres_dsn: str, pg_schema: str) -> None:
    """readonly on a schema with no ledger: LedgerError, and no schema was created."""
    message = await _refused(postgres_dsn, pg_schema, readonly=True)
    assert "no ledger in this schema (a reading command never creates one)" in message
    admin = await _admin(postgres_dsn)
    try:
        found = await admin.fetchval(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1", pg_schema
        )
    finally:
        await admin.close()
    assert found == 0


def test_bad_arguments_are_refused_at_construction() -> None:
    """A DSN that is not postgresql://, a schema name that is not plain, two schemas."""
    with pytest.raises(ValueError, match="postgresql://"):
        PostgresLedger("ledger.db")
    with pytest.raises(ValueError, match="expected a plain name"):
        PostgresLedger("postgresql://h/db", schema='x"; DROP TABLE y; --')
    with pytest.raises(ValueError, match="differ"):
        PostgresLedger("postgresql://h/db?schema=a", schema="b")
    assert PostgresLedger("postgresql://h/db?schema=a&sslmode=disable").schema == "a"


async def test_a_database_that_goes_away_fails_appends_after_a_bounded_wait(
    pg_cluster: Cluster | None,
) -> None:
    """The server stops mid-stream: appends wait ``timeout_s`` for it, then fail with
    LedgerError (not reported done); once it is back, appends go on after the last
    acknowledged one, and nothing was stored twice."""
    bindir = binaries()
    if bindir is None:
        pytest.skip("needs the PostgreSQL binaries to stop and start a server of its own")
    cluster = Cluster.start(bindir)
    try:
        async with PostgresLedger(cluster.dsn, schema="away", timeout_s=2) as ledger:
            first = await ledger.append(_event(0))
            await asyncio.to_thread(cluster.stop_server)
            with pytest.raises(LedgerError) as caught:
                await ledger.append(_event(1))
            assert "schema away" in str(caught.value)
            assert "connection" in str(caught.value)
            await asyncio.to_thread(cluster.start_server)
            second = await ledger.append(_event(2))
            events = [(e.seq, e.call_id) async for e in ledger.read()]
            assert (first.seq, second.seq, events) == (1, 2, [(1, "c0"), (2, "c2")])
            assert await ledger.verify() == Verification(ok=True, checked=2)
    finally:
        await asyncio.to_thread(cluster.stop)


def test_claim_holders_are_never_reused() -> None:
    """Each follower of a ledger object claims under its own holder name, also after
    another follower left (a reused name would let one take over the other's claims)."""
    from agent_adapter.ledger._follow import Follow

    ledger = PostgresLedger("postgresql://h/db")
    a, b = Follow(ledger, print, 0), Follow(ledger, print, 0)
    first = [ledger._holder(a), ledger._holder(b)]
    ledger._unfollow(a)
    c = Follow(ledger, print, 0)
    assert len({*first, ledger._holder(c)}) == 3
    assert ledger._holder(None) == ""


async def test_the_claims_table_refuses_a_claim_the_events_do_not_show(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A claim row written around the events (an operator's tool, a migration) still
    refuses the key inside the write transaction: the body never runs, and the call ends
    ambiguous after its tries, with nothing of the refused batches written."""
    from agent_adapter import Executor, Registry
    from agent_adapter.errors import AmbiguousEffect

    runs: list[str] = []
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        runs.append(order_id)
        return "refunded"

    async with PostgresLedger(postgres_dsn, schema=pg_schema):
        pass
    admin = await _admin(postgres_dsn)
    try:
        await admin.execute(
            f'INSERT INTO "{pg_schema}".effect_claims VALUES ($1, $2, $3, $4)',
            "refund:A1",
            10**9,
            "another-tool",
            0,
        )
    finally:
        await admin.close()
    ledger = PostgresLedger(postgres_dsn, schema=pg_schema)
    async with await Executor.open(registry, ledger=ledger) as executor:
        with pytest.raises(AmbiguousEffect):
            await executor.call("refund", {"order_id": "A1"}, run_id="r", call_id="c")
        assert await executor.call("refund", {"order_id": "B2"}, run_id="r", call_id="d")
    assert runs == ["B2"]
    async with PostgresLedger(postgres_dsn, schema=pg_schema, readonly=True) as ledger:
        types = [e.type async for e in ledger.read(call_id="c")]
        assert types == timeline("call.ambiguous")
        assert (await ledger.verify()).ok


def test_without_asyncpg_the_package_imports_and_open_says_what_to_install() -> None:
    """asyncpg is an extra: without it ``agent_adapter.ledger`` imports, PostgresLedger
    constructs, and opening says which extra to install (one line, a LedgerError)."""
    import subprocess
    import sys

    code = (
        "import asyncio, sys\n"
        "sys.modules['asyncpg'] = None\n"
        "from agent_adapter.ledger import PostgresLedger\n"
        "from agent_adapter.errors import LedgerError\n"
        "ledger = PostgresLedger('postgresql://app@db.internal/pay')\n"
        "try:\n"
        "    asyncio.run(ledger.open())\n"
        "except LedgerError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "PostgresLedger needs asyncpg: pip install 'agent-adapter[postgres]'\n",
        "",
    )


async def test_a_dsn_that_does_not_parse_is_one_clear_error(pg_schema: str) -> None:
    """A port that is not a number: 'the DSN is not valid', naming it, before any network."""
    message = await _refused("postgresql://app@127.0.0.1:notaport/pay", pg_schema)
    assert message.startswith("ledger postgresql://app@127.0.0.1:notaport/pay (schema ")
    assert "opening: the DSN is not valid (" in message


async def test_a_head_held_past_timeout_s_fails_the_append_and_nothing_lands(
    postgres_dsn: str, pg_schema: str
) -> None:
    """Another session holds the head row locked: an append waits ``timeout_s`` (the
    function sets the wait in its own transaction: no startup setting, which PgBouncer
    would refuse), then fails with LedgerError saying so; once the head is free the next
    append lands right after the last acknowledged one."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema, timeout_s=1) as ledger:
        await ledger.append(_event(0))
        admin = await _admin(postgres_dsn)
        try:
            holding = admin.transaction()
            await holding.start()
            await admin.execute(f'SELECT 1 FROM "{pg_schema}".head WHERE id = 1 FOR UPDATE')
            with pytest.raises(LedgerError, match="held the ledger's head for more than 1 s"):
                await ledger.append(_event(1))
            await holding.rollback()
        finally:
            await admin.close()
        second = await ledger.append(_event(2))
        assert [(e.seq, e.call_id) async for e in ledger.read()] == [(1, "c0"), (2, "c2")]
        assert second.seq == 2
