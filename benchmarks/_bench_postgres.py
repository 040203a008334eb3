"""The Postgres rows of ``bench_ledger.py``: PostgresLedger beside raw asyncpg, one server.

Everything runs on one throwaway cluster this script starts (initdb/pg_ctl, fsync on,
synchronous_commit on; ``agent_adapter.testing.postgres``), or on
``$AGENT_ADAPTER_BENCH_POSTGRES_DSN``, in one run:

- BASE 1: raw asyncpg, one row per transaction (``BEGIN``, ``INSERT``, ``COMMIT``) on a
  table with the ledger's columns, rows encoded and chained beforehand;
- BASE COPY: raw asyncpg, 64 rows per transaction by binary COPY
  (``copy_records_to_table``), rows as above;
- ``PostgresLedger.append`` from 1, 16 and 64 concurrent tasks of one process;
- a fleet: 4 processes x 16 tasks, each process its own ``PostgresLedger`` on one schema
  (released together; timed from the release to the last one done);
- executor calls/s at 16 concurrent calls (a plain tool: requested, validated, started,
  succeeded), on Postgres and on ``SQLiteLedger`` (synchronous=FULL) in the same run, and
  the per-call cost of one call at a time on each.

Targets (issue 13): 64 appenders >= 0.7 x BASE COPY; the fleet >= 2,000 events/s.
The fsync rate of the disk the cluster writes to (8 kB ``os.write`` + ``fdatasync``) is
printed beside the table: every commit waits for one.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _harness import fmt_pct, markdown_table, paired_ratio, summarize

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

FLEET_CHILD = """
import asyncio, sys, time
from agent_adapter.ledger import CallRequested, PostgresLedger

async def main(dsn, schema, tag, per, tasks):
    async with PostgresLedger(dsn, schema=schema) as ledger:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)

        async def one(k):
            for i in range(per):
                await ledger.append(CallRequested(
                    ts=1.0, run_id=f"{tag}{k}", call_id=f"{tag}{k}-{i}", tool="refund",
                    args={"order_id": f"A{i}", "amount_cents": 500}))

        await asyncio.gather(*(one(k) for k in range(tasks)))
        print("done", flush=True)

dsn, schema, tag, per, tasks = sys.argv[1:6]
asyncio.run(main(dsn, schema, tag, int(per), int(tasks)))
"""


def fsync_rate(directory: Path, seconds: float) -> float:
    """8 kB writes each followed by fdatasync, per second, in ``directory``."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    block = os.urandom(8192)
    count = 0
    try:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            os.pwrite(fd, block, 0)
            os.fdatasync(fd)
            count += 1
        return count / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()


async def _fleet(dsn: str, schema: str, procs: int, tasks: int, per: int) -> float:
    children = []
    for p in range(procs):
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            FLEET_CHILD,
            dsn,
            schema,
            f"p{p}x",
            str(per),
            str(tasks),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        children.append(child)
    try:
        for child in children:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), 60)
            assert line.strip() == b"ready", line
        t0 = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            await child.stdin.drain()
        for child in children:
            assert child.stdout is not None
            line = await asyncio.wait_for(child.stdout.readline(), 300)
            assert line.strip() == b"done", line
        seconds = time.perf_counter() - t0
        for child in children:
            await child.wait()
        return seconds
    finally:
        for child in children:
            if child.returncode is None:
                child.kill()
                await child.wait()


