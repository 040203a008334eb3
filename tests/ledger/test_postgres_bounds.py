"""Two waits of PostgresLedger that had no bound: a writer that loses every claim race,
and a migration lock another session never lets go. Each now ends at ``timeout_s`` with
a LedgerError, nothing written."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from agent_adapter.errors import LedgerError
from agent_adapter.ledger import CallRequested, EffectClaimed, PostgresLedger, Verification
from agent_adapter.ledger._postgres_schema import SCHEMA_VERSION


def _requested(call_id: str) -> CallRequested:
    return CallRequested(ts=1.0, run_id="r", call_id=call_id, tool="refund", args={})


def _claimed(call_id: str) -> EffectClaimed:
    return EffectClaimed(ts=1.0, run_id="r", call_id=call_id, tool="refund", key="refund:o-1")


async def test_a_writer_that_loses_every_claim_race_fails_after_its_timeout(
    postgres_dsn: str, pg_schema: str
) -> None:
    """Claims written around the head lock on every try (here: a trigger that swallows
    the claim's insert, so the function always finds its claim missing): the append
    fails with LedgerError after ``timeout_s``, nothing written, instead of trying
    forever (on the code before this test it never returned)."""
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
    this version and appends."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(_requested("c0"))
    lock = f"agent-adapter:migrate:{pg_schema}"
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(
            f"UPDATE \"{pg_schema}\".meta SET value = '2' WHERE name = 'schema_version'"
        )
        await conn.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", lock)
        writer = PostgresLedger(postgres_dsn, schema=pg_schema, timeout_s=0.5)
        with pytest.raises(LedgerError, match="migration lock"):
            await asyncio.wait_for(writer.open(), 60)
        await writer.close()
        version = await conn.fetchval(
            f"SELECT value FROM \"{pg_schema}\".meta WHERE name = 'schema_version'"
        )
        assert version == "2"
        await conn.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", lock)
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
            assert (await ledger.append(_requested("c1"))).seq == 2
            assert await ledger.verify() == Verification(ok=True, checked=2)
        version = await conn.fetchval(
            f"SELECT value FROM \"{pg_schema}\".meta WHERE name = 'schema_version'"
        )
    finally:
        await conn.close()
    assert version == str(SCHEMA_VERSION)
