"""PostgresLedger's schema version 3: the append function, the (call_id, run_id) index,
and the migration of a ledger an older version (schema version 1 or 2) wrote.

The version 1 ledger is built here as version 1 wrote it: its statements, frozen below
as they were, and rows chained by the same chain helpers with the head's MAC; the
version 2 one is a ledger with version 2's function (frozen below) and version number.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import pytest

from agent_adapter.ledger import CallRequested, CallSucceeded, PostgresLedger, Verification
from agent_adapter.ledger._chain import make_record
from agent_adapter.ledger._head import head_mac
from agent_adapter.ledger._postgres_schema import SCHEMA_VERSION, append_function_sql


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


def _v2_function(schema: str) -> str:
    """Schema version 2's append function, as that version created it (frozen)."""
    s = f'"{schema}"'
    return f"""CREATE OR REPLACE FUNCTION {s}.append_events(
    p_head_seq bigint, p_head_hash text, p_head_mac text, p_since bigint, p_quiet boolean,
    p_lock_ms text,
    p_rows {s}.events[],
    p_key text[], p_key_seq bigint[], p_holder text[], p_horizon bigint[],
    p_new_hash text, p_new_mac text, p_channel text)
RETURNS TABLE (o_kind text, o_seq bigint, o_text text, o_hash text, o_payload bytea)
LANGUAGE plpgsql AS $fn$
DECLARE
    h record;
    n bigint;
    new_seq bigint := p_head_seq + coalesce(cardinality(p_rows), 0);
BEGIN
    PERFORM set_config('lock_timeout', p_lock_ms, true);
    SELECT hd.seq, hd.hash, hd.mac INTO h FROM {s}.head hd WHERE hd.id = 1 FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'agent-adapter: the head row is missing';
    END IF;
    IF h.seq <> p_head_seq OR h.hash <> p_head_hash OR h.mac <> p_head_mac THEN
        IF p_quiet THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        RETURN QUERY SELECT 'stale'::text, h.seq, h.mac, h.hash, NULL::bytea;
        IF p_since IS NOT NULL THEN
            RETURN QUERY SELECT 'row'::text, e.seq, e.prev, e.hash, e.payload
                FROM {s}.events e WHERE e.seq > p_since ORDER BY e.seq;
        END IF;
        RETURN;
    END IF;
    IF NOT ((p_head_seq = 0 OR EXISTS (SELECT 1 FROM {s}.events e
                WHERE e.seq = p_head_seq AND e.hash = p_head_hash))
            AND NOT EXISTS (SELECT 1 FROM {s}.events e WHERE e.seq > p_head_seq)) THEN
        IF p_quiet THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        RETURN QUERY SELECT 'uneven'::text, h.seq, h.mac, h.hash, NULL::bytea;
        RETURN;
    END IF;
    IF cardinality(p_key) > 0 THEN
        RETURN QUERY SELECT 'claimed'::text, c.seq, c.key, NULL::text, NULL::bytea
            FROM {s}.effect_claims c
            JOIN unnest(p_key, p_holder, p_horizon) AS k(key, holder, horizon)
              ON c.key = k.key
            WHERE NOT (c.holder = k.holder OR c.seq <= k.horizon OR k.holder = '');
        IF FOUND THEN
            IF p_quiet THEN
                PERFORM set_config('synchronous_commit', 'off', true);
            END IF;
            RETURN;
        END IF;
        INSERT INTO {s}.effect_claims AS c (key, seq, holder, horizon)
            SELECT * FROM unnest(p_key, p_key_seq, p_holder, p_horizon)
            ON CONFLICT (key) DO UPDATE SET seq = EXCLUDED.seq, holder = EXCLUDED.holder,
                horizon = EXCLUDED.horizon
            WHERE c.holder = EXCLUDED.holder OR c.seq <= EXCLUDED.horizon
                OR EXCLUDED.holder = '';
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n < cardinality(p_key) THEN
            RAISE EXCEPTION 'agent-adapter: an effect claim was written around the head lock';
        END IF;
    END IF;
    INSERT INTO {s}.events SELECT * FROM unnest(p_rows);
    UPDATE {s}.head SET seq = new_seq, hash = p_new_hash, mac = p_new_mac WHERE id = 1;
    PERFORM pg_notify(p_channel, new_seq::text);
    RETURN QUERY SELECT 'ok'::text, new_seq, p_new_mac, p_new_hash, NULL::bytea;
END
$fn$"""


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
    drops the call_id index it replaces, sets this version, and appends on the same chain."""
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
    assert (version, valid) == (str(SCHEMA_VERSION), True)


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


@pytest.mark.parametrize("key", [None, b"k" * 32], ids=["unkeyed", "keyed"])
async def test_a_commit_is_one_round_trip(
    postgres_dsn: str, pg_schema: str, key: bytes | None
) -> None:
    """Once the writer knows the head, each commit is one call to the server (the
    function, its own transaction), claims included. After another writer's commit:
    unkeyed, still one (the function chains the rows again on the head it found, and
    answers the rows the writer had not heard); keyed, a second call (the function
    answers the head it found, and the writer chains again: the key stays here)."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema, key=key) as ledger:
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
        async with PostgresLedger(postgres_dsn, schema=pg_schema, key=key) as other:
            theirs = await other.append(
                CallRequested(ts=1.0, run_id="o", call_id="o", tool="t", args={})
            )
        counting.calls.clear()
        last = await ledger.append(
            CallRequested(ts=1.0, run_id="r", call_id="c6", tool="t", args={})
        )
        assert counting.calls == ["fetch"] * (1 if key is None else 2)
        assert (last.seq, last.prev) == (8, theirs.hash)
        stored = [(e.seq, e.prev, e.hash) async for e in ledger.read(after=6)]
        assert stored == [(7, theirs.prev, theirs.hash), (8, last.prev, last.hash)]
        assert await ledger.verify() == Verification(ok=True, checked=8)


