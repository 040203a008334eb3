"""Every benchmark script still runs: each ``benchmarks/bench_*.py`` in ``--quick`` mode.

No timing is asserted (the machines are noisy); only that each script exits 0 and prints
a markdown table with a ratio column, so the benchmarks cannot rot.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _pg_fixtures import _unavailable

from agent_adapter.testing.postgres import binaries

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("bench_*.py"))


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in benchmarks/ (nested: no scratch files outside the test's own)."""
    env = dict(os.environ, AGENT_ADAPTER_BENCH_NESTED="1")
    return subprocess.run(
        [sys.executable, *args],
        cwd=BENCHMARKS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_there_are_benchmarks() -> None:
    """The digest and executor benchmarks exist (the glob below is not silently empty)."""
    names = {p.name for p in SCRIPTS}
    assert {"bench_digest.py", "bench_executor.py"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_benchmark_runs_in_quick_mode(script: Path) -> None:
    """The script exits 0 in --quick mode and prints a table with a ratio column."""
    proc = run_bench(str(script), "--quick")
    assert proc.returncode == 0, proc.stderr[-3000:]
    header_lines = [
        line for line in proc.stdout.splitlines() if line.startswith("|") and "ratio" in line
    ]
    assert header_lines, f"no markdown table with a ratio column in:\n{proc.stdout[-2000:]}"


@pytest.mark.parametrize(
    ("flag", "row"),
    [
        ("--floors", "core / bookkeeping floor"),
        ("--bookkeeping", "without the projection's four handlers"),
    ],
)
def test_the_executor_floors_run(flag: str, row: str) -> None:
    """``bench_executor.py --floors`` and ``--bookkeeping`` (issue 16's item 4) still run
    and print the rows the benchmarks README quotes."""
    proc = run_bench("bench_executor.py", flag, "--quick")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert row in proc.stdout, proc.stdout[-2000:]


def test_ab_core_compares_a_commit_with_the_working_tree() -> None:
    """``ab_core.py REV`` imports REV's package beside the working tree's and prints both."""
    proc = subprocess.run(
        [sys.executable, "ab_core.py", "HEAD", "--rounds", "2", "--ops", "20"],
        cwd=BENCHMARKS,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| aa_base |" in proc.stdout and "| aa_new |" in proc.stdout, proc.stdout
    assert "new / base: core" in proc.stdout, proc.stdout


def test_the_durable_call_floor_writes_a_ledger_that_verifies(tmp_path: Path) -> None:
    """``bench_durable.py``'s floor of a whole call does the work it stands for: its
    commits (through the hand-written thread, with the mark) leave a ledger that our
    SQLiteLedger opens and verifies, events, head and mark, for every kind of floor call."""
    script = f"""
import asyncio, sys
sys.path.insert(0, {str(BENCHMARKS)!r})
import bench_durable as bd
from agent_adapter.ledger import SQLiteLedger

async def main():
    path = {str(tmp_path / "floor.db")!r}
    writer = bd.Threaded(path, mark=True)
    try:
        kinds = (("write-ahead", False), ("outcome", False), ("write-ahead", True))
        for durability, grouped in kinds:
            floor = bd.CallFloor(writer, durability, grouped=grouped)
            assert await floor.call() == "ok"
            await floor.sixteen() if grouped else await floor.call()
    finally:
        writer.close()
    async with SQLiteLedger(path, readonly=True) as ledger:
        print(await ledger.verify())
        print(sorted({{e.type async for e in ledger.read()}}))

asyncio.run(main())
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 2 + 2 + 17 calls of 4 events each: write-ahead, "outcome", then 1 + 16 grouped.
    assert "Verification(ok=True, checked=84" in proc.stdout, proc.stdout
    assert "'call.started', 'call.succeeded'" in proc.stdout, proc.stdout
    assert (tmp_path / "floor.db-mark").read_bytes().split()[2] == b"84"


def test_bench_durable_prints_each_calls_floors() -> None:
    """The rows of ``bench_durable.py`` that the benchmarks README quotes."""
    proc = run_bench("bench_durable.py", "--quick", "--rounds", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ours / its call floor (wall)" in proc.stdout, proc.stdout[-2000:]
    for row in ("write-ahead call with its bookkeeping", "16 write-ahead calls in flight"):
        assert row in proc.stdout, proc.stdout[-2000:]


def test_pg_cpu_split_prints_every_variant() -> None:
    """``pg_cpu_split.py`` (issue 29's fleet, shard and raw rows in the benchmarks README)
    still runs, on a throwaway cluster of its own, and prints every variant with both
    ratios and its CPU; each baseline is 1.00 against itself."""
    if binaries() is None:
        _unavailable("no initdb/pg_ctl found (set PG_BIN, or install PostgreSQL)")
    proc = run_bench("pg_cpu_split.py", "--rounds", "1", "--per", "5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cells = {}
    for variant in (
        "64 appenders, one process",
        "4 x 16 fleet, one ledger",
        "4 x 16 fleet, 4 ledgers by run",
        "4 x 16 fleet, a ledger each",
        "256 appenders, one process",
        "4 x 64 fleet, one ledger",
        "4 x 64 fleet, 4 ledgers by run",
        "4 x 64 fleet, a ledger each",
        "raw: 1 x 64-row COPY",
        "raw: 4 x 16-row COPY",
        "raw: 4 x 64-row COPY",
    ):
        rows = [line for line in proc.stdout.splitlines() if line.startswith(f"| 1: {variant} |")]
        assert len(rows) == 1, proc.stdout
        # name, events/s, x 64 appenders, x raw, client µs/event (cores), server's
        cells[variant] = [c.strip() for c in rows[0].split("|")[1:-1]]
        assert len(cells[variant]) == 6, rows[0]
    assert cells["64 appenders, one process"][2] == "1.00", proc.stdout
    assert cells["raw: 1 x 64-row COPY"][3] == "1.00", proc.stdout
