"""What checking the SQLite ledger's indexes costs: verify, open, and a cold run's recall.

One SQLite ledger (``synchronous=NORMAL``, built once, not timed) of ``RUNS`` runs of
``CALLS`` calls each (four events per call). Times, each the median of ``--rounds``:

- ``verify()``: the chain, the head, the mark and (since issue 27) the comparison of the
  run_id and (call_id, run_id) indexes with the table; ``index scans alone``: the two
  covering index scans that comparison adds, on a plain connection (its share);
- ``read()`` of every event: the baseline the verify ratio is given against;
- ``open + close`` of the ledger, and ``Executor.start`` on it (replays every event;
  ``remember`` small, so nearly every run goes cold);
- ``repeat of a cold run's call``: a finished call of a cold run asked again (the recall
  of its run by the run_id index, with the check that it holds as many finished calls as
  the run had, then the replay), one run per sample; ``repeat of a warm run's call``: the
  same without the recall (its baseline).

Times are the process's CPU time (``time.process_time``: every thread, the ledger's
reader and writer included), so that a loaded shared machine's preemption stays out;
every part here is CPU-bound (the file is in the page cache).

Run the same script on a checkout without the change for the before figures (the script
uses only public names). Run: ``python benchmarks/bench_index.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _harness import fmt_ratio, header, markdown_table, parse_args

from agent_adapter import Executor, Registry
from agent_adapter.ledger import SQLiteLedger

RUNS, CALLS = 1_000, 25
SCANS = (
    "SELECT run_id, seq FROM events INDEXED BY events_run_id",
    "SELECT call_id, run_id, seq FROM events INDEXED BY events_call_run",
)


def _registry() -> Registry:
    registry = Registry()

    @registry.tool
    async def echo(x: int) -> int:
        """Echo."""
        return x

    return registry


async def _build(path: Path, runs: int) -> None:
    async with Executor(_registry(), ledger=SQLiteLedger(path, synchronous="NORMAL")) as ex:
        for r in range(runs):
            await asyncio.gather(
                *(
                    ex.call("echo", {"x": c}, run_id=f"run{r}", call_id=f"c{c}")
                    for c in range(CALLS)
                )
            )


async def _timed(op: Callable[[], Awaitable[Any]], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        started = time.process_time()
        await op()
        samples.append(time.process_time() - started)
    return statistics.median(samples)


def _scans(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        for scan in SCANS:
            sum(map(hash, conn.execute(scan)))
    finally:
        conn.close()


async def main() -> None:
    args = parse_args(__doc__ or "")
    runs = 20 if args.quick else RUNS
    rounds = 3 if args.quick else 7
    print(header())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "l.db"
        await _build(path, runs)
        rows: list[tuple[str, str, str]] = []
        async with SQLiteLedger(path) as ledger:

            async def read_all() -> None:
                async for _ in ledger.read():
                    pass

            read_s = await _timed(read_all, rounds)
            verify_s = await _timed(ledger.verify, rounds)
            found = await ledger.verify()
            assert found.ok, found

        async def scans() -> None:
            _scans(path)

        scans_s = await _timed(scans, rounds)

        async def open_close() -> None:
            async with SQLiteLedger(path):
                pass

        open_s = await _timed(open_close, rounds)

        async def start() -> None:
            async with Executor(_registry(), ledger=SQLiteLedger(path), remember=CALLS):
                pass

        start_s = await _timed(start, max(1, rounds // 2))
        async with Executor(_registry(), ledger=SQLiteLedger(path), remember=CALLS) as ex:
            last = f"run{runs - 1}"
            assert f"run{runs - 2}" in ex.state.cold and last not in ex.state.cold
            warm = []
            for _ in range(rounds * 3):
                started = time.process_time()
                await ex.call("echo", {"x": 1}, run_id=last, call_id="c1")
                warm.append(time.process_time() - started)
            cold = []
            for r in range(rounds * 3):
                started = time.process_time()
                await ex.call("echo", {"x": 1}, run_id=f"run{r}", call_id="c1")
                cold.append(time.process_time() - started)
        warm_s, cold_s = statistics.median(warm), statistics.median(cold)
        events = runs * CALLS * 4
        for name, value, base in (
            ("read() of every event (baseline)", read_s, read_s),
            ("verify()", verify_s, read_s),
            ("index scans alone (verify's index check)", scans_s, read_s),
            ("open + close", open_s, read_s),
            (f"Executor.start (replay, remember={CALLS})", start_s, read_s),
            ("repeat of a warm run's call (baseline)", warm_s, warm_s),
            ("repeat of a cold run's call (recall + replay)", cold_s, warm_s),
        ):
            rows.append((name, f"{value * 1000:,.2f}", fmt_ratio(value / base)))
    print(
        f"### The indexes' check: {events:,} events, {runs:,} runs of {CALLS} calls "
        f"(median of {rounds}; repeats: of {rounds * 3}; process CPU time)\n"
    )
    print(markdown_table(("what", "CPU ms", "ratio to its baseline"), rows))


if __name__ == "__main__":
    asyncio.run(main())
