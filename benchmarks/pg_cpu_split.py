"""Where the Postgres fleet's time goes: CPU per event, client and server, one process
against fleets (issue 29), and what more chains or no ledger at all would give.

    python benchmarks/pg_cpu_split.py [--rounds N] [--per N]

On one throwaway cluster (``agent_adapter.testing.postgres``), each round, every appender
appending ``--per`` events (each variant on schemas of its own):

- 64 appenders of one process (``PostgresLedger.append``): the baseline;
- a fleet of 4 processes x 16 appenders (``_bench_postgres.FLEET_CHILD``'s work) on one
  ledger: the fleet of the issue's target;
- the same fleet on 4 ledgers (a schema each) with each run on the one its name hashes to:
  shards as the issue sketches them, before any cost of global claims or merged reading;
- the same fleet with a ledger per process: no two processes ever share a head, the most
  any choice of shards could give;
- with 4 times the appenders in flight: 256 in one process, and 4 processes x 64 on one
  ledger, on 4 by run, and on a ledger each;
- raw asyncpg with no ledger: one connection committing 64-row COPY transactions back to
  back, against 4 processes committing 16-row ones, and 4 committing 64-row ones.

For each it prints events/s, its ratio to the baseline (raw rows: to raw's one process),
the client's CPU per event (this process's, or the children's own from their release to
their last commit, start-up excluded) and the server's (every ``postgres`` process of
the cluster, from ``/proc``), and the cores each used. A figure near 2 cores in all is
CPU-bound on this 2-core machine; a low one is waiting.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_postgres import _fleet, fsync_rate

from agent_adapter.ledger import CallRequested, PostgresLedger
from agent_adapter.testing.postgres import Cluster, binaries

_TICK = os.sysconf("SC_CLK_TCK")

# A fleet's child: ``tasks`` appenders of ``per`` events (FLEET_CHILD's work) on the
# ledgers named by ``schemas``, "hash:a,b,..." (each run on the one its name hashes to)
# or "own:a,b,..." (child p on the p-th alone); it says its CPU time at ready and done.
LEDGER_CHILD = """
import asyncio, contextlib, resource, sys, zlib
from agent_adapter.ledger import CallRequested, PostgresLedger

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

async def main(dsn, schemas, tag, per, tasks):
    mode, names = schemas.split(":")
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

dsn, schemas, tag, per, tasks = sys.argv[1:6]
asyncio.run(main(dsn, schemas, tag, int(per), int(tasks)))
"""

# Raw asyncpg, no ledger: ``per`` transactions back to back, each a COPY of ``tasks``
# rows into the table ``table``.
RAW_CHILD = """
import asyncio, json, resource, sys
import asyncpg

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

