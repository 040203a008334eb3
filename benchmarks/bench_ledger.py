"""The durable ledger: appends per second and replay speed, beside raw sqlite3 in one run.

Appends (``synchronous=FULL``, WAL, a file in a temporary directory):

- BASE: raw ``sqlite3`` on a table with the ledger's schema and the same rows (payloads
  already encoded and chained), one row per ``BEGIN IMMEDIATE``/``COMMIT``, and batched
  (64 rows per transaction, ``executemany``);
- ours: ``SQLiteLedger.append`` from 1, 16 and 64 concurrent asyncio tasks (group commit:
  the events are encoded and hash-chained in the write transaction).

Targets: 64 appenders >= 100,000 events/s; a lone append within 2x of one raw FULL commit
(the paired per-round ratio of time per event); issue 16: 64 appenders >= 0.8x BASE 64.

Two floors beside them (issue 16), what the 64-appender figure cannot go below whatever
the store does, each timed in the same rounds:

- the wake-up floor: 64 asyncio tasks, each awaiting a future per "append" that a thread
  resolves once per batch (staged in one loop iteration, handed over by a
  ``SimpleQueue``, settled by one ``call_soon_threadsafe``), no SQL and no events;
- the chained raw floor: BASE 64 with each row's checked encoding and hash chaining done
  inside its timer (what a ledger must do per event and BASE 64 does before its timer);
- the group-commit floor: 64 tasks appending through the least group commit to the
  hand-written writer thread of ``_floors.py`` (the events chained there, our writer's
  statements, the head's MAC and the mark): our design with nothing else, the GIL and
  the thread hand-offs included, which the two floors above leave out.

Replay: ``await Executor.open(registry, ledger=SQLiteLedger(path))`` on a ledger of whole
calls (requested, validated, started, succeeded; a cached tool and an effect tool), beside
reading the same rows with raw ``sqlite3`` and decoding each payload in one thread.
Target: >= 200,000 events/s.

Every figure is the median over rounds (the variants' order rotates per round), with the
spread (inter-quartile range / median). fsync latency dominates the append figures and
varies a lot on shared machines: compare the ratios, which are paired per round.

PostgreSQL (``_bench_postgres``): ``PostgresLedger`` at 1, 16 and 64 appenders and a
fleet of 4 processes x 16, beside raw asyncpg (one row per transaction, and COPY of 64
rows per transaction), and executor calls/s on Postgres and SQLite FULL, on a throwaway
cluster the script starts (or ``$AGENT_ADAPTER_BENCH_POSTGRES_DSN``); skipped with a
note when no server can start.

Run: ``python benchmarks/bench_ledger.py [--quick] [--dir DIR] [--no-postgres]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import os
import queue
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _floors import Threaded
from _harness import fmt_pct, header, markdown_table, paired_ratio, summarize

from agent_adapter import Executor, Registry
from agent_adapter.ledger import (
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallValidated,
    EffectClaimed,
    Event,
    SQLiteLedger,
    decode_event,
)
from agent_adapter.ledger._chain import make_record
from agent_adapter.ledger._recordable import payload as checked_payload
from agent_adapter.ledger._sqlite_files import _SCHEMA
from agent_adapter.ledger._sqlite_threads import _INSERT

APPENDERS = (1, 16, 64)
BATCH = 64
GROUP_FLOOR = (
    "floor: 64 tasks through the least group commit to a hand-written writer thread"
    " (chained there, head MAC, mark)"
)


PREFIX = os.urandom(6).hex()


def event(run: int, call: int, i: int, random_ids: bool = False) -> CallRequested:
    """A typical ``call.requested`` (~170 bytes of payload).

    Ids are made the way the executor makes them (a process prefix and a counter), so
    concurrent runs' ids sit close together in the indexes; ``random_ids`` makes them
    random instead (like the SDK's call ids), which scatters every commit over the
    run_id and call_id indexes.
    """
    if random_ids:
        run_id, call_id = f"run_{os.urandom(8).hex()}", f"call_{os.urandom(12).hex()}"
    else:
        run_id, call_id = f"run_{PREFIX}{run:x}", f"call_{PREFIX}{call:x}"
    return CallRequested(
        ts=1_700_000_000.0 + i,
        run_id=run_id,
        call_id=call_id,
        tool="refund",
        args={"order_id": f"A{i}", "amount_cents": 500},
    )


def events_for(
    tag: int, concurrency: int, per: int, random_ids: bool = False
) -> list[list[CallRequested]]:
    """Fresh events for one block: ``per`` for each of ``concurrency`` appenders.

    Appender k is one run; its i-th call is numbered as if made at round i.
    """
    base = tag * 10_000_000
    return [
        [event(base + k, base + i * concurrency + k, i, random_ids) for i in range(per)]
        for k in range(concurrency)
    ]


def rows_for(tag: int, concurrency: int, per: int) -> list[tuple[Any, ...]]:
    """The same events as ``events_for``, in the order a group commit writes them, as rows
    (encoded and chained, seq renumbered by ``Raw``) for the raw baseline."""
    columns = events_for(tag, concurrency, per)
    rows, prev = [], ""
    for i in range(per):
        for k in range(concurrency):
            r = make_record(columns[k][i], len(rows) + 1, prev)
            rows.append(
                (r.seq, r.type, r.run_id, r.call_id, r.tool, r.ts, r.payload, r.prev, r.hash)
            )
            prev = r.hash
    return rows


class Raw:
    """Raw sqlite3 on the ledger's schema, WAL + FULL: the baseline."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        for statement in _SCHEMA:
            self.conn.execute(statement)
        self.seq = 0
        self.prev = ""

    def _renumber(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        out = [(self.seq + 1 + i, *row[1:]) for i, row in enumerate(rows)]
        self.seq += len(rows)
        return out

    def one_per_txn(self, rows: list[tuple[Any, ...]]) -> float:
        rows = self._renumber(rows)
        execute = self.conn.execute
        t0 = time.perf_counter()
        for row in rows:
            execute("BEGIN IMMEDIATE")
            execute(_INSERT, row)
            execute("COMMIT")
        return time.perf_counter() - t0

    def batched(self, rows: list[tuple[Any, ...]]) -> float:
        rows = self._renumber(rows)
        execute = self.conn.execute
        t0 = time.perf_counter()
        for start in range(0, len(rows), BATCH):
            execute("BEGIN IMMEDIATE")
            self.conn.executemany(_INSERT, rows[start : start + BATCH])
            execute("COMMIT")
        return time.perf_counter() - t0

    def batched_chained(self, columns: list[list[CallRequested]]) -> float:
        """``batched`` with the rows made inside the timer: the same events in the same
        order, each checked and encoded, then hash-chained (``make_record``'s work,
        without the Record), ``BATCH`` rows per transaction."""
        events = [e for row in zip(*columns, strict=True) for e in row]
        execute = self.conn.execute
        sha256 = hashlib.sha256
        seq, prev = self.seq, self.prev
        t0 = time.perf_counter()
        for start in range(0, len(events), BATCH):
            execute("BEGIN IMMEDIATE")
            rows = []
            for e in events[start : start + BATCH]:
                data = checked_payload(e)
                seq += 1
                digest = sha256(b"%d:%b:%b" % (seq, prev.encode(), data)).hexdigest()
                rows.append((seq, e.type, e.run_id, e.call_id, e.tool, e.ts, data, prev, digest))
                prev = digest
            self.conn.executemany(_INSERT, rows)
            execute("COMMIT")
        seconds = time.perf_counter() - t0
        self.seq, self.prev = seq, prev
        return seconds

    def close(self) -> None:
        self.conn.close()


class WakeFloor:
    """The wake-up floor: appends that only stage a future, which a thread settles once
    per batch, as the store's staging and writer do, with no SQL and no events."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[list[asyncio.Future[None]] | None] = queue.SimpleQueue()
        self.staged: list[asyncio.Future[None]] = []
        self.kicked = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.thread.start()

    def _serve(self) -> None:
        assert self.loop is not None
        while (batch := self.queue.get()) is not None:
            self.loop.call_soon_threadsafe(_settle, batch)

    def _kick(self) -> None:
        self.kicked = False
        staged, self.staged = self.staged, []
        self.queue.put(staged)

    async def append(self, item: object) -> object:
        assert self.loop is not None
        future = self.loop.create_future()
        self.staged.append(future)
        if not self.kicked:
            self.kicked = True
            self.loop.call_soon(self._kick)
        await future
        return item

    def stop(self) -> None:
        self.queue.put(None)
        self.thread.join()


class GroupFloor:
    """The floor of our design as a store: each append staged through the least group
    commit (``_floors.Threaded.stage``: what one loop iteration stages goes to the thread
    together) to the hand-written writer thread, which chains the events, runs our
    writer's five statements and moves the mark. No followers, no refusals, no error
    handling: what SQLiteLedger's appends cannot go below, GIL and hand-offs included."""

    def __init__(self, path: Path) -> None:
        self.writer = Threaded(str(path), mark=True)

    async def append(self, event: Event) -> Event:
        await self.writer.stage([event])
        return event

    def stop(self) -> None:
        self.writer.close()


def _settle(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


async def appenders(
    ledger: SQLiteLedger | WakeFloor | GroupFloor, columns: list[list[Any]]
) -> float:
    """Seconds for one task per column to append its events, each awaiting its own commit."""

    async def one(events: list[Any]) -> None:
        for e in events:
            await ledger.append(e)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(events) for events in columns))
    return time.perf_counter() - t0


async def rounds_of(
    variants: dict[str, tuple[int, Callable[[], Awaitable[float]]]], rounds: int
) -> dict[str, list[float]]:
    """Per variant: events/s per round; the order rotates by one each round."""
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            count, block = variants[name]
            gc.collect()
            seconds = await block()
            samples[name].append(count / seconds)
    return samples


async def bench_appends(tmp: Path, quick: bool, rounds: int) -> str:
    per = {1: 60 if quick else 400, 16: 100 if quick else 600, 64: 50 if quick else 400}
    raw1, rawb = Raw(tmp / "raw1.db"), Raw(tmp / "rawb.db")
    rawc = Raw(tmp / "rawc.db")
    wake = WakeFloor()
    wake.start()
    group = GroupFloor(tmp / "group-floor.db")
    ledgers = {c: SQLiteLedger(tmp / f"ledger{c}.db") for c in APPENDERS}
    normal = SQLiteLedger(tmp / "normal.db", synchronous="NORMAL")
    scattered = SQLiteLedger(tmp / "scattered.db")
    for ledger in (*ledgers.values(), normal, scattered):
        await ledger.open()
    tags = iter(range(1, 10**6))

    # Inputs are built before each block and not timed: rows for raw, events for ours.
    async def raw_one() -> float:
        return raw1.one_per_txn(rows_for(next(tags), 1, per[1]))

    async def raw_batched() -> float:
        return rawb.batched(rows_for(next(tags), BATCH, per[64]))

    async def raw_chained() -> float:
        return rawc.batched_chained(events_for(next(tags), BATCH, per[64]))

    def ours(ledger: SQLiteLedger | GroupFloor, c: int) -> Callable[[], Awaitable[float]]:
        return lambda: appenders(ledger, events_for(next(tags), c, per[c]))

    variants: dict[str, tuple[int, Callable[[], Awaitable[float]]]] = {
        "raw sqlite3, 1 row per transaction (BASE 1)": (per[1], raw_one),
        f"raw sqlite3, {BATCH} rows per transaction (BASE {BATCH})": (
            BATCH * per[64],
            raw_batched,
        ),
    }
    for c in APPENDERS:
        variants[f"SQLiteLedger.append, {c} concurrent appender{'s' if c > 1 else ''}"] = (
            c * per[c],
            ours(ledgers[c], c),
        )
    variants["SQLiteLedger.append, 64 appenders, NORMAL (not power-cut safe)"] = (
        64 * per[64],
        ours(normal, 64),
    )
    variants["SQLiteLedger.append, 64 appenders, random ids (scattered indexes)"] = (
        64 * per[64],
        lambda: appenders(scattered, events_for(next(tags), 64, per[64], random_ids=True)),
    )
    variants[
        f"floor: raw sqlite3, {BATCH} rows per transaction, encoded and chained in the timer"
    ] = (
        BATCH * per[64],
        raw_chained,
    )
    variants["floor: 64 tasks awaiting a future a thread settles per batch, no SQL"] = (
        64 * per[64],
        lambda: appenders(wake, [list(range(per[64]))] * 64),
    )
    variants[GROUP_FLOOR] = (64 * per[64], ours(group, 64))
    try:
        # One untimed warm-up round (files created, pages cached), then the rounds.
        await rounds_of(variants, 1)
        samples = await rounds_of(variants, rounds)
    finally:
        raw1.close()
        rawb.close()
        rawc.close()
        wake.stop()
        group.stop()
        for ledger in (*ledgers.values(), normal, scattered):
            await ledger.close()

    names = list(variants)
    base1, baseb = samples[names[0]], samples[names[1]]
    targets = {names[4]: ">= 100,000/s"}
    rows = []
    for name in names:
        med, spread = summarize(samples[name])
        if name == names[0]:
            ratio = "1 (BASE 1)"
        elif name == names[1]:
            ratio = f"{paired_ratio(samples[name], base1):.2f} x BASE 1"
        elif name == names[2]:
            ratio = f"{paired_ratio(samples[name], base1):.2f} x BASE 1"
        else:
            ratio = f"{paired_ratio(samples[name], baseb):.2f} x BASE {BATCH}"
        target = targets.get(name, "")
        met = "" if not target else ("yes" if med >= 100_000 else "**no**")
        rows.append([name, f"{med:,.0f}", fmt_pct(spread), f"{1e6 / med:,.1f}", ratio, target, met])
    lone = paired_ratio(base1, samples[names[2]])  # time per event: ours / raw
    rows.append(
        [
            "lone append latency / one raw FULL commit (paired)",
            "",
            "",
            "",
            f"{lone:.2f}",
            "<= 2",
            "yes" if lone <= 2 else "**no**",
        ]
    )
    ours64 = paired_ratio(samples[names[4]], baseb)
    rows.append(
        [
            f"64 appenders / BASE {BATCH} (paired; issue 16)",
            "",
            "",
            "",
            f"{ours64:.2f}",
            ">= 0.8",
            "yes" if ours64 >= 0.8 else "**no**",
        ]
    )
    # The two floors' times per event added, as a rate beside BASE 64 in each round: no
    # store that chains in a writer thread and wakes one future per append does better.
    floors = [
        1 / (1 / chained + 1 / woken) / base
        for chained, woken, base in zip(samples[names[7]], samples[names[8]], baseb, strict=True)
    ]
    rows.append(
        [
            "the two floors added (chained raw + wake-up, per event) / BASE 64 (paired)",
            "",
            "",
            "",
            f"{statistics.median(floors):.2f}",
            "",
            "",
        ]
    )
    rows.append(
        [
            "64 appenders / the group-commit floor (paired)",
            "",
            "",
            "",
            f"{paired_ratio(samples[names[4]], samples[GROUP_FLOOR]):.2f}",
            "",
            "",
        ]
    )
    table = markdown_table(
        ["variant", "events/s (median)", "spread", "µs/event", "ratio", "target", "met"], rows
    )
    return "## Appends, synchronous=FULL (events/s; ratio = ours / BASE)\n\n" + table + "\n"


def build_registry() -> Registry:
    registry = Registry()

    @registry.tool(cache=60)
    async def lookup(q: str) -> str:
        """A cached read."""
        return q

    @registry.tool(effect="charge:{order_id}")
    async def charge(order_id: str) -> str:
        """An effect."""
        return order_id

    return registry


def call_events(i: int) -> list[Event]:
    """The four events of one finished call; every other call claims an effect key."""
    run_id, call_id = f"run_{i // 8:05x}", f"call_{i:06x}"
    digest = f"{i:064x}"
    effect = i % 2 == 1
    tool = "charge" if effect else "lookup"
    args = {"order_id": f"A{i}"} if effect else {"q": f"q{i}"}
    ids: dict[str, Any] = {"ts": 1_700_000_000.0 + i, "run_id": run_id, "call_id": call_id}
    events: list[Event] = [
        CallRequested(tool=tool, args=args, **ids),
        CallValidated(tool=tool, digest=digest, **ids),
    ]
    if effect:
        events.append(EffectClaimed(tool=tool, key=f"charge:A{i}", digest=digest, **ids))
    events += [
        CallStarted(tool=tool, digest=digest, effect_key=f"charge:A{i}" if effect else "", **ids),
        CallSucceeded(tool=tool, duration_ms=1.5, result=f"result-{i}", **ids),
    ]
    return events


async def append_calls(ledger: Any, target: int) -> int:
    """Whole calls (``call_events``) appended to ``ledger`` in batches of ~5,000 events
    until it holds ``target`` or a few more; how many were appended."""
    count, i = 0, 0
    while count < target:
        batch: list[Event] = []
        while len(batch) < 5_000 and count + len(batch) < target:
            batch += call_events(i)
            i += 1
        count += len(await ledger.append_many(batch))
    return count


async def bench_replay(tmp: Path, quick: bool, rounds: int) -> str:
    path = tmp / "replay.db"
    target_events = 20_000 if quick else 200_000
    count = 0
    async with SQLiteLedger(path, synchronous="NORMAL") as ledger:
        batch: list[Event] = []
        i = 0
        while count < target_events:
            batch += call_events(i)
            i += 1
            if len(batch) >= 5_000:
                count += len(await ledger.append_many(batch))
                batch = []
        if batch:
            count += len(await ledger.append_many(batch))
    registry = build_registry()

    async def raw_select() -> float:
        conn = sqlite3.connect(path)
        t0 = time.perf_counter()
        n = 0
        for _row in conn.execute("SELECT seq, prev, hash, payload FROM events ORDER BY seq"):
            n += 1
        seconds = time.perf_counter() - t0
        conn.close()
        assert n == count
        return seconds

    async def raw_decode() -> float:
        conn = sqlite3.connect(path)
        t0 = time.perf_counter()
        for seq, prev, hash_, payload in conn.execute(
            "SELECT seq, prev, hash, payload FROM events ORDER BY seq"
        ):
            e = decode_event(payload)
            e.seq, e.prev, e.hash = seq, prev, hash_
        seconds = time.perf_counter() - t0
        conn.close()
        return seconds

    async def executor_open() -> float:
        t0 = time.perf_counter()
        executor = await Executor.open(registry, ledger=SQLiteLedger(path))
        seconds = time.perf_counter() - t0
        assert len(executor.state.outcomes) == i
        await executor.close()
        return seconds

    variants: dict[str, tuple[int, Callable[[], Awaitable[float]]]] = {
        "raw sqlite3 SELECT, rows only": (count, raw_select),
        "raw sqlite3 SELECT + decode_event, one thread (BASE)": (count, raw_decode),
        "await Executor.open(ledger=SQLiteLedger(path)): replay": (count, executor_open),
    }
    await rounds_of(variants, 1)
    samples = await rounds_of(variants, rounds)
    names = list(variants)
    base = samples[names[1]]
    rows = []
    for name in names:
        med, spread = summarize(samples[name])
        ratio = f"{paired_ratio(samples[name], base):.2f}"
        target = ">= 200,000/s" if name == names[2] else ""
        met = "" if not target else ("yes" if med >= 200_000 else "**no**")
        rows.append([name, f"{med:,.0f}", fmt_pct(spread), ratio, target, met])
    table = markdown_table(
        ["variant", "events/s (median)", "spread", "ratio (x BASE)", "target", "met"], rows
    )
    return (
        f"## Replay: rebuilding an executor from {count:,} events ({i:,} calls)\n\n" + table + "\n"
    )


CALLS_PER_RUN = 30


async def bench_call_reads(tmp: Path, quick: bool, rounds: int) -> str:
    """``read(run_id=, call_id=)``, a repeated call's step 0 and a retried Temporal
    activity's first read, on a ledger whose call ids repeat across runs (c0-c29 in every run, as a
    workflow numbers its calls): through the (call_id, run_id) index beside a file from
    before it (the call_id index alone: BASE) and raw sqlite3 through the new index."""
    runs = 130 if quick else 1_300
    events: list[Event] = []
    for run in range(runs):
        for call in range(CALLS_PER_RUN):
            ids: dict[str, Any] = {"ts": 1.0, "run_id": f"run-{run}", "call_id": f"c{call}"}
            events += [
                CallRequested(tool="lookup", args={"q": call}, **ids),
                CallValidated(tool="lookup", digest=f"{call:064x}", **ids),
                CallSucceeded(tool="lookup", duration_ms=1.0, result="ok", **ids),
            ]
    new, old = tmp / "calls.db", tmp / "calls-before.db"
    for path in (new, old):
        async with SQLiteLedger(path, synchronous="NORMAL") as ledger:
            for start in range(0, len(events), 5_000):
                # The same objects in both files: an append re-chains what it is given.
                await ledger.append_many(events[start : start + 5_000])
    conn = sqlite3.connect(old, isolation_level=None)
    conn.execute("CREATE INDEX events_call_id ON events (call_id)")
    conn.execute("DROP INDEX events_call_run")
    conn.close()
    reads = 50 if quick else 200
    wanted = [(f"run-{(i * 37) % runs}", f"c{(i * 7) % CALLS_PER_RUN}") for i in range(reads)]

    def through(ledger: SQLiteLedger) -> Callable[[], Awaitable[float]]:
        async def block() -> float:
            t0 = time.perf_counter()
            for run_id, call_id in wanted:
                got = [e async for e in ledger.read(run_id=run_id, call_id=call_id)]
                assert len(got) == 3 and got[0].call_id == call_id
            return time.perf_counter() - t0

        return block

    raw_conn = sqlite3.connect(new)

    async def raw() -> float:
        t0 = time.perf_counter()
        for run_id, call_id in wanted:
            rows = raw_conn.execute(
                "SELECT seq, prev, hash, payload FROM events WHERE seq > ? AND run_id = ? "
                "AND call_id = ? ORDER BY seq LIMIT 500",
                (0, run_id, call_id),
            ).fetchall()
            for seq, prev, hash_, payload in rows:
                e = decode_event(payload)
                e.seq, e.prev, e.hash = seq, prev, hash_
            assert len(rows) == 3
        return time.perf_counter() - t0

    async with (
        SQLiteLedger(new, readonly=True) as ours,
        SQLiteLedger(old, readonly=True) as before,
    ):
        variants: dict[str, tuple[int, Callable[[], Awaitable[float]]]] = {
            "a file from before: the call_id index alone (BASE)": (reads, through(before)),
            "ours: the (call_id, run_id) index": (reads, through(ours)),
            "raw sqlite3 SELECT + decode_event, the same index, one thread": (reads, raw),
        }
        await rounds_of(variants, 1)
        samples = await rounds_of(variants, rounds)
    raw_conn.close()
    base = samples[next(iter(variants))]
    rows = []
    for name in variants:
        med, spread = summarize(samples[name])
        rows.append(
            [
                name,
                f"{med:,.0f}",
                fmt_pct(spread),
                f"{1e6 / med:,.0f}",
                f"{paired_ratio(samples[name], base):.2f}",
            ]
        )
    table = markdown_table(
        ["variant", "reads/s (median)", "spread", "µs/read", "ratio (x BASE)"], rows
    )
    return (
        f"## Reads of one call of one run: {len(events):,} events, {runs:,} runs of "
        f"{CALLS_PER_RUN} calls whose ids repeat in every run\n\n" + table + "\n"
    )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-ledger-", dir=args.dir) as name:
        tmp = Path(name)
        print(header(packages=("agent-adapter", "msgspec")), end="")
        print(f"- SQLite {sqlite3.sqlite_version}; files in {tmp}")
        print(f"- rounds: {args.rounds}{' (quick)' if args.quick else ''}\n")
        print(await bench_appends(tmp, args.quick, args.rounds))
        print(await bench_replay(tmp, args.quick, args.rounds))
        print(await bench_call_reads(tmp, args.quick, args.rounds))
        if not args.no_postgres:
            from _bench_postgres import bench_postgres

            print(await bench_postgres(tmp, args.quick, args.rounds))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run that finishes in seconds")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 7, quick 3)")
    parser.add_argument("--dir", default=None, help="where to put the files (default: tempdir)")
    parser.add_argument(
        "--no-postgres", action="store_true", help="skip the PostgreSQL rows (_bench_postgres)"
    )
    args = parser.parse_args()
    if args.rounds is None:
        args.rounds = 3 if args.quick else 7
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
    sys.exit(0)
