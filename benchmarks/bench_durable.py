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
  ``bench_ledger.py``'s table (item 2 of issue 16);
- floors, each in the same rounds: one writer-thread round trip with no SQL; the rows
  of a call through a hand-written writer thread (3 rows then 1; 4 in one commit); and
  the floor of a whole call (``CallFloor``): ``_floors.py``'s bookkeeping floor
  (the contract plus what ``run_spec`` must keep, no executor) on the same tool, its
  events chained and committed in the hand-written thread with the head's MAC and the
  mark (what the SQLite ledger promises before an append returns), one at a time and
  16 in flight through the least group commit. Each call is printed beside its floors.

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
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiosqlite
from _floors import BookkeepingFloor, Rows, Threaded, connect
from _harness import fmt_ns, fmt_pct, fmt_ratio, header, markdown_table, summarize

from agent_adapter import Executor, Registry
from agent_adapter.engine import CallContext
from agent_adapter.engine._spec import Durability
from agent_adapter.ledger import (
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallValidated,
    Event,
    SQLiteLedger,
)
from agent_adapter.ledger._sqlite_head import _UPDATE_HEAD
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
CALL_WA = "floor of a write-ahead call with its bookkeeping (CallFloor), one at a time"
CALL_OUTCOME = 'floor of an "outcome" call with its bookkeeping (CallFloor), one at a time'
CALL_SIXTEEN = "floor of 16 write-ahead calls in flight with their bookkeeping (per call)"
TARGETS = {WRITE_AHEAD: 2.5, OUTCOME: 1.3, SIXTEEN: 0.6}
_ids = itertools.count(1)


async def lookup(order_id: str, customer: str, amount: float) -> str:
    """A trivial read-only tool: what is measured is the machinery around it."""
    return "ok"


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


class CallFloor(BookkeepingFloor):
    """The floor of a whole durable call: ``_floors.py``'s bookkeeping floor (the
    contract plus what ``run_spec`` must keep per call, in one straight line, no
    executor) on the same tool and arguments as ours, its events committed through the
    hand-written writer thread, encoded and chained there.

    ``write-ahead``: two commits (3 events, then the outcome), each one round trip;
    ``outcome``: the four in one commit; ``grouped``: through ``Threaded.stage``, so
    that calls in flight together share commits (for the floor of 16 in flight).
    """

    def __init__(self, writer: Threaded, durability: Durability, grouped: bool = False) -> None:
        self.writer, self.durability, self.grouped = writer, durability, grouped
        self.pending: list[Event] = []
        super().__init__(lookup, RAW_ARGS)

    def reset(self, n: int) -> None:
        super().reset(n)
        self.append_now = self._commit

    def _commit(self, events: list[Event]) -> asyncio.Future[None] | None:
        if self.durability == "outcome" and not self.pending:
            self.pending = events  # the pre-body events wait for the outcome's commit
            return None
        events, self.pending = self.pending + events, []
        commit = self.writer.stage if self.grouped else self.writer.commit_events
        return commit(events)

    async def sixteen(self) -> None:
        await asyncio.gather(*(self.call() for _ in range(16)))


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
    floor_writer = Threaded(os.path.join(directory, "floor.db"), mark=True)
    call_wa = CallFloor(floor_writer, "write-ahead")
    call_outcome = CallFloor(floor_writer, "outcome")
    call_sixteen = CallFloor(floor_writer, "write-ahead", grouped=True)
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
        CALL_WA: (call_wa.call, n, 1),
        CALL_OUTCOME: (call_outcome.call, n, 1),
        CALL_SIXTEEN: (call_sixteen.sixteen, max(2, n // 8), 16),
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
        floor_writer.close()
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
    print("\nEach call beside its floors (medians of per-round ratios):\n")
    floor_rows = []
    for ours, rows_floor, call_floor in (
        (WRITE_AHEAD, THREADED_WA, CALL_WA),
        (OUTCOME, THREADED_OUTCOME, CALL_OUTCOME),
        (SIXTEEN, None, CALL_SIXTEEN),
    ):

        def over(floor: str, of: dict[str, list[float]], ours: str = ours) -> str:
            return fmt_ratio(
                statistics.median(a / b for a, b in zip(of[ours], of[floor], strict=True))
            )

        call_floor_ratio = statistics.median(
            a / b for a, b in zip(wall[call_floor], wall[BASE], strict=True)
        )
        target = TARGETS[ours]
        floor_rows.append(
            [
                ours,
                "" if rows_floor is None else over(rows_floor, wall),
                over(call_floor, wall),
                over(call_floor, cpu),
                f"{fmt_ratio(call_floor_ratio)} (target <= {target:g}: "
                f"{'under' if call_floor_ratio <= target else '**over**'})",
            ]
        )
    print(
        markdown_table(
            [
                "call",
                "ours / its rows' floor (wall)",
                "ours / its call floor (wall)",
                "ours / its call floor (CPU)",
                "its call floor / BASE (wall)",
            ],
            floor_rows,
        )
    )
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