async def _explaining(dsn: str, plans: list[str]) -> asyncpg.Connection:
    """A connection that sends the plan of every statement it runs, functions' included,
    to ``plans`` (auto_explain), planned as a long-lived writer's are: generic plans."""
    conn = await asyncpg.connect(dsn)
    await conn.execute("LOAD 'auto_explain'")
    for setting in (
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_nested_statements = on",
        "auto_explain.log_analyze = on",
        "auto_explain.log_timing = off",
        "auto_explain.log_level = notice",
        "client_min_messages = notice",
        # What a writer's plans become after five calls of one statement (plpgsql
        # caches its statements' plans): planned without the parameters' values.
        "plan_cache_mode = force_generic_plan",
    ):
        await conn.execute(f"SET {setting}")
    conn.add_log_listener(lambda _conn, message: plans.append(str(message.message)))
    return conn


async def test_an_append_reads_no_more_of_the_table_than_its_end(
    postgres_dsn: str, pg_schema: str
) -> None:
    """The function's reads under the head lock (that the table ends at the head; the
    rows a stale writer has not heard) find the table's end through the primary key: no
    plan of an append scans the events, whatever their number (version 2's tail check
    did, holding the head for the whole table: 4 ms at 50,000 events, every commit)."""
    plans: list[str] = []
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append_many(_calls(30, 10))
        writer = ledger._writer
        assert writer is not None
        explaining = await _explaining(postgres_dsn, plans)
        old, writer._conn = writer._conn, explaining
        assert old is not None
        await old.close()
        for i in range(3):
            await ledger.append(
                CallRequested(ts=1.0, run_id="r", call_id=f"c{i}", tool="t", args={})
            )
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as other:
            await other.append(CallRequested(ts=1.0, run_id="o", call_id="o", tool="t", args={}))
        last = await ledger.append(
            CallRequested(ts=1.0, run_id="r", call_id="c3", tool="t", args={})
        )
        assert last.seq == 600 + 5
        # A writer whose head is stale and whose followers heard seq 601: the head and
        # the rows past 601 come back, nothing is written.
        answer = await explaining.fetch(
            f'SELECT o_kind, o_seq FROM "{pg_schema}".append_events('
            "0, '', '', 601, true, '1000', NULL, '{}', '{}', '{}', '{}', '', '', 'x', true)"
        )
        assert [tuple(row) for row in answer] == [
            ("stale", 605),
            ("row", 602),
            ("row", 603),
            ("row", 604),
            ("row", 605),
        ]
        assert await ledger.verify() == Verification(ok=True, checked=605)
    statements = [plan for plan in plans if "events" in plan]
    assert len(statements) >= 6, plans  # the plans did come: the check is not vacuous
    scans = [plan for plan in statements if "Seq Scan on events" in plan]
    assert scans == []


async def _schema_state(dsn: str, schema: str) -> tuple[str, list[str]]:
    """(the meta's schema_version, the sources of the schema's append functions, by their
    number of arguments)."""
    conn = await asyncpg.connect(dsn)
    try:
        version = await conn.fetchval(
            f"SELECT value FROM \"{schema}\".meta WHERE name = 'schema_version'"
        )
        sources = await conn.fetch(
            "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = $1 AND p.proname = 'append_events' ORDER BY p.pronargs",
            schema,
        )
        return str(version), [str(row[0]) for row in sources]
    finally:
        await conn.close()


async def _as_version(dsn: str, schema: str, version: int, function_sql: str) -> None:
    """Make the ledger in ``schema`` what ``version`` left: its one append function, and
    its version in the meta."""
    conn = await asyncpg.connect(dsn)
    try:
        for (args,) in await conn.fetch(
            "SELECT pg_get_function_identity_arguments(p.oid) FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = $1 AND p.proname = 'append_events'",
            schema,
        ):
            await conn.execute(f'DROP FUNCTION "{schema}".append_events({args})')
        await conn.execute(function_sql)
        await conn.execute(
            f"UPDATE \"{schema}\".meta SET value = $1 WHERE name = 'schema_version'",
            str(version),
        )
    finally:
        await conn.close()


