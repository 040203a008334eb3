"""Where the Postgres fleet's time goes: CPU per event, client and server, one process
against a fleet (issue 29).

    python benchmarks/pg_cpu_split.py [--rounds N] [--per N]

On one throwaway cluster (``agent_adapter.testing.postgres``), each round: 64 appenders
of one process (``PostgresLedger.append``, ``--per`` events each), then a fleet of 4
processes x 16 appenders (``_bench_postgres.FLEET_CHILD``'s work) on its own schema. For
each it prints events/s, the client's CPU per event (this process's, or the children's
own from their release to their last append, start-up excluded) and the server's (every
``postgres`` process of the cluster, from ``/proc``), and the cores each used. A figure
that is near 2 cores in all is CPU-bound on this 2-core machine; a low one is waiting.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_postgres import FLEET_CHILD, _fleet

from agent_adapter.ledger import CallRequested, PostgresLedger
from agent_adapter.testing.postgres import Cluster, binaries

_TICK = os.sysconf("SC_CLK_TCK")
# The fleet's child, reporting its own CPU time when done (start-up subtracted below).
CHILD = FLEET_CHILD.replace(
    'print("ready", flush=True)',
    "import resource; r = resource.getrusage(resource.RUSAGE_SELF); "
    'print("ready", r.ru_utime + r.ru_stime, flush=True)',
).replace(
    'print("done", flush=True)',
    "r = resource.getrusage(resource.RUSAGE_SELF); "
    'print("done", r.ru_utime + r.ru_stime, flush=True)',
)


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


async def fleet(dsn: str, schema: str, procs: int, tasks: int, per: int) -> tuple[float, float]:
    """(seconds, the children's CPU seconds from release to done) of a fleet."""
    said: list[bytes] = []  # each child's CPU at "ready", then at "done"
    seconds = await _fleet(dsn, schema, procs, tasks, per, CHILD, said)
    ready, done = said[:procs], said[procs:]
    return seconds, sum(map(float, done)) - sum(map(float, ready))


def line(name: str, events: int, seconds: float, client: float, server: float) -> str:
    return (
        f"| {name} | {events / seconds:,.0f} | {1e6 * client / events:.1f} "
        f"({client / seconds:.2f}) | {1e6 * server / events:.1f} ({server / seconds:.2f}) |"
    )


async def main(rounds: int, per: int) -> None:
    bindir = binaries()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries (initdb, pg_ctl)")
    cluster = Cluster.start(bindir)
    try:
        print("| round: variant | events/s | client µs/event (cores) | server µs/event (cores) |")
        print("|---|---:|---:|---:|")
        for r in range(1, rounds + 1):
            s0 = server_cpu(cluster.data)
            seconds, client = await one_process(cluster.dsn, f"one{r}", 64, per)
            server = server_cpu(cluster.data) - s0
            print(line(f"{r}: 64 appenders, one process", 64 * per, seconds, client, server))
            s0 = server_cpu(cluster.data)
            seconds, client = await fleet(cluster.dsn, f"fleet{r}", 4, 16, per)
            server = server_cpu(cluster.data) - s0
            print(line(f"{r}: 4 x 16 fleet", 64 * per, seconds, client, server))
    finally:
        cluster.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per", type=int, default=150, help="events per appender")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.per))
