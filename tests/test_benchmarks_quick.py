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

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("bench_*.py"))


def test_there_are_benchmarks() -> None:
    """The digest and executor benchmarks exist (the glob below is not silently empty)."""
    names = {p.name for p in SCRIPTS}
    assert {"bench_digest.py", "bench_executor.py"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_benchmark_runs_in_quick_mode(script: Path) -> None:
    """The script exits 0 in --quick mode and prints a table with a ratio column."""
    env = dict(os.environ, AGENT_ADAPTER_BENCH_NESTED="1")
    proc = subprocess.run(
        [sys.executable, str(script), "--quick"],
        cwd=BENCHMARKS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
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
    env = dict(os.environ, AGENT_ADAPTER_BENCH_NESTED="1")
    proc = subprocess.run(
        [sys.executable, "bench_executor.py", flag, "--quick"],
        cwd=BENCHMARKS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
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
