"""PostgresLedger's commit (schema version 3): the head is free before the WAL flush, and
nothing is acknowledged before it.

``append_durable`` commits the append with ``synchronous_commit = off`` and then waits
for the flush in a second transaction of the same call. These tests hold that second
transaction (a row lock on the writer's flush mark) with the WAL writer stopped, so
that the append is committed and visible but not on disk, then crash the server
(SIGKILL of every server process: the WAL buffers are lost): the append must not have
been acknowledged, the ledger must open, verify and audit afterwards, and the claim it
made must be there exactly when its event is.

Also the two waits that had no bound: a writer that loses every claim race, and a
migration lock another session never lets go.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agent_adapter.errors import LedgerError
from agent_adapter.ledger import (
    CallRequested,
    CallSucceeded,
    EffectClaimed,
    PostgresLedger,
    Verification,
    replay,
)
from agent_adapter.testing.postgres import Cluster, binaries

_KEY = "refund:o-1"


def _requested(call_id: str) -> CallRequested:
    return CallRequested(ts=1.0, run_id="r", call_id=call_id, tool="refund", args={})


def _succeeded(call_id: str) -> CallSucceeded:
    return CallSucceeded(ts=1.0, run_id="r", call_id=call_id, tool="refund", result="ok")


def _claimed(call_id: str) -> EffectClaimed:
    return EffectClaimed(ts=1.0, run_id="r", call_id=call_id, tool="refund", key=_KEY)


def _server_pids(cluster: Cluster) -> list[int]:
    """The postmaster and every process it started."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            pids.append(int(stat.parent.name))
    return pids


async def _until(check: object, what: str) -> None:
    """Poll the server's state (it has no event to wait on) until ``check()`` is true."""
    deadline = time.monotonic() + 60
    while not await check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.02)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie of a child the postmaster no longer reaps still answers kill(0).
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("back", [True, False], ids=["server-back", "server-stays-down"])
async def test_a_crash_between_the_commit_and_its_flush_acknowledges_nothing(
    caplog: pytest.LogCaptureFixture, back: bool
) -> None:
    """The append (a call's request and its effect claim) committed, visible to another
    session, its WAL not flushed; the server is killed. Server back within the ledger's
    timeout: the writer finds the append lost and writes it once more (acknowledged
    once, durable). Server down past it: the caller gets LedgerError, and the ledger,
    once back, holds neither the event nor its claim. Either way it verifies and audits
    clean, and the key's claim is there exactly when its event is."""
    bindir = binaries()
    if bindir is None:
        pytest.skip("needs the PostgreSQL binaries to crash a server of its own")
    # Nothing else may flush the WAL meanwhile: no autovacuum, no background writes.
    cluster = Cluster.start(bindir, extra=("-c autovacuum=off", "-c bgwriter_lru_maxpages=0"))
    stopped: list[int] = []
    try:
        ledger = PostgresLedger(cluster.dsn, schema="crash", timeout_s=60 if back else 3)
        await ledger.open()
        admin = await asyncpg.connect(cluster.dsn)
        first, _ = await ledger.append_many([_requested("c0"), _succeeded("c0")])
        writer = ledger._writer
        assert writer is not None and writer._conn is not None
        backend = writer._conn.get_server_pid()
        # The writer's flush mark, locked: the second transaction waits behind it.
        await admin.execute("BEGIN")
        await admin.execute('UPDATE "crash".flushes SET n = n WHERE pid = $1', backend)
        walwriter = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'"
        )
        os.kill(walwriter, signal.SIGSTOP)
        stopped.append(walwriter)
        caplog.set_level(logging.WARNING, logger="agent_adapter.ledger")
        appending = asyncio.ensure_future(ledger.append_many([_requested("c1"), _claimed("c1")]))

        async def waiting_for_the_flush() -> bool:
            state = await admin.fetchval(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", backend
            )
            return bool(state == "Lock")

        await _until(waiting_for_the_flush, "the writer waiting for its flush mark")
        # Committed: another session sees the rows and the claim, the head moved...
        seen = await admin.fetch('SELECT seq FROM "crash".events ORDER BY seq')
        claim = await admin.fetchval('SELECT seq FROM "crash".effect_claims WHERE key = $1', _KEY)
        head = await admin.fetchval('SELECT seq FROM "crash".head')
        # ... and not durable: WAL past what is flushed.
        unflushed = await admin.fetchval(
            "SELECT pg_current_wal_insert_lsn() > pg_current_wal_flush_lsn()"
        )
        assert ([r[0] for r in seen], claim, head, unflushed) == ([1, 2, 3, 4], 4, 4, True)
        assert not appending.done()
        # The admin's lock must hold until the crash: its session ends with the server.
        pids = _server_pids(cluster)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        admin.terminate()
        for pid in pids:
            while not _gone(pid):  # noqa: ASYNC110 (a process ending has no event here)
                await asyncio.sleep(0.02)
        stopped.clear()
        # A killed postmaster nobody reaps stays a zombie, which the next one's lock file
        # checks take for a running server: every process is gone, so the files go.
        (cluster.data / "postmaster.pid").unlink()
        (cluster.root / f".s.PGSQL.{cluster.port}.lock").unlink()
        if back:
            await asyncio.to_thread(cluster.start_server)
            stored = await appending
            assert [e.seq for e in stored] == [3, 4]
            assert any("did not land" in r.getMessage() for r in caplog.records)
        else:
            with pytest.raises(LedgerError) as caught:
                await appending
            assert "written" in str(caught.value) or "lost" in str(caught.value)
            await asyncio.to_thread(cluster.start_server)
        await ledger.close()

        async with PostgresLedger(cluster.dsn, schema="crash") as reopened:
            events = [e async for e in reopened.read()]
            verification = await reopened.verify()
            conn = await asyncpg.connect(cluster.dsn)
            try:
                claims = await conn.fetch('SELECT key, seq FROM "crash".effect_claims')
            finally:
                await conn.close()
        expected = 4 if back else 2
        assert verification == Verification(ok=True, checked=expected)
        assert [(e.seq, e.type) for e in events][:1] == [(first.seq, "call.requested")]
        assert len(events) == expected
        assert [tuple(r) for r in claims] == ([(_KEY, 4)] if back else [])
        # c1 (claimed, no outcome: in flight when the server died) only if it is there.
        problems = replay(events, verification).problems()
        assert [(p.kind, p.call_id) for p in problems] == ([("ambiguous", "c1")] if back else [])
        # Appends go on after the crash, on the chain as it is.
        async with PostgresLedger(cluster.dsn, schema="crash") as again:
            after = await again.append(_requested("c2"))
            assert after.seq == expected + 1
            assert await again.verify() == Verification(ok=True, checked=expected + 1)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        await asyncio.to_thread(cluster.stop)


