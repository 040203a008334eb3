"""PostgresLedger's schema version 2: the append function, the (call_id, run_id) index,
and the migration of a ledger an older version (schema version 1) wrote.

The version 1 ledger is built here as version 1 wrote it: its statements, frozen below
as they were, and rows chained by the same chain helpers with the head's MAC.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg

from agent_adapter.ledger import CallRequested, CallSucceeded, PostgresLedger, Verification
from agent_adapter.ledger._chain import make_record
from agent_adapter.ledger._head import head_mac


def _v1_schema(schema: str) -> list[str]:
    """Schema version 1's statements, as that version ran them (frozen)."""
    s = f'"{schema}"'
    return [
        f"CREATE SCHEMA IF NOT EXISTS {s}",
        f"CREATE TABLE {s}.meta (name text PRIMARY KEY, value text NOT NULL)",
        f"CREATE TABLE {s}.events ("
        " seq bigint PRIMARY KEY,"
        " type text NOT NULL,"
        " run_id text NOT NULL,"
        " call_id text NOT NULL,"
        " tool text NOT NULL,"
        " ts double precision NOT NULL,"
        " payload bytea NOT NULL,"
        " prev text NOT NULL,"
        " hash text NOT NULL)",
        f"CREATE INDEX events_run_id ON {s}.events (run_id, seq)",
        f"CREATE INDEX events_call_id ON {s}.events (call_id, seq)",
        f"CREATE TABLE {s}.head ("
        " id integer PRIMARY KEY CHECK (id = 1),"
        " seq bigint NOT NULL,"
        " hash text NOT NULL,"
        " mac text NOT NULL)",
        f"CREATE TABLE {s}.effect_claims ("
        " key text PRIMARY KEY,"
        " seq bigint NOT NULL,"
        " holder text NOT NULL,"
        " horizon bigint NOT NULL)",
    ]


def _calls(runs: int, calls: int) -> list[Any]:
    """Whole calls whose call ids repeat in every run (c0.. in each), as a workflow numbers them."""
    events: list[Any] = []
    for run in range(runs):
        for call in range(calls):
            ids = {"ts": 1.0, "run_id": f"run-{run}", "call_id": f"c{call}", "tool": "t"}
            events += [
                CallRequested(args={"n": call}, **ids),
                CallSucceeded(duration_ms=1.0, result="ok", **ids),
            ]
    return events


async def _write_v1(dsn: str, schema: str, events: list[Any]) -> None:
    """A ledger as schema version 1 left it: its tables, meta, chained rows and head."""
    conn = await asyncpg.connect(dsn)
    try:
        for statement in _v1_schema(schema):
            await conn.execute(statement)
        await conn.executemany(
            f'INSERT INTO "{schema}".meta VALUES ($1, $2)',
            [("format", "agent-adapter-ledger"), ("schema_version", "1"), ("keyed", "0")],
        )
        prev, rows = "", []
        for seq, event in enumerate(events, 1):
            r = make_record(event, seq, prev)
            rows.append(
                (r.seq, r.type, r.run_id, r.call_id, r.tool, r.ts, r.payload, r.prev, r.hash)
            )
            prev = r.hash
        await conn.copy_records_to_table(
            "events",
            records=rows,
            schema_name=schema,
            columns=["seq", "type", "run_id", "call_id", "tool", "ts", "payload", "prev", "hash"],
        )
        await conn.execute(
            f'INSERT INTO "{schema}".head VALUES (1, $1, $2, $3)',
            len(rows),
            prev,
            head_mac(len(rows), prev, None),
        )
    finally:
        await conn.close()


async def _plan(dsn: str, sql: str, *args: Any) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET enable_seqscan = off")  # a tiny table: what index fits?
        rows = await conn.fetch(f"EXPLAIN (FORMAT JSON) {sql}", *args)
        return json.dumps(json.loads(rows[0][0]))
    finally:
        await conn.close()


async def _indexes(dsn: str, schema: str) -> dict[str, str]:
    conn = await asyncpg.connect(dsn)
    try:
        return {
            name: definition
            for name, definition in await conn.fetch(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1", schema
            )
        }
    finally:
        await conn.close()


