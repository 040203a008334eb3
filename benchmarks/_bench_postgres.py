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
  one call at a time on each, beside BASE CALL: raw asyncpg doing a call's two one-row
  transactions (``call.started`` before the body, the rest after it);
- reads of one call of one run (``read(run_id=, call_id=)``) on a ledger of 120,000 events
  whose call ids repeat in every run, beside raw asyncpg running the same statement
  through the same index and decoding the rows (BASE READ).

Then, outside the timed rounds, what one commit costs the server (pg_stat_statements,
top-level statements: one per round trip here): statements per commit of one appender
and of BASE 1, and statements and function calls per event of the fleet.

Targets (issue 29, same-run ratios): one appender >= 0.9 x BASE 1; 64 appenders >= 0.7 x
BASE COPY; the fleet >= 1.5 x the 64 appenders of one process; one call at a time >= 0.8
x BASE CALL; a read of one call of one run >= 0.5 x BASE READ (at most twice its time).
The fsync rate of the disk the cluster writes to (8 kB ``os.write`` + ``fdatasync``) is
printed beside the table: every commit waits for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from _harness import fmt_pct, markdown_table, paired_ratio, summarize

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

# A fleet's child: ``tasks`` appenders of ``per`` events, each its own run, on the ledger
# in ``schema``; "hash:a,b,..." puts each run on the ledger of the schema its id hashes
# to, "own:a,b,..." child p on the p-th alone (pg_cpu_split's chains). It says its CPU
# seconds at "ready" and at "done" (pg_cpu_split's client CPU; _fleet ignores them).
FLEET_CHILD = """
import asyncio, contextlib, resource, sys, zlib
from agent_adapter.ledger import CallRequested, PostgresLedger

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

async def main(dsn, schema, tag, per, tasks):
    mode, _, names = schema.rpartition(":")
    names = names.split(",")
    if mode == "own":
        names = [names[int(tag[1:-1]) % len(names)]]
    async with contextlib.AsyncExitStack() as stack:
        ledgers = [
            await stack.enter_async_context(PostgresLedger(dsn, schema=n)) for n in names
        ]
        print("ready", cpu(), flush=True)
        await asyncio.to_thread(sys.stdin.readline)

        async def one(k):
            run = f"{tag}{k}"
            ledger = ledgers[zlib.crc32(run.encode()) % len(ledgers)]
            for i in range(per):
                await ledger.append(CallRequested(
                    ts=1.0, run_id=run, call_id=f"{run}-{i}", tool="refund",
                    args={"order_id": f"A{i}", "amount_cents": 500}))

        await asyncio.gather(*(one(k) for k in range(tasks)))
        print("done", cpu(), flush=True)

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


async def _fleet(
    dsn: str,
    schema: str,
    procs: int,
    tasks: int,
    per: int,
    child_code: str = FLEET_CHILD,
    said: list[bytes] | None = None,
    released: Callable[[], None] | None = None,
) -> float:
    """Seconds from the release of ``procs`` children to the last one done; each child's
    words after "ready" and after "done" go to ``said`` (pg_cpu_split's CPU times), and
    ``released`` is called as they are let go (once all are ready)."""
    children = []
    for p in range(procs):
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            child_code,
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
            word, *rest = (await asyncio.wait_for(child.stdout.readline(), 60)).split()
            assert word == b"ready", word
            if said is not None:
                said.extend(rest)
        if released is not None:
            released()
        t0 = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            await child.stdin.drain()
        for child in children:
            assert child.stdout is not None
            word, *rest = (await asyncio.wait_for(child.stdout.readline(), 300)).split()
            assert word == b"done", word
            if said is not None:
                said.extend(rest)
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
        cluster = Cluster.start(bindir, extra=("-c shared_preload_libraries=pg_stat_statements",))
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
        counted = await admin.fetchval(
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_stat_statements'"
        )
        if counted:
            try:
                await admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                await admin.fetchval("SELECT count(*) FROM pg_stat_statements")
            except asyncpg.PostgresError:
                counted = 0  # not preloaded (a server of $AGENT_ADAPTER_BENCH_POSTGRES_DSN)
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
        rawx = await asyncpg.connect(dsn)

        async def raw_calls() -> float:
            # What a plain call costs a store at least: two one-row transactions.
            rows = renumber(rows_for(next(tags), 1, 2 * calls))
            t0 = time.perf_counter()
            for row in rows:
                async with rawx.transaction():
                    await rawx.execute(insert, *row)
            return time.perf_counter() - t0

        reads, read_of, pinned = await _read_ledger(dsn, quick, cluster is not None)
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
            "raw asyncpg, a call's 2 one-row transactions, 1 at a time (BASE CALL, calls/s)": (
                calls,
                raw_calls,
            ),
            "raw asyncpg, one call of one run through events_call_run (BASE READ, reads/s)": (
                reads,
                read_of("raw"),
            ),
            "PostgresLedger.read(run_id=, call_id=) at 120,000 events (reads/s)": (
                reads,
                read_of("ours"),
            ),
        }
        try:
            from bench_ledger import rounds_of

            await rounds_of(variants, 1)
            samples = await rounds_of(variants, rounds)
            costs = (
                await _costs(dsn, ledgers[1], raw_one, fleet, 4 * 16 * fleet_per) if counted else ""
            )
        finally:
            await read_of("close")()
            await rawx.close()
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

    def ratio(name: str, base: str) -> float:
        return paired_ratio(samples[name], samples[base])

    one, sixty4, fleet_name = names[2], names[4], names[5]
    exec1, base_call, base_read, ours_read = names[9], names[10], names[11], names[12]
    cells: dict[str, tuple[str, str, bool | None]] = {
        names[0]: ("1 (BASE 1)", "", None),
        names[1]: (f"{ratio(names[1], names[0]):.2f} x BASE 1", "", None),
        one: (
            f"{ratio(one, names[0]):.2f} x BASE 1",
            ">= 0.9 x BASE 1",
            ratio(one, names[0]) >= 0.9,
        ),
        names[3]: (f"{ratio(names[3], names[1]):.2f} x BASE COPY", "", None),
        sixty4: (
            f"{ratio(sixty4, names[1]):.2f} x BASE COPY",
            ">= 0.7 x BASE COPY",
            ratio(sixty4, names[1]) >= 0.7,
        ),
        fleet_name: (
            f"{ratio(fleet_name, sixty4):.2f} x 64 appenders",
            ">= 1.5 x 64 appenders",
            ratio(fleet_name, sixty4) >= 1.5,
        ),
        names[6]: ("1 (BASE EXEC)", "", None),
        names[7]: (f"{ratio(names[7], names[6]):.2f} x BASE EXEC", "", None),
        names[8]: ("1 (BASE EXEC 1)", "", None),
        exec1: (
            f"{ratio(exec1, base_call):.2f} x BASE CALL; "
            f"{ratio(exec1, names[8]):.2f} x BASE EXEC 1",
            ">= 0.8 x BASE CALL",
            ratio(exec1, base_call) >= 0.8,
        ),
        base_call: ("1 (BASE CALL)", "", None),
        base_read: ("1 (BASE READ)", "", None),
        ours_read: (
            f"{ratio(ours_read, base_read):.2f} x BASE READ",
            ">= 0.5 x BASE READ",
            ratio(ours_read, base_read) >= 0.5,
        ),
    }
    del base1, basec
    rows = []
    for name in names:
        med, spread = summarize(samples[name])
        text, target, met = cells[name]
        shown = "" if met is None else ("yes" if met else "**no**")
        rows.append(
            [name, f"{med:,.0f}", fmt_pct(spread), f"{1e6 / med:,.1f}", text, target, shown]
        )
    table = markdown_table(
        ["variant", "per s (median)", "spread", "µs each", "ratio", "target", "met"], rows
    )
    where = "a throwaway cluster" if cluster is not None else "$AGENT_ADAPTER_BENCH_POSTGRES_DSN"
    pin = "yes" if pinned == {True} else "no" if pinned == {False} else "in some rounds"
    return (
        "## Appends on PostgreSQL (events/s unless said; ratio = ours / BASE, paired per round)\n\n"
        f"- PostgreSQL {version} on {where}; fsync={settings['fsync']}, "
        f"synchronous_commit={settings['synchronous_commit']}, "
        f"wal_sync_method={settings['wal_sync_method']}\n"
        f"- this disk's fsync rate: {fsyncs:,.0f} fdatasync/s (8 kB writes)\n"
        f"- load average at the end: {os.getloadavg()[0]:.1f} (2 cores)\n"
        "- the reads timed with this process and both connections' backends on one CPU: "
        f"{pin}\n\n" + table + "\n" + costs
    )


@contextlib.contextmanager
def _one_cpu(pids: list[int]) -> Iterator[bool]:
    """This thread (the event loop's: pid 0) and ``pids`` on the first CPU this process
    may use, then back; yields whether they all are (else none is moved: timed as the
    scheduler places them)."""
    moved: dict[int, set[int]] = {}
    try:
        cpu = min(os.sched_getaffinity(0))
        for pid in (0, *pids):
            moved[pid] = os.sched_getaffinity(pid)
            os.sched_setaffinity(pid, {cpu})
    except OSError:  # a server process gone, or not ours to move
        pinned = False
    else:
        pinned = True
    if not pinned:
        _restore(moved)
        moved = {}
    try:
        yield pinned
    finally:
        _restore(moved)


def _restore(moved: dict[int, set[int]]) -> None:
    for pid, cpus in moved.items():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, cpus)


READ_RUNS, READ_CALLS = 1_334, 30  # 3 events a call: 120,060 events


async def _read_ledger(
    dsn: str, quick: bool, local: bool
) -> tuple[int, Callable[[str], Callable[[], Awaitable[float]]], set[bool]]:
    """A ledger of whole calls whose call ids repeat in every run (c0..c29 in each), and
    the reads of one call of one run through it: ours, raw asyncpg, and closing both; and
    whether the blocks ran on one CPU (``local``: the server's processes are on this
    machine; see ``block``)."""
    import asyncpg

    from agent_adapter.ledger import (
        CallRequested,
        CallSucceeded,
        CallValidated,
        PostgresLedger,
        decode_event,
    )

    runs = READ_RUNS // 10 if quick else READ_RUNS
    ledger = PostgresLedger(dsn, schema="bench_reads")
    await ledger.open()
    for run in range(runs):
        batch = []
        for call in range(READ_CALLS):
            ids: dict[str, Any] = {"ts": 1.0, "run_id": f"run-{run}", "call_id": f"c{call}"}
            batch += [
                CallRequested(tool="lookup", args={"q": call}, **ids),
                CallValidated(tool="lookup", digest=f"{call:064x}", **ids),
                CallSucceeded(tool="lookup", duration_ms=1.0, result="ok", **ids),
            ]
        await ledger.append_many(batch)
    raw = await asyncpg.connect(dsn)
    count = 50 if quick else 300
    wanted = [(f"run-{(i * 37) % runs}", f"c{(i * 7) % READ_CALLS}") for i in range(count)]
    sql = (
        'SELECT seq, prev, hash, payload FROM "bench_reads".events'
        " WHERE seq > $1 AND run_id = $2 AND call_id = $3 ORDER BY seq LIMIT 2048"
    )

    async def read_ours(run_id: str, call_id: str) -> None:
        got = [e async for e in ledger.read(run_id=run_id, call_id=call_id)]
        assert len(got) == 3, got

    async def read_raw(run_id: str, call_id: str) -> None:
        rows = await raw.fetch(sql, 0, run_id, call_id)
        for seq, prev, hash_, payload in rows:
            e = decode_event(payload)
            e.seq, e.prev, e.hash = seq, prev, hash_
        assert len(rows) == 3

    pinned: set[bool] = set()
    # The two connections' backends: raw's, and the ledger's reader (the one whose last
    # statement is this read), looked up anew for each block (a reconnect changes it).
    backends = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND (pid = pg_backend_pid() OR (application_name = 'agent-adapter' AND query = $1))"
    )

    def read_of(which: str) -> Callable[[], Awaitable[float]]:
        one = read_ours if which == "ours" else read_raw

        async def block() -> float:
            # This process and both backends on one CPU while timed: on this VM a round
            # trip that wakes an idle CPU costs 150-250 µs more, and which of the two
            # connections the scheduler spread over both CPUs changed from run to run
            # (0.15-1.27 x unpinned, the same code; 0.72-0.74 x pinned, five runs).
            await read_ours(*wanted[0])  # the reader's last statement is the read
            pids = [r[0] for r in await raw.fetch(backends, sql)] if local else []
            pin = _one_cpu(pids) if len(pids) == 2 else contextlib.nullcontext(False)
            with pin as on_one:
                pinned.add(on_one)
                t0 = time.perf_counter()
                for run_id, call_id in wanted:
                    await one(run_id, call_id)
                return time.perf_counter() - t0

        async def close() -> float:
            await ledger.close()
            await raw.close()
            return 0.0

        return close if which == "close" else block

    return count, read_of, pinned


async def _costs(
    dsn: str,
    ledger: Any,
    raw_one: Callable[[], Awaitable[float]],
    fleet: Callable[[], Awaitable[float]],
    fleet_events: int,
) -> str:
    """What a commit costs the server, from pg_stat_statements (top-level statements)."""
    import asyncpg

    from agent_adapter.ledger import CallRequested

    admin = await asyncpg.connect(dsn)

    async def measured(block: Callable[[], Awaitable[Any]]) -> tuple[int, int, float]:
        await admin.execute("SELECT pg_stat_statements_reset()")
        await block()
        rows = await admin.fetch(
            "SELECT query, calls, total_exec_time FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        theirs = [r for r in rows if "pg_stat_statements" not in r[0]]
        statements = sum(r[1] for r in theirs)
        functions = sum(r[1] for r in theirs if "append_events" in r[0])
        ms = sum(r[2] for r in theirs)
        return statements, functions, ms

    n = 200

    async def ours() -> None:
        for i in range(n):
            await ledger.append(
                CallRequested(ts=1.0, run_id="cost", call_id=f"c{i}", tool="t", args={"i": i})
            )

    try:
        o_stmts, o_calls, o_ms = await measured(ours)
        r_stmts, _, r_ms = await measured(raw_one)
        f_stmts, f_calls, f_ms = await measured(fleet)
    finally:
        await admin.close()
    raw_n = r_stmts / 3  # BEGIN, INSERT, COMMIT each
    return (
        "\nWhat a commit costs the server (pg_stat_statements, top-level statements: each one "
        "round trip here; server time is the statements' execution, COMMIT's flush included):\n\n"
        + markdown_table(
            ["", "statements per commit", "server µs per commit"],
            [
                [
                    f"PostgresLedger.append, 1 appender ({n} commits)",
                    f"{o_stmts / n:.2f} ({o_calls / n:.2f} function calls)",
                    f"{1000 * o_ms / n:,.0f}",
                ],
                [
                    f"BASE 1 ({raw_n:.0f} commits)",
                    f"{r_stmts / raw_n:.2f}",
                    f"{1000 * r_ms / raw_n:,.0f}",
                ],
                [
                    f"the fleet, 4 x 16 ({fleet_events:,} events): per event",
                    f"{f_stmts / fleet_events:.3f} ({f_calls / fleet_events:.3f} function calls)",
                    f"{1000 * f_ms / fleet_events:,.1f}",
                ],
            ],
        )
        + "\n"
    )
