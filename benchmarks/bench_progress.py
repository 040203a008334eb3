"""Progress output (issue 30): ``ledger verify`` with stderr on a terminal vs not.

An SQLite ledger of ~200,000 events (20,000 with ``--quick``) of whole calls
(``bench_ledger.call_events``). Each round times, in a rotating order:

- BASE: ``agent-adapter ledger verify --db FILE`` as a subprocess, stderr ``/dev/null``
  (not a terminal: no progress, the code path of before);
- the same command with stderr on a pseudo-terminal (``pty``): the progress line is
  written (at once, then at most every 0.2 s) and erased;
- in-process ``SQLiteLedger.verify()`` (BASE 2) and ``verify(progress=...)`` reporting
  to a ``Progress`` on the pty: the cost of the counting wrapper alone, without the
  interpreter's start-up.

Figures are medians over rounds of wall-clock time and of CPU time (the subprocess's, or
this process's with the reader thread), and the median of the per-round ratios to the BASE
of their pair: on a shared machine the CPU ratio is the steadier one.

Run: ``python benchmarks/bench_progress.py [--quick] [--rounds N]``.
"""

from __future__ import annotations

import asyncio
import os
import pty
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from _harness import fmt_ratio, header, markdown_table, parse_args
from bench_ledger import append_calls

from agent_adapter.cli._progress import Progress
from agent_adapter.ledger import SQLiteLedger


async def _build(path: Path, target: int) -> int:
    async with SQLiteLedger(path, synchronous="NORMAL") as ledger:
        return await append_calls(ledger, target)


def _drain(fd: int) -> None:
    # The pty's reader: a terminal that nobody reads would block the writer when full.
    while True:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cli(db: Path, stderr: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one ``ledger verify`` subprocess."""
    command = [sys.executable, "-m", "agent_adapter.cli", "ledger", "verify", "--db", str(db)]
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL, check=False
    )
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.returncode
    return elapsed, _children_cpu() - cpu


def main() -> None:
    args = parse_args(__doc__ or "")
    target = 20_000 if args.quick else 200_000
    rounds = 2 if args.quick else min(args.rounds, 7)
    master, slave = pty.openpty()
    threading.Thread(target=_drain, args=(master,), daemon=True).start()
    terminal = os.fdopen(os.dup(slave), "w", encoding="utf-8", buffering=1)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "big.db"
        events = asyncio.run(_build(db, target))

        async def verify(progress: bool) -> tuple[float, float]:
            async with SQLiteLedger(db) as ledger:
                report = Progress("verify", terminal).update if progress else None
                # Process CPU time: the check runs in the ledger's reader thread.
                cpu, start = time.process_time(), time.perf_counter()
                result = await ledger.verify(progress=report)
                elapsed = time.perf_counter() - start
                cpu = time.process_time() - cpu
            assert result.ok, result
            return elapsed, cpu

        variants: dict[str, Callable[[], tuple[float, float]]] = {
            "CLI verify, stderr not a terminal (BASE)": lambda: _cli(db, subprocess.DEVNULL),
            "CLI verify, stderr a terminal (progress)": lambda: _cli(db, slave),
            "in-process verify() (BASE 2)": lambda: asyncio.run(verify(False)),
            "in-process verify(progress=...)": lambda: asyncio.run(verify(True)),
        }
        names = list(variants)
        samples: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                samples[name].append(variants[name]())
    terminal.close()
    os.close(slave)
    bases = {names[1]: names[0], names[3]: names[2]}
    rows = []
    for name in names:
        base = bases.get(name)
        row = [name]
        for i in (0, 1):  # wall, CPU
            mine = [t[i] for t in samples[name]]
            theirs = [t[i] for t in samples[base]] if base else mine
            ratio = statistics.median(a / b for a, b in zip(mine, theirs, strict=True))
            row += [f"{statistics.median(mine) * 1000:,.0f}", fmt_ratio(ratio)]
        rows.append(row)
    print(header())
    print(f"## Progress output: `ledger verify` of {events:,} events, {rounds} rounds\n")
    headers = ["variant", "wall ms", "wall ratio", "CPU ms", "CPU ratio"]
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    main()