async def test_a_version_1_ledger_is_migrated_by_its_first_writer(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A ledger schema version 1 wrote: reading opens it as it is (no index built, no
    version changed); the first writer adds the function and the (call_id, run_id) index,
    drops the call_id index it replaces, sets version 2, and appends on the same chain."""
    events = _calls(3, 4)
    await _write_v1(postgres_dsn, pg_schema, events)
    async with PostgresLedger(postgres_dsn, schema=pg_schema, readonly=True) as reader:
        got = [(e.seq, e.type) async for e in reader.read(run_id="run-1", call_id="c2")]
        assert got == [(13, "call.requested"), (14, "call.succeeded")]
    assert "events_call_id" in await _indexes(postgres_dsn, pg_schema)

    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        added = await ledger.append(
            CallRequested(ts=2.0, run_id="run-1", call_id="c2", tool="t", args={"n": 9})
        )
        got = [(e.seq, e.type) async for e in ledger.read(run_id="run-1", call_id="c2")]
        verification = await ledger.verify()
    assert added.seq == len(events) + 1
    assert got == [(13, "call.requested"), (14, "call.succeeded"), (added.seq, "call.requested")]
    assert verification == Verification(ok=True, checked=len(events) + 1)
    indexes = await _indexes(postgres_dsn, pg_schema)
    assert "events_call_id" not in indexes
    assert indexes["events_call_run"].endswith("(call_id, run_id, seq)")
    conn = await asyncpg.connect(postgres_dsn)
    try:
        version = await conn.fetchval(
            f"SELECT value FROM \"{pg_schema}\".meta WHERE name = 'schema_version'"
        )
        valid = await conn.fetchval(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = $1::regclass",
            f'"{pg_schema}".events_call_run',
        )
    finally:
        await conn.close()
    assert (version, valid) == ("2", True)


async def test_two_writers_opening_a_version_1_ledger_at_once_migrate_it_once(
    postgres_dsn: str, pg_schema: str
) -> None:
    """Two replicas upgraded together open the old ledger at the same moment: one
    migrates, the other waits for it, and both append on one chain."""
    await _write_v1(postgres_dsn, pg_schema, _calls(2, 2))
    a, b = (
        PostgresLedger(postgres_dsn, schema=pg_schema),
        PostgresLedger(postgres_dsn, schema=pg_schema),
    )
    await asyncio.gather(a.open(), b.open())
    try:
        first, second = await asyncio.gather(
            a.append(CallRequested(ts=1.0, run_id="x", call_id="a", tool="t", args={})),
            b.append(CallRequested(ts=1.0, run_id="x", call_id="b", tool="t", args={})),
        )
        assert sorted([first.seq, second.seq]) == [9, 10]
        assert await a.verify() == Verification(ok=True, checked=10)
    finally:
        await a.close()
        await b.close()


async def test_an_interrupted_index_build_is_built_again(postgres_dsn: str, pg_schema: str) -> None:
    """A migration whose CREATE INDEX CONCURRENTLY was cancelled leaves an invalid index
    (unusable, never used by a plan): the next writer's open drops it and builds it."""
    await _write_v1(postgres_dsn, pg_schema, _calls(1, 2))
    conn = await asyncpg.connect(postgres_dsn)
    try:
        # What a cancelled build leaves: the index, marked invalid.
        await conn.execute(f'CREATE INDEX events_call_run ON "{pg_schema}".events (call_id)')
        await conn.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass",
            f'"{pg_schema}".events_call_run',
        )
    finally:
        await conn.close()
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(CallRequested(ts=1.0, run_id="r", call_id="c", tool="t", args={}))
    assert (await _indexes(postgres_dsn, pg_schema))["events_call_run"].endswith(
        "(call_id, run_id, seq)"
    )


async def test_the_read_of_one_call_of_one_run_goes_through_the_index(
    postgres_dsn: str, pg_schema: str
) -> None:
    """``read(run_id=, call_id=)`` is answered by an index scan of events_call_run: the
    plan of the statement the ledger runs, as the server makes it."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append_many(_calls(20, 5))
        got = [e.seq async for e in ledger.read(run_id="run-7", call_id="c3")]
        assert got == [7 * 10 + 7, 7 * 10 + 8]
    sql = (
        f'SELECT seq, prev, hash, payload FROM "{pg_schema}".events'
        " WHERE seq > $1 AND run_id = $2 AND call_id = $3 ORDER BY seq LIMIT 2048"
    )
    plan = await _plan(postgres_dsn, sql, 0, "run-7", "c3")
    assert '"Index Name": "events_call_run"' in plan


class _Counting:
    """The writer's connection, counting the calls that go to the server."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._conn, name)
        if name in ("execute", "fetch", "fetchrow", "fetchval", "executemany") or name.startswith(
            "copy_"
        ):

            async def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(name)
                return await attr(*args, **kwargs)

            return counted
        return attr


async def test_a_commit_is_one_round_trip(postgres_dsn: str, pg_schema: str) -> None:
    """Once the writer knows the head, each commit is one call to the server (the
    function, its own transaction), claims included; another writer's commit costs the
    next one a second call (the function answers the head it found)."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(CallRequested(ts=1.0, run_id="r", call_id="c0", tool="t", args={}))
        writer = ledger._writer
        assert writer is not None
        counting = _Counting(writer._conn)
        writer._conn = counting
        for i in range(1, 6):
            await ledger.append(
                CallRequested(ts=1.0, run_id="r", call_id=f"c{i}", tool="t", args={})
            )
        assert counting.calls == ["fetch"] * 5
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as other:
            await other.append(CallRequested(ts=1.0, run_id="o", call_id="o", tool="t", args={}))
        counting.calls.clear()
        last = await ledger.append(
            CallRequested(ts=1.0, run_id="r", call_id="c6", tool="t", args={})
        )
        assert counting.calls == ["fetch", "fetch"]
        assert last.seq == 8
        assert await ledger.verify() == Verification(ok=True, checked=8)
