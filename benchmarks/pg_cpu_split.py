"""Where the Postgres fleet's time goes: CPU per event, client and server, one process
against fleets (issue 29), and what more chains, or no ledger at all, would give.

    python benchmarks/pg_cpu_split.py [--rounds N] [--per N]

On one throwaway cluster (``agent_adapter.testing.postgres``), each round, every appender
appending ``--per`` events (each variant on schemas of its own):

- 64 appenders of one process (``PostgresLedger.append``): the baseline;
- a fleet of 4 processes x 16 appenders (``_bench_postgres.FLEET_CHILD``, bench_ledger's
  fleet) on one ledger: the fleet of the issue's target;
- the same fleet with a ``PostgresLedger`` per schema in each process, 4 schemas, each
  run on the one its id hashes to: shards by run built from what exists (each process
  commits to 4 heads through 4 writers), without global claims or merged reading;
- the same fleet with a ledger per process: no two processes ever share a head, the most
  chains can give on this commit path (one commit in flight per chain);
- with 4 times the appenders in flight: 256 in one process, and 4 processes x 64 on one
  ledger, on 4 by run, and on a ledger each;
- raw asyncpg with no ledger: COPY transactions back to back of the rows a group commit
  of the same appenders writes (``bench_ledger.rows_for``, into the ledger's own table
  and indexes): one connection of 64-row ones, 4 processes of 16-row ones, and 4 of
  64-row ones.

For each it prints events/s, its ratio to the baseline and to raw's one connection
(paired in the round), the client's CPU per event (this process's, or the children's own
from their release to their last commit, start-up excluded) and the server's (every
``postgres`` process of the cluster, from ``/proc``, from the release on), and the cores
each used. A figure near 2 cores in all is CPU-bound on this 2-core machine; a low one
is waiting. Clients and server share the machine's 2 cores: replicas on hosts of their
own are not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_postgres import FLEET_CHILD, _fleet, fsync_rate

from agent_adapter.ledger import CallRequested, PostgresLedger
from agent_adapter.testing.postgres import Cluster, binaries

_TICK = os.sysconf("SC_CLK_TCK")
_HERE = Path(__file__).resolve().parent

# Raw asyncpg, no ledger: ``per`` transactions back to back, each a COPY of ``tasks`` rows
# (a group commit's rows of ``tasks`` appenders, seq in a range of this child's own) into
# the ledger's table in ``schema``.
RAW_CHILD = f"""
import asyncio, resource, sys
sys.path.insert(0, {str(_HERE)!r})
import asyncpg
from bench_ledger import rows_for

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

COLUMNS = ["seq", "type", "run_id", "call_id", "tool", "ts", "payload", "prev", "hash"]

