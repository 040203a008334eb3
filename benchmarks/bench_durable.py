"""The durable hot path: ``run_spec`` on ``SQLiteLedger(synchronous="FULL")`` beside raw commits.

Every variant is timed in the same rounds as its baseline (the order rotates per round),
wall clock and process CPU (``time.process_time_ns``: every thread, the writer's too)
per block:

- BASE: one raw ``sqlite3`` FULL commit (``BEGIN IMMEDIATE``, one INSERT of an encoded,
  chained event row into the ledger's schema, ``COMMIT``) from the loop's thread;
- ours: ``run_spec`` of a trivial read-only tool, one call at a time, with the default
  ``durability="write-ahead"`` (two commits per call) and with ``durability="outcome"``
  (one commit per call); and 16 calls in flight (``gather``), per call;
- the same executor configuration on ``aiosqlite`` as the writer's connection is in
  ``bench_ledger.py``'s table (item 2 of issue 16).

Targets (issue 16): write-ahead <= 2.5x one raw commit's wall time, process CPU per
call <= 4x the CPU of the two commits it needs; outcome <= 1.3x; 16 in flight <= 0.6x
per call.

Run: ``python benchmarks/bench_durable.py [--quick] [--rounds N] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import queue
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite
from _harness import fmt_ns, fmt_pct, fmt_ratio, header, markdown_table, summarize

from agent_adapter import Executor, Registry
from agent_adapter.engine import CallContext
from agent_adapter.engine._spec import Durability
from agent_adapter.ledger import (
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallValidated,
    SQLiteLedger,
)
from agent_adapter.ledger._chain import make_record
from agent_adapter.ledger._sqlite_files import _SCHEMA
from agent_adapter.ledger._sqlite_head import _PUT_HEAD, _UPDATE_HEAD
from agent_adapter.ledger._sqlite_threads import _INSERT

RAW_ARGS = '{"order_id":"ord_0001","customer":"cus_42","amount":99.5}'
BASE = "raw sqlite3 FULL commit, 1 row (BASE)"
WRITE_AHEAD = "run_spec, write-ahead (2 commits), one at a time"
OUTCOME = 'run_spec, durability="outcome" (1 commit), one at a time'
SIXTEEN = "run_spec, write-ahead, 16 in flight (per call)"
HOP = "floor: one writer-thread round trip, no SQL"
THREADED = "hand-written writer thread: our 5 statements per commit, 1 round trip"
AIO = "aiosqlite writer: our 5 statements per commit, 1 await each"
THREADED_WA = "floor of a write-ahead call: the hand-written thread, 3 rows then 1"
THREADED_OUTCOME = 'floor of an "outcome" call: the hand-written thread, 4 rows in 1 commit'
LEDGER_OUTCOME = 'SQLiteLedger.append_many of an "outcome" call\'s 4 events, no executor'
TARGETS = {WRITE_AHEAD: 2.5, OUTCOME: 1.3, SIXTEEN: 0.6}
_ids = itertools.count(1)


async def lookup(order_id: str, customer: str, amount: float) -> str:
    """A trivial read-only tool: what is measured is the machinery around it."""
    return "ok"


class Rows:
    """Chained rows shaped like the ledger's (a small ``call.requested`` each), numbered on."""

    def __init__(self) -> None:
        self.seq, self.prev = 0, ""

    def next(self) -> tuple[Any, ...]:
        self.seq += 1
        event = CallRequested(
            ts=time.time(), run_id="run-raw", call_id=f"c{self.seq}", tool="lookup", args={}
        )
        r = make_record(event, self.seq, self.prev)
        self.prev = r.hash
        return (r.seq, r.type, r.run_id, r.call_id, r.tool, r.ts, r.payload, r.prev, r.hash)