async def test_a_writer_that_loses_every_claim_race_fails_after_its_timeout(
    postgres_dsn: str, pg_schema: str
) -> None:
    """Claims written around the head lock on every try (here: a trigger that swallows
    the claim's insert, so the function always finds its claim missing): the append
    fails with LedgerError after ``timeout_s``, nothing written, instead of trying
    forever."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema, timeout_s=1) as ledger:
        await ledger.append(_requested("c0"))
        conn = await asyncpg.connect(postgres_dsn)
        try:
            await conn.execute(
                f'CREATE FUNCTION "{pg_schema}".swallow() RETURNS trigger'
                " LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$"
            )
            await conn.execute(
                f'CREATE TRIGGER swallow BEFORE INSERT OR UPDATE ON "{pg_schema}".effect_claims'
                f' FOR EACH ROW EXECUTE FUNCTION "{pg_schema}".swallow()'
            )
            with pytest.raises(LedgerError, match="around the head lock"):
                await asyncio.wait_for(ledger.append(_claimed("c1")), 60)
            count = await conn.fetchval(f'SELECT count(*) FROM "{pg_schema}".events')
        finally:
            await conn.close()
        assert count == 1
        assert await ledger.verify() == Verification(ok=True, checked=1)


async def test_a_migration_lock_held_elsewhere_fails_the_open_after_its_timeout(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A version 2 ledger, and its migration lock held by another session that never
    lets go (a migration hung, or the lock leaked on a pooled server connection): the
    writer's open fails with LedgerError after ``timeout_s`` naming the lock; the
    ledger is unchanged, and once the lock is free the next writer migrates it to
    version 3 (the procedure and its table) and appends through it."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(_requested("c0"))
    conn = await asyncpg.connect(postgres_dsn)
    try:
        # What version 2 had: neither the procedure nor its table.
        await conn.execute(f'DROP PROCEDURE "{pg_schema}".append_durable')
        await conn.execute(f'DROP TABLE "{pg_schema}".flushes')
        await conn.execute(
            f"UPDATE \"{pg_schema}\".meta SET value = '2' WHERE name = 'schema_version'"
        )
        await conn.execute(
            "SELECT pg_advisory_lock(hashtextextended($1, 0))", f"agent-adapter:migrate:{pg_schema}"
        )
        writer = PostgresLedger(postgres_dsn, schema=pg_schema, timeout_s=0.5)
        with pytest.raises(LedgerError, match="migration lock"):
            await asyncio.wait_for(writer.open(), 60)
        await writer.close()
        version = await conn.fetchval(
            f"SELECT value FROM \"{pg_schema}\".meta WHERE name = 'schema_version'"
        )
        assert version == "2"
        await conn.execute(
            "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
            f"agent-adapter:migrate:{pg_schema}",
        )
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
            assert (await ledger.append(_requested("c1"))).seq == 2
        version = await conn.fetchval(
            f"SELECT value FROM \"{pg_schema}\".meta WHERE name = 'schema_version'"
        )
    finally:
        await conn.close()
    assert version == "3"


class _Recording:
    """The writer's connection, recording each statement it sends."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.sent: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._conn, name)
        if name not in ("execute", "fetch", "fetchrow", "fetchval"):
            return attr

        async def recorded(sql: str, *args: Any) -> Any:
            self.sent.append(sql.split("(")[0].split(" FROM ")[-1].strip())
            return await attr(sql, *args)

        return recorded


async def test_a_writer_that_takes_the_head_in_a_block_also_commits_before_the_flush(
    postgres_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After its stale answers (here one) a writer holds the head in a block; its COMMIT
    too goes without the flush (the head free at once), and the append returns after
    the flush mark's own commit; the chain goes on and verifies."""
    from agent_adapter.ledger import _postgres_writer

    monkeypatch.setattr(_postgres_writer, "_OPTIMISTIC_TRIES", 1)
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(_requested("c0"))
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as other:
            await other.append(_requested("o0"))
        writer = ledger._writer
        assert writer is not None
        recording = _Recording(writer._conn)
        writer._conn = recording
        last = await ledger.append(_requested("c1"))
        schema = f'"{pg_schema}"'
        assert recording.sent == [
            f"CALL {schema}.append_durable",  # stale: the other's head
            "BEGIN",
            f"{schema}.append_events",  # the head, now locked to COMMIT
            f"{schema}.append_events",  # written on it
            "SET LOCAL synchronous_commit = off; COMMIT",
            f"INSERT INTO {schema}.flushes AS f",
        ]
        assert last.seq == 3
        assert await ledger.verify() == Verification(ok=True, checked=3)
