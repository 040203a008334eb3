"""PostgresLedger on a service's own asyncpg pool (``pool=``).

The ledger takes its connections from the pool (the writer's, the reader's, the LISTEN
one, one per ``verify()``) and gives every one back at ``close()``, also after the
server terminated one of them; the service keeps using its pool.
"""

from __future__ import annotations

import asyncio
import re

import asyncpg
import pytest

from agent_adapter import Executor, Registry
from agent_adapter.ledger import CallRequested, PostgresLedger, Verification


def _event(i: int) -> CallRequested:
    return CallRequested(ts=1.0, run_id="r", call_id=f"c{i}", tool="t", args={"i": i})


async def test_a_ledger_on_a_pool_gives_every_connection_back(
    postgres_dsn: str, pg_schema: str
) -> None:
    """Appends, reads, verify and an executor's follower on a pool of 4: the pool is
    whole (every connection idle) after close, and still the service's to use."""
    registry = Registry()

    @registry.tool
    async def lookup(q: str) -> str:
        """A plain tool."""
        return q.upper()

    pool = await asyncpg.create_pool(postgres_dsn, min_size=0, max_size=4)
    assert pool is not None
    try:
        ledger = PostgresLedger(postgres_dsn, schema=pg_schema, pool=pool)
        async with await Executor.open(registry, ledger=ledger) as executor:
            assert await executor.call("lookup", {"q": "a"}, run_id="r", call_id="c") == "A"
            stored = await ledger.append_many([_event(1), _event(2)])
            assert [e.call_id async for e in ledger.read(run_id="r", call_id="c1")] == ["c1"]
            assert await ledger.verify() == Verification(ok=True, checked=stored[-1].seq)
            assert pool.get_size() - pool.get_idle_size() >= 2  # the writer's and the reader's
        assert pool.get_idle_size() == pool.get_size()
        assert await pool.fetchval(f'SELECT seq FROM "{pg_schema}".head') == stored[-1].seq
    finally:
        await pool.close()


async def test_a_pooled_writer_whose_backend_is_terminated_goes_on(
    postgres_dsn: str, pg_schema: str
) -> None:
    """pg_terminate_backend on the writer's pooled connection, which asyncpg then gives
    back to the pool by itself: the next append takes another one from the pool and
    lands once, and a pool of 3 still gives the service all three after close."""
    pool = await asyncpg.create_pool(postgres_dsn, min_size=0, max_size=3)
    assert pool is not None
    admin = await asyncpg.connect(postgres_dsn)
    try:
        async with PostgresLedger(postgres_dsn, schema=pg_schema, pool=pool) as ledger:
            await ledger.append(_event(0))
            writer = ledger._writer
            assert writer is not None and writer._conn is not None
            conn = writer._conn
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", conn.get_server_pid())
            # Until asyncpg has seen the socket close and given the connection back to
            # the pool: the writer must then not touch what is no longer its own.
            for _ in range(500):
                if _released(conn):
                    break
                await asyncio.sleep(0.01)
            assert _released(conn)
            second = await ledger.append(_event(1))
            assert second.seq == 2
            assert await ledger.verify() == Verification(ok=True, checked=2)
        held = [await pool.acquire(timeout=5) for _ in range(3)]
        for conn in held:
            await pool.release(conn)
    finally:
        await admin.close()
        await pool.close()


def _released(conn: asyncpg.Connection) -> bool:
    """Whether a pool's connection went back to its pool (its methods then refuse)."""
    try:
        conn.is_closed()
    except asyncpg.InterfaceError:
        return True
    return False


def test_a_pool_that_is_not_one_is_refused() -> None:
    """``pool=`` takes an asyncpg pool; anything else is refused at construction."""
    with pytest.raises(TypeError, match="asyncpg pool"):
        PostgresLedger("postgresql://h/db", pool="postgresql://h/db")  # type: ignore[arg-type]


async def test_a_pool_that_cannot_connect_is_one_clear_error(pg_schema: str) -> None:
    """A pool whose server is not there: open fails with LedgerError naming the
    database, as for the ledger's own connections."""
    from agent_adapter.errors import LedgerError

    pool = asyncpg.create_pool("postgresql://aa@127.0.0.1:1/postgres", min_size=0, max_size=1)
    await pool  # min_size=0: nothing connects yet
    try:
        ledger = PostgresLedger("postgresql://aa@127.0.0.1:1/postgres", schema=pg_schema, pool=pool)
        with pytest.raises(LedgerError, match=re.escape("127.0.0.1:1/postgres")):
            await asyncio.wait_for(ledger.open(), 30)
    finally:
        await pool.close()
