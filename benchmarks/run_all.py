"""Run every ``benchmarks/bench_*.py`` in sequence and write one results table.

``bench_executor.py`` runs twice: as is, and with ``--floors`` (``ALSO``).

Each script runs in its own subprocess, one after the other (never in parallel: on a
2-core machine two benchmarks would time each other). Their markdown goes, under one
header with the machine, Python and package versions, into ``benchmarks/results/latest.md``
(gitignored), which is also printed. ``--quick`` is passed through to every script.

Run: ``python benchmarks/run_all.py [--quick] [--only NAME ...]`` (``make bench``).
Exits non-zero when any script fails; the other scripts still run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from _harness import header

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
# Scripts also run with these flags (each a run of its own): the rows issue 16's targets
# are read from.
ALSO = {"bench_executor.py": (("--floors",),)}


def scripts(only: list[str] | None = None) -> list[Path]:
    """The bench scripts, sorted by name (``only`` filters by a substring of the name)."""
    found = sorted(HERE.glob("bench_*.py"))
    if only:
        found = [p for p in found if any(o in p.stem for o in only)]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
    parser.add_argument("--only", nargs="*", help="run only scripts whose name contains these")
    args = parser.parse_args()

    env = dict(os.environ, AGENT_ADAPTER_BENCH_NESTED="1")
    parts = ["# agent-adapter benchmark results\n", header()]
    failed = []
    runs = [
        (script, flags)
        for script in scripts(args.only)
        for flags in ((), *ALSO.get(script.name, ()))
    ]
    for script, flags in runs:
        name = " ".join((script.name, *flags))
        cmd = [sys.executable, str(script), *flags] + (["--quick"] if args.quick else [])
        print(f"running {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE, check=False)
        took = time.perf_counter() - t0
        parts.append(f"\n# {name} ({took:.0f} s)\n")
        parts.append(proc.stdout.strip() + "\n")
        if proc.returncode != 0:
            failed.append(name)
            tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
            parts.append(f"\n**{name} failed (exit {proc.returncode}):**\n\n```\n{tail}\n```\n")
    text = "\n".join(parts)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / ("latest-quick.md" if args.quick else "latest.md")).write_text(text)
    print(text)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