def _source(function_sql: str) -> str:
    return function_sql.split("$fn$")[1]


async def test_a_version_2_ledger_gets_the_new_function_from_its_first_writer(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A ledger version 2 left: reading opens it as it is (its function and version
    kept); the first writer replaces that function in place by version 3's (the same
    signature: a version 2 writer still running calls it), adds this version's beside
    it, sets this version, and appends on the same chain."""
    events = _calls(3, 4)
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append_many(events)
    await _as_version(postgres_dsn, pg_schema, 2, _v2_function(pg_schema))
    old = _source(_v2_function(pg_schema))
    async with PostgresLedger(postgres_dsn, schema=pg_schema, readonly=True) as reader:
        got = [(e.seq, e.type) async for e in reader.read(run_id="run-1", call_id="c2")]
        assert got == [(13, "call.requested"), (14, "call.succeeded")]
    assert await _schema_state(postgres_dsn, pg_schema) == ("2", [old])

    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        added = await ledger.append(
            CallRequested(ts=2.0, run_id="run-1", call_id="c2", tool="t", args={"n": 9})
        )
        verification = await ledger.verify()
    assert added.seq == len(events) + 1
    assert verification == Verification(ok=True, checked=len(events) + 1)
    v3 = _source(append_function_sql(pg_schema, rechain=False))
    assert old != v3
    assert await _schema_state(postgres_dsn, pg_schema) == (
        str(SCHEMA_VERSION),
        [v3, _source(append_function_sql(pg_schema))],
    )


async def test_a_version_3_ledger_keeps_its_function_for_the_writers_still_running(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A ledger version 3 left, one of its writers still running: the first writer of
    this version adds its own function (one more argument) beside version 3's and sets
    this version; the old writer goes on calling its own, on the same head: after
    another writer's commit it is answered STALE with that head, and its append on it
    lands between the new writer's."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append_many(_calls(1, 2))
    v3_sql = append_function_sql(pg_schema, rechain=False)
    await _as_version(postgres_dsn, pg_schema, 3, v3_sql)
    old = await asyncpg.connect(postgres_dsn)
    try:
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
            mine = await ledger.append(
                CallRequested(ts=2.0, run_id="new", call_id="n1", tool="t", args={})
            )
            assert await _schema_state(postgres_dsn, pg_schema) == (
                str(SCHEMA_VERSION),
                [_source(v3_sql), _source(append_function_sql(pg_schema))],
            )
            # The old writer, as version 3 called its function (14 arguments).
            call = (
                f'SELECT o_kind, o_seq, o_text, o_hash FROM "{pg_schema}".append_events('
                "$1, $2, $3, NULL, true, '1000', $4, '{}', '{}', '{}', '{}', $5, $6, 'x')"
            )
            answer = await old.fetch(call, 0, "", "", [], "", "")
            assert [(r[0], r[1], r[3]) for r in answer] == [("stale", mine.seq, mine.hash)]
            event = CallRequested(ts=3.0, run_id="old", call_id="o1", tool="t", args={})
            r = make_record(event, mine.seq + 1, mine.hash)
            row = (r.seq, r.type, r.run_id, r.call_id, r.tool, r.ts, r.payload, r.prev, r.hash)
            mac = head_mac(r.seq, r.hash, None)
            answer = await old.fetch(call, mine.seq, mine.hash, answer[0][2], [row], r.hash, mac)
            assert [(r[0], r[1]) for r in answer] == [("ok", mine.seq + 1)]
            after = await ledger.append(
                CallRequested(ts=4.0, run_id="new", call_id="n2", tool="t", args={})
            )
            assert (after.seq, after.prev) == (mine.seq + 2, r.hash)
            assert await ledger.verify() == Verification(ok=True, checked=after.seq)
    finally:
        await old.close()


async def test_appends_of_one_loop_turn_share_one_commit_and_wake_without_a_hop(
    postgres_dsn: str, pg_schema: str
) -> None:
    """The writer is a task of the appenders' loop: each append is handed to it at once,
    yet the appends of one turn of the loop still go in one call (one commit), and
    their waiters are woken from the task directly, not through the loop's thread-safe
    queue (a self-pipe write, a read and one more turn for every commit)."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        await ledger.append(CallRequested(ts=1.0, run_id="r", call_id="c", tool="t", args={}))
        writer = ledger._writer
        assert writer is not None
        counting = _Counting(writer._conn)
        writer._conn = counting
        loop = asyncio.get_running_loop()
        hops: list[Any] = []
        threadsafe = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            hops.append(args[0])
            return threadsafe(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        try:
            added = await asyncio.gather(
                *(
                    ledger.append(
                        CallRequested(ts=1.0, run_id="r", call_id=f"c{i}", tool="t", args={})
                    )
                    for i in range(10)
                )
            )
        finally:
            del loop.call_soon_threadsafe
        assert counting.calls == ["fetch"]
        assert sorted(e.seq for e in added) == list(range(2, 12))
        assert hops == []
        assert await ledger.verify() == Verification(ok=True, checked=11)