def connect(path: str, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """A raw connection on a new file with the ledger's schema, WAL + FULL."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.execute(_PUT_HEAD, (0, "", ""))
    return conn


def ledger_commit(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """The statements our writer runs per commit (tail known): BEGIN IMMEDIATE, PRAGMA
    data_version, the insert, the head update, COMMIT."""
    execute = conn.execute
    execute("BEGIN IMMEDIATE")
    execute("PRAGMA data_version").fetchone()
    conn.executemany(_INSERT, rows)
    last = rows[-1]
    execute(_UPDATE_HEAD, (last[0], last[8], last[8]))
    execute("COMMIT")


class Raw:
    """One raw FULL commit per op (BEGIN IMMEDIATE, one INSERT, COMMIT), from this thread."""

    def __init__(self, path: str) -> None:
        self.conn = connect(path)
        self.rows = Rows()

    async def commit(self) -> None:
        execute = self.conn.execute
        execute("BEGIN IMMEDIATE")
        execute(_INSERT, self.rows.next())
        execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class Threaded:
    """The best hand-written threaded writer: a thread owning the connection, one round
    trip per commit (``SimpleQueue.put``, then ``call_soon_threadsafe`` back), running
    the ledger's statements (or none: the round trip alone)."""

    def __init__(self, path: str | None) -> None:
        self.conn = connect(path, check_same_thread=False) if path is not None else None
        self.rows = Rows()
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            future, rows = item
            if self.conn is not None:
                ledger_commit(self.conn, rows)
            future.get_loop().call_soon_threadsafe(future.set_result, None)

    async def commit(self, count: int = 1) -> None:
        """One commit of ``count`` rows (each encoded and chained, as the ledger's)."""
        future = asyncio.get_running_loop().create_future()
        self.queue.put((future, [self.rows.next() for _ in range(count)]))
        await future

    async def write_ahead(self) -> None:
        """The rows of a write-ahead call: requested, validated and started in one
        commit, its outcome in a second."""
        await self.commit(3)
        await self.commit(1)

    async def outcome(self) -> None:
        """The four rows of an ``"outcome"`` call, in one commit."""
        await self.commit(4)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.conn is not None:
            self.conn.close()


class Aio:
    """aiosqlite as the writer's connection, the ledger's statements through its public
    API: one await (one thread round trip) per statement."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.rows = Rows()
        self.db: aiosqlite.Connection | None = None

    async def open(self) -> None:
        connect(self.path).close()  # the schema, as for the others
        self.db = await aiosqlite.connect(self.path, isolation_level=None)
        await self.db.execute("PRAGMA synchronous=FULL")

    async def commit(self) -> None:
        db = self.db
        assert db is not None
        row = self.rows.next()
        await db.execute("BEGIN IMMEDIATE")
        await db.execute_fetchall("PRAGMA data_version")
        await db.executemany(_INSERT, [row])
        await db.execute(_UPDATE_HEAD, (row[0], row[8], row[8]))
        await db.execute("COMMIT")

    async def close(self) -> None:
        if self.db is not None:
            await self.db.close()


class Appends:
    """The 4 events of an ``"outcome"`` call appended in one ``append_many`` with no
    executor: our group commit and writer alone, between the floor and the call."""

    def __init__(self, path: str) -> None:
        self.ledger = SQLiteLedger(path)

    async def outcome(self) -> None:
        now = time.time()
        ids = {"run_id": "run-bench", "call_id": f"a{next(_ids)}", "tool": "lookup"}
        digest = "0" * 64
        await self.ledger.append_many(
            [
                CallRequested(ts=now, args=RAW_ARGS, **ids),
                CallValidated(ts=now, digest=digest, **ids),
                CallStarted(ts=now, digest=digest, **ids),
                CallSucceeded(ts=now, duration_ms=0.1, result="ok", **ids),
            ]
        )


class Ours:
    """One executor on a SQLiteLedger (FULL) per durability, in a scratch directory."""

    def __init__(self, directory: str, durability: Durability) -> None:
        registry = Registry()
        self.spec = registry.tool(lookup, durability=durability)
        self.executor = Executor(
            registry, ledger=SQLiteLedger(os.path.join(directory, f"{durability}.db"))
        )

    async def one(self) -> None:
        ctx = CallContext(run_id="run-bench", call_id=f"c{next(_ids)}")
        await self.executor.run_spec(self.spec, RAW_ARGS, ctx)

    async def sixteen(self) -> None:
        await asyncio.gather(*(self.one() for _ in range(16)))


async def block(op: Callable[[], Awaitable[Any]], n: int) -> tuple[float, float]:
    """(wall ns, process CPU ns) per op over ``n`` awaited ops."""
    gc.collect()
    w0, c0 = time.perf_counter_ns(), time.process_time_ns()
    for _ in range(n):
        await op()
    return (time.perf_counter_ns() - w0) / n, (time.process_time_ns() - c0) / n


async def op_round(
    variants: dict[str, tuple[Callable[[], Awaitable[Any]], int, int]], order: list[str]
) -> dict[str, tuple[float, float]]:
    """One round interleaved op by op: op i of every variant (in ``order``) before op
    i + 1 of any, so that a disk whose fsync latency drifts by milliseconds within
    seconds (other processes' I/O) slows every variant alike. (wall, CPU) ns per op."""
    gc.collect()
    total = {name: [0, 0] for name in order}
    most = max(count for _, count, _ in variants.values())
    perf, cpu = time.perf_counter_ns, time.process_time_ns
    for i in range(most):
        for name in order:
            op, count, _ = variants[name]
            if i >= count:
                continue
            w0, c0 = perf(), cpu()
            await op()
            acc = total[name]
            acc[0] += perf() - w0
            acc[1] += cpu() - c0
    return {name: (w / variants[name][1], c / variants[name][1]) for name, (w, c) in total.items()}


async def main(args: argparse.Namespace) -> None:
    """Time every variant in rotating rounds and print the tables."""
    print(header())
    directory = tempfile.mkdtemp(prefix="bench-durable-", dir=args.dir)
    raw = Raw(os.path.join(directory, "raw.db"))
    wa, oc = Ours(directory, "write-ahead"), Ours(directory, "outcome")
    hop, threaded = Threaded(None), Threaded(os.path.join(directory, "threaded.db"))
    aio = Aio(os.path.join(directory, "aio.db"))
    appends = Appends(os.path.join(directory, "appends.db"))
    # ops per block (16 in flight: n gathers of 16 calls, reported per call)
    n = 20 if args.quick else 150
    variants: dict[str, tuple[Callable[[], Awaitable[Any]], int, int]] = {
        BASE: (raw.commit, n, 1),
        WRITE_AHEAD: (wa.one, n, 1),
        OUTCOME: (oc.one, n, 1),
        SIXTEEN: (wa.sixteen, max(2, n // 8), 16),
        HOP: (hop.commit, n, 1),
        THREADED: (threaded.commit, n, 1),
        AIO: (aio.commit, n, 1),
        THREADED_WA: (threaded.write_ahead, n, 1),
        THREADED_OUTCOME: (threaded.outcome, n, 1),
        LEDGER_OUTCOME: (appends.outcome, n, 1),
    }
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    try:
        await wa.executor.start()
        await oc.executor.start()
        await aio.open()
        for op, _, _ in variants.values():  # warm-up: files created, statements prepared
            await op()
        names = list(variants)
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            if args.interleave == "op":
                measured = await op_round(variants, order)
            else:
                measured = {name: await block(*variants[name][:2]) for name in order}
            for name, (w, c) in measured.items():
                per = variants[name][2]
                wall[name].append(w / per)
                cpu[name].append(c / per)
    finally:
        await wa.executor.close()
        await oc.executor.close()
        await aio.close()
        await appends.ledger.close()
        hop.close()
        threaded.close()
        raw.close()
        shutil.rmtree(directory, ignore_errors=True)
    rows = []
    for name in variants:
        w_med, w_spread = summarize(wall[name])
        c_med, _ = summarize(cpu[name])
        ratio = statistics.median(a / b for a, b in zip(wall[name], wall[BASE], strict=True))
        cpu_ratio = statistics.median(a / b for a, b in zip(cpu[name], cpu[BASE], strict=True))
        target = TARGETS.get(name)
        rows.append(
            [
                name,
                fmt_ns(w_med),
                fmt_pct(w_spread),
                fmt_ratio(ratio),
                fmt_ns(c_med),
                fmt_ratio(cpu_ratio),
                "" if target is None else f"<= {target:g}",
                "" if target is None else ("yes" if ratio <= target else "**no**"),
            ]
        )
    print(
        f"## Durable run_spec vs raw FULL commits ({args.rounds} rounds of {n} ops, "
        f"interleaved by {args.interleave})\n"
    )
    print(
        markdown_table(
            [
                "variant",
                "wall ns/op",
                "spread",
                "ratio (wall)",
                "process CPU ns/op",
                "ratio (CPU)",
                "target",
                "met",
            ],
            rows,
        )
    )
    wa_cpu = statistics.median(
        a / (2 * b) for a, b in zip(cpu[WRITE_AHEAD], cpu[BASE], strict=True)
    )
    print(
        f"\nWrite-ahead process CPU per call / the CPU of its 2 raw commits: "
        f"{fmt_ratio(wa_cpu)} (target <= 4: {'yes' if wa_cpu <= 4 else '**no**'}). "
        "Ratios are medians of per-round ratios; CPU is the whole process (writer thread "
        "included)."
    )
    for ours, floor in ((WRITE_AHEAD, THREADED_WA), (OUTCOME, THREADED_OUTCOME)):
        over = statistics.median(a / b for a, b in zip(wall[ours], wall[floor], strict=True))
        print(f"\n{ours} / its floor ({floor}), wall: {fmt_ratio(over)}")
    aio_ratio = statistics.median(a / b for a, b in zip(wall[AIO], wall[THREADED], strict=True))
    print(
        f"\naiosqlite / the hand-written writer thread, same statements, wall per commit: "
        f"{fmt_ratio(aio_ratio)} (issue 16, item 2: aiosqlite is used only within 1.1). "
        "The hand-written thread is how SQLiteLedger's writer hands a commit over."
    )


def parse() -> argparse.Namespace:
    """``--quick``, ``--rounds``, ``--dir`` (where the scratch files go)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--dir", default=None)
    parser.add_argument(
        "--interleave",
        choices=("op", "block"),
        default="op",
        help="op: every variant's i-th op before any (i+1)-th (default); block: a block "
        "of n ops per variant in turn",
    )
    args = parser.parse_args()
    if args.rounds is None:
        args.rounds = 3 if args.quick else 9
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