async def main(dsn, schema, tag, per, tasks):
    conn = await asyncpg.connect(dsn)
    p = int(tag[1:-1])
    rows = [(p * 10**9 + seq, *rest) for seq, *rest in rows_for(p + 1, tasks, per)]
    print("ready", cpu(), flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    for start in range(0, len(rows), tasks):
        async with conn.transaction():
            await conn.copy_records_to_table(
                "events", records=rows[start:start + tasks], columns=COLUMNS,
                schema_name=schema)
    print("done", cpu(), flush=True)
    await conn.close()

dsn, schema, tag, per, tasks = sys.argv[1:6]
asyncio.run(main(dsn, schema, tag, int(per), int(tasks)))
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


# (seconds, client CPU seconds, server CPU seconds) of one variant's appends
Measured = tuple[float, float, float]


async def one_process(dsn: str, data: Path, schema: str, tasks: int, per: int) -> Measured:
    """``tasks`` appenders in this process (``FLEET_CHILD``'s appends)."""
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

        s0, c0, t0 = server_cpu(data), own_cpu(), time.perf_counter()
        await asyncio.gather(*(one(k) for k in range(tasks)))
        seconds, client = time.perf_counter() - t0, own_cpu() - c0
        return seconds, client, server_cpu(data) - s0


async def fleet(
    dsn: str, data: Path, target: str, procs: int, tasks: int, per: int, child: str = FLEET_CHILD
) -> Measured:
    """A fleet of ``procs`` children, CPU counted from their release (start-up excluded)."""
    said: list[bytes] = []  # each child's CPU at "ready", then at "done"
    s0: list[float] = []
    seconds = await _fleet(
        dsn, target, procs, tasks, per, child, said, lambda: s0.append(server_cpu(data))
    )
    ready, done = said[:procs], said[procs:]
    client = sum(map(float, done)) - sum(map(float, ready))
    return seconds, client, server_cpu(data) - s0[0]


async def raw(dsn: str, data: Path, schema: str, procs: int, rows: int, per: int) -> Measured:
    """``procs`` raw connections committing ``per`` COPYs of ``rows`` rows each."""
    import asyncpg

    from agent_adapter.ledger._postgres_schema import schema_sql

    conn = await asyncpg.connect(dsn)
    try:
        for statement in schema_sql(schema):
            await conn.execute(statement)
    finally:
        await conn.close()
    return await fleet(dsn, data, schema, procs, rows, per, RAW_CHILD)


def line(name: str, events: int, measured: Measured, ours: float, raw_: float) -> str:
    """A table row; ``ours`` and ``raw_`` are the round's two baselines' events/s."""
    seconds, client, server = measured
    rate = events / seconds
    return (
        f"| {name} | {rate:,.0f} | {rate / ours:.2f} | {rate / raw_:.2f} "
        f"| {1e6 * client / events:.1f} ({client / seconds:.2f}) "
        f"| {1e6 * server / events:.1f} ({server / seconds:.2f}) |"
    )


BASELINE, RAW_BASELINE = "64 appenders, one process", "raw: 1 x 64-row COPY"


async def main(rounds: int, per: int) -> None:
    bindir = binaries()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries (initdb, pg_ctl)")
    cluster = Cluster.start(bindir)
    dsn, data, events = cluster.dsn, cluster.data, 64 * per
    try:
        print(f"fsync {fsync_rate(cluster.data, 1.0):,.0f}/s in the cluster's directory\n")
        print(
            "| round: variant | events/s | x 64 appenders | x raw 1 x 64 "
            "| client µs/event (cores) | server µs/event (cores) |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for r in range(1, rounds + 1):
            # (name, events, what runs them)
            variants: list[tuple[str, int, Callable[[], Awaitable[Measured]]]] = [
                (BASELINE, events, partial(one_process, dsn, data, f"one{r}", 64, per))
            ]
            for tasks in (16, 64):
                n = tasks // 16 * events
                if tasks == 64:
                    one_256 = partial(one_process, dsn, data, f"one{r}b", 256, per)
                    variants.append(("256 appenders, one process", n, one_256))
                for how, target in (
                    ("one ledger", f"fleet{r}_{tasks}"),
                    ("4 ledgers by run", "hash:" + ",".join(f"s{r}_{tasks}_{k}" for k in range(4))),
                    ("a ledger each", "own:" + ",".join(f"o{r}_{tasks}_{k}" for k in range(4))),
                ):
                    run = partial(fleet, dsn, data, target, 4, tasks, per)
                    variants.append((f"4 x {tasks} fleet, {how}", n, run))
            variants.append(
                (RAW_BASELINE, events, partial(raw, dsn, data, f"raw{r}_1", 1, 64, per))
            )
            for rows in (16, 64):
                run = partial(raw, dsn, data, f"raw{r}_{rows}", 4, rows, per)
                variants.append((f"raw: 4 x {rows}-row COPY", rows // 16 * events, run))
            done = [(name, n, await run()) for name, n, run in variants]
            rate = {name: n / measured[0] for name, n, measured in done}
            for name, n, measured in done:
                print(line(f"{r}: {name}", n, measured, rate[BASELINE], rate[RAW_BASELINE]))
    finally:
        cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per", type=int, default=150, help="events per appender")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.per))