async def bench_postgres(tmp: Path, quick: bool, rounds: int) -> str:
    """The Postgres section of bench_ledger (a note instead when no server can start)."""
    try:
        import asyncpg
    except ImportError:
        return "## Appends on PostgreSQL\n\nskipped: asyncpg is not installed\n"
    from bench_ledger import appenders, events_for, rows_for

    from agent_adapter import Executor, Registry
    from agent_adapter.ledger import PostgresLedger, SQLiteLedger
    from agent_adapter.ledger._postgres_schema import schema_sql

    cluster = None
    dsn = os.environ.get("AGENT_ADAPTER_BENCH_POSTGRES_DSN")
    probe_dir = tmp
    if not dsn:
        from agent_adapter.testing.postgres import Cluster, binaries

        bindir = binaries()
        if bindir is None:
            return "## Appends on PostgreSQL\n\nskipped: no PostgreSQL binaries (initdb, pg_ctl)\n"
        cluster = Cluster.start(bindir)
        dsn = cluster.dsn
        probe_dir = cluster.root
    try:
        version = ""
        admin = await asyncpg.connect(dsn)
        version = await admin.fetchval("SHOW server_version")
        settings = {
            name: await admin.fetchval(f"SHOW {name}")
            for name in ("fsync", "synchronous_commit", "wal_sync_method")
        }
        for statement in schema_sql("bench_raw"):
            await admin.execute(statement)
        await admin.close()

        per = {1: 40 if quick else 300, 16: 20 if quick else 200, 64: 10 if quick else 120}
        fleet_per = 10 if quick else 150
        raw1 = await asyncpg.connect(dsn)
        rawc = await asyncpg.connect(dsn)
        seqs = [0]
        tags = iter(range(1, 10**6))
        insert = (
            'INSERT INTO "bench_raw".events (seq, type, run_id, call_id, tool, ts, payload,'
            " prev, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        )
        columns = ["seq", "type", "run_id", "call_id", "tool", "ts", "payload", "prev", "hash"]

        def renumber(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
            out = [(seqs[0] + 1 + i, *row[1:]) for i, row in enumerate(rows)]
            seqs[0] += len(rows)
            return out

        async def raw_one() -> float:
            rows = renumber(rows_for(next(tags), 1, per[1]))
            t0 = time.perf_counter()
            for row in rows:
                async with raw1.transaction():
                    await raw1.execute(insert, *row)
            return time.perf_counter() - t0

        async def raw_copy() -> float:
            rows = renumber(rows_for(next(tags), 64, per[64]))
            t0 = time.perf_counter()
            for start in range(0, len(rows), 64):
                async with rawc.transaction():
                    await rawc.copy_records_to_table(
                        "events",
                        records=rows[start : start + 64],
                        columns=columns,
                        schema_name="bench_raw",
                    )
            return time.perf_counter() - t0

        ledgers = {c: PostgresLedger(dsn, schema=f"bench_l{c}") for c in (1, 16, 64)}
        for ledger in ledgers.values():
            await ledger.open()

        def ours(c: int) -> Callable[[], Awaitable[float]]:
            return lambda: appenders(ledgers[c], events_for(next(tags), c, per[c]))  # type: ignore[arg-type]

        fleet_round = iter(range(10**6))

        async def fleet() -> float:
            schema = f"bench_fleet{next(fleet_round)}"
            async with PostgresLedger(dsn, schema=schema):
                pass
            return await _fleet(dsn, schema, 4, 16, fleet_per)

        registry = Registry()

        @registry.tool
        async def noop(order_id: str) -> str:
            """A plain tool: four events per call."""
            return order_id

        calls = 30 if quick else 200
        pg_exec = await Executor.open(registry, ledger=PostgresLedger(dsn, schema="bench_exec"))
        sq_exec = await Executor.open(registry, ledger=SQLiteLedger(tmp / "exec.db"))
        counter = iter(range(10**9))

        def executor_calls(ex: Executor, concurrency: int) -> Callable[[], Awaitable[float]]:
            async def block() -> float:
                async def one(k: int) -> None:
                    for _ in range(calls // concurrency if concurrency > 1 else calls):
                        n = next(counter)
                        await ex.call(
                            "noop", {"order_id": f"A{n}"}, run_id=f"r{k}", call_id=f"c{n}"
                        )

                t0 = time.perf_counter()
                await asyncio.gather(*(one(k) for k in range(concurrency)))
                return time.perf_counter() - t0

            return block

        each16 = (calls // 16) * 16
        variants: dict[str, tuple[int, Callable[[], Awaitable[float]]]] = {
            "raw asyncpg, 1 row per transaction (BASE 1)": (per[1], raw_one),
            "raw asyncpg, 64 rows per transaction by COPY (BASE COPY)": (64 * per[64], raw_copy),
            "PostgresLedger.append, 1 appender": (per[1], ours(1)),
            "PostgresLedger.append, 16 concurrent appenders": (16 * per[16], ours(16)),
            "PostgresLedger.append, 64 concurrent appenders": (64 * per[64], ours(64)),
            "PostgresLedger.append, 4 processes x 16 appenders": (4 * 16 * fleet_per, fleet),
            "Executor.call on SQLiteLedger FULL, 16 concurrent (BASE EXEC, calls/s)": (
                each16,
                executor_calls(sq_exec, 16),
            ),
            "Executor.call on PostgresLedger, 16 concurrent (calls/s)": (
                each16,
                executor_calls(pg_exec, 16),
            ),
            "Executor.call on SQLiteLedger FULL, 1 at a time (BASE EXEC 1, calls/s)": (
                calls,
                executor_calls(sq_exec, 1),
            ),
            "Executor.call on PostgresLedger, 1 at a time (calls/s)": (
                calls,
                executor_calls(pg_exec, 1),
            ),
        }
        try:
            from bench_ledger import rounds_of

            await rounds_of(variants, 1)
            samples = await rounds_of(variants, rounds)
        finally:
            await raw1.close()
            await rawc.close()
            for ledger in ledgers.values():
                await ledger.close()
            await pg_exec.close()
            await sq_exec.close()
        gc.collect()
        fsyncs = fsync_rate(probe_dir, 0.5 if quick else 3.0)
    finally:
        if cluster is not None:
            cluster.stop()

    names = list(variants)
    base1, basec = samples[names[0]], samples[names[1]]
    bases = {
        names[0]: ("1 (BASE 1)", None),
        names[1]: (f"{paired_ratio(basec, base1):.2f} x BASE 1", None),
        names[2]: (f"{paired_ratio(samples[names[2]], base1):.2f} x BASE 1", None),
    }
    rows = []
    for i, name in enumerate(names):
        med, spread = summarize(samples[name])
        target, met = "", ""
        if name in bases:
            ratio = bases[name][0]
        elif i in (3, 4):
            ratio = f"{paired_ratio(samples[name], basec):.2f} x BASE COPY"
            if i == 4:
                r = paired_ratio(samples[name], basec)
                target, met = ">= 0.7 x BASE COPY", "yes" if r >= 0.7 else "**no**"
        elif i == 5:
            ratio = f"{paired_ratio(samples[name], basec):.2f} x BASE COPY"
            target, met = ">= 2,000/s", "yes" if med >= 2000 else "**no**"
        elif i == 6:
            ratio = "1 (BASE EXEC)"
        elif i == 7:
            ratio = f"{paired_ratio(samples[name], samples[names[6]]):.2f} x BASE EXEC"
        elif i == 8:
            ratio = "1 (BASE EXEC 1)"
        else:
            ratio = f"{paired_ratio(samples[name], samples[names[8]]):.2f} x BASE EXEC 1"
        rows.append([name, f"{med:,.0f}", fmt_pct(spread), f"{1e6 / med:,.1f}", ratio, target, met])
    table = markdown_table(
        ["variant", "per s (median)", "spread", "µs each", "ratio", "target", "met"], rows
    )
    where = "a throwaway cluster" if cluster is not None else "$AGENT_ADAPTER_BENCH_POSTGRES_DSN"
    return (
        "## Appends on PostgreSQL (events/s unless said; ratio = ours / BASE, paired per round)\n\n"
        f"- PostgreSQL {version} on {where}; fsync={settings['fsync']}, "
        f"synchronous_commit={settings['synchronous_commit']}, "
        f"wal_sync_method={settings['wal_sync_method']}\n"
        f"- this disk's fsync rate: {fsyncs:,.0f} fdatasync/s (8 kB writes)\n\n" + table + "\n"
    )