async def main(dsn, table, tag, per, tasks):
    conn = await asyncpg.connect(dsn)
    body = json.dumps({"order_id": "A1", "amount_cents": 500})
    rows = [(f"{tag}{k}", f"{tag}{k}-0", body) for k in range(tasks)]
    print("ready", cpu(), flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    for _ in range(per):
        async with conn.transaction():
            await conn.copy_records_to_table(
                table, records=rows, columns=["run_id", "call_id", "body"])
    print("done", cpu(), flush=True)
    await conn.close()

dsn, table, tag, per, tasks = sys.argv[1:6]
asyncio.run(main(dsn, table, tag, int(per), int(tasks)))
"""


def server_cpu(data: Path) -> float:
    """CPU seconds of the cluster in ``data``: its postmaster and every child, ended or not."""
    postmaster = int((data / "postmaster.pid").read_text().split()[0])
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        if pid == postmaster:  # with its children that ended (closed connections)
            total += sum(int(f) for f in fields[11:15])
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / _TICK


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_process(dsn: str, schema: str, tasks: int, per: int) -> tuple[float, float]:
    """(seconds, client CPU seconds) of ``tasks`` appenders in this process."""
    async with PostgresLedger(dsn, schema=schema) as ledger:

        async def one(k: int) -> None:
            for i in range(per):
                await ledger.append(
                    CallRequested(
                        ts=1.0,
                        run_id=f"r{k}",
                        call_id=f"r{k}-{i}",
                        tool="refund",
                        args={"order_id": f"A{i}", "amount_cents": 500},
                    )
                )

        c0, t0 = own_cpu(), time.perf_counter()
        await asyncio.gather(*(one(k) for k in range(tasks)))
        return time.perf_counter() - t0, own_cpu() - c0


async def fleet(
    dsn: str, target: str, procs: int, tasks: int, per: int, child: str = LEDGER_CHILD
) -> tuple[float, float]:
    """(seconds, the children's CPU seconds from release to done) of a fleet."""
    said: list[bytes] = []  # each child's CPU at "ready", then at "done"
    seconds = await _fleet(dsn, target, procs, tasks, per, child, said)
    ready, done = said[:procs], said[procs:]
    return seconds, sum(map(float, done)) - sum(map(float, ready))


async def raw(dsn: str, table: str, procs: int, rows: int, events: int) -> tuple[float, float]:
    """A raw fleet of ``procs`` connections committing ``rows``-row COPY transactions."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f"CREATE TABLE {table} (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
            " run_id text, call_id text, body jsonb)"
        )
    finally:
        await conn.close()
    return await fleet(dsn, table, procs, rows, events // (procs * rows), RAW_CHILD)


def line(name: str, events: int, seconds: float, base: float, cpu: tuple[float, float]) -> str:
    """A table row; ``base`` is the events/s the ratio is to."""
    client, server = cpu
    return (
        f"| {name} | {events / seconds:,.0f} | {events / seconds / base:.2f} "
        f"| {1e6 * client / events:.1f} ({client / seconds:.2f}) "
        f"| {1e6 * server / events:.1f} ({server / seconds:.2f}) |"
    )


async def main(rounds: int, per: int) -> None:
    bindir = binaries()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries (initdb, pg_ctl)")
    cluster = Cluster.start(bindir)
    dsn, events = cluster.dsn, 64 * per
    try:
        print(f"fsync {fsync_rate(cluster.data, 1.0):,.0f}/s in the cluster's directory\n")
        print(
            "| round: variant | events/s | x baseline | client µs/event (cores) "
            "| server µs/event (cores) |"
        )
        print("|---|---:|---:|---:|---:|")
        for r in range(1, rounds + 1):
            shards = ",".join(f"shard{r}_{k}" for k in range(4))
            own = ",".join(f"own{r}_{k}" for k in range(4))
            # (name, events, what runs them); "64 appenders" is the ledger rows' baseline,
            # "raw: 1 x" the raw rows'.
            variants = [
                (
                    "64 appenders, one process",
                    events,
                    partial(one_process, dsn, f"one{r}", 64, per),
                ),
                (
                    "4 x 16 fleet, one ledger",
                    events,
                    partial(fleet, dsn, f"hash:fleet{r}", 4, 16, per),
                ),
                (
                    "4 x 16 fleet, 4 ledgers by run",
                    events,
                    partial(fleet, dsn, f"hash:{shards}", 4, 16, per),
                ),
                (
                    "4 x 16 fleet, a ledger each",
                    events,
                    partial(fleet, dsn, f"own:{own}", 4, 16, per),
                ),
                (
                    "256 appenders, one process",
                    4 * events,
                    partial(one_process, dsn, f"one{r}b", 256, per),
                ),
                (
                    "4 x 64 fleet, one ledger",
                    4 * events,
                    partial(fleet, dsn, f"hash:big{r}", 4, 64, per),
                ),
                (
                    "4 x 64 fleet, 4 ledgers by run",
                    4 * events,
                    partial(fleet, dsn, f"hash:{shards.replace('shard', 'bshard')}", 4, 64, per),
                ),
                (
                    "4 x 64 fleet, a ledger each",
                    4 * events,
                    partial(fleet, dsn, f"own:{own.replace('own', 'bown')}", 4, 64, per),
                ),
                ("raw: 1 x 64-row COPY", events, partial(raw, dsn, f"raw{r}_1", 1, 64, events)),
                ("raw: 4 x 16-row COPY", events, partial(raw, dsn, f"raw{r}_16", 4, 16, events)),
                (
                    "raw: 4 x 64-row COPY",
                    4 * events,
                    partial(raw, dsn, f"raw{r}_64", 4, 64, 4 * events),
                ),
            ]
            base = 0.0
            for name, n, run in variants:
                s0 = server_cpu(cluster.data)
                seconds, client = await run()
                server = server_cpu(cluster.data) - s0
                if name.startswith(("64 appenders", "raw: 1 x")):
                    base = n / seconds
                print(line(f"{r}: {name}", n, seconds, base, (client, server)), flush=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per", type=int, default=150, help="events per appender")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.per))
