"""An earlier tree's core call beside this tree's, in one process: is a change faster?

Two runs of a benchmark disagree by more than most single optimisations buy on this
shared machine (spreads of 20-60% between processes), so a change is timed against the
tree it changes in the same process and the same rounds. The package of ``REV``
(``git archive``) and the working tree's are copied side by side under two names
(``aa_base``, ``aa_new``; every import inside the package is relative), and each one's
core call and contract floor (``bench_executor.py``'s, built from that package) are timed
in rotating order, thread CPU clock.

Printed: each tree's core and floor (median ns), core / floor paired per round, and
new / base for the core and for the floor (the floor's ratio shows how much of a
difference is the machine, not the change: ~1.00 when only the executor changed).

Run: ``python benchmarks/ab_core.py REV [--new REV2] [--rounds 15] [--ops 600]`` (REV: a
commit, e.g. ``HEAD~1``; ``--new``: time commit REV2 instead of the working tree).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import io
import itertools
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RAW = (
    '{"order_id":"ord_0001","customer":"cus_42","amount":99.5,'
    '"express":false,"note":"refund for a damaged parcel"}'
)
_ids = itertools.count(1)
Op = Callable[[], Awaitable[Any]]


async def lookup_order(
    order_id: str, customer: str, amount: float, express: bool, note: str
) -> str:
    """Look an order up (a trivial tool: the cost measured is the machinery around it)."""
    return "ok"


def _archive(rev: str, into: Path, name: str) -> None:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "agent_adapter"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into / rev.replace("/", "_"), filter="data")
    (into / rev.replace("/", "_") / "agent_adapter").rename(into / name)


def _copy_trees(rev: str, into: Path, new: str | None) -> None:
    _archive(rev, into, "aa_base")
    if new is not None:
        _archive(new, into, "aa_new")
        return
    shutil.copytree(
        ROOT / "agent_adapter", into / "aa_new", ignore=shutil.ignore_patterns("__pycache__")
    )


def _variants(name: str) -> tuple[Callable[[], Op], Callable[[], Op]]:
    """Factories of the core call and of the contract floor, on package ``name``."""
    engine = importlib.import_module(f"{name}.engine")
    ledger = importlib.import_module(f"{name}.ledger")
    events = importlib.import_module(f"{name}.ledger._events")
    registry = engine.Registry()
    spec = registry.tool(lookup_order)

    def core() -> Op:
        executor = engine.Executor(registry, ledger=ledger.MemoryLedger())
        executor._started = True  # nothing to replay

        async def call() -> Any:
            ctx = engine.CallContext(run_id="run-bench", call_id=f"c{next(_ids)}")
            return await executor.run_spec(spec, RAW, ctx)

        return call

    def floor() -> Op:
        store = ledger.MemoryLedger()
        now = time.time

        async def call() -> Any:
            args = spec.validate(RAW)
            call_digest = engine.digest(args)
            common = {"run_id": "run-bench", "call_id": f"c{next(_ids)}", "tool": spec.name}
            t0 = now()
            await store.append_many(
                [
                    events.CallRequested(ts=t0, args=RAW, **common),
                    events.CallValidated(ts=now(), digest=call_digest, **common),
                    events.CallStarted(ts=now(), digest=call_digest, **common),
                ]
            )
            result = await lookup_order(**args)
            done = now()
            await store.append_many(
                [
                    events.CallSucceeded(
                        ts=done, duration_ms=(done - t0) * 1000.0, result=result, **common
                    )
                ]
            )
            return result

        return call

    return core, floor


async def _block(op: Op, n: int) -> float:
    for _ in range(20):
        await op()
    gc.collect()
    start = time.thread_time_ns()
    for _ in range(n):
        await op()
    return (time.thread_time_ns() - start) / n


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the tree to compare against (a commit)")
    parser.add_argument("--new", help="a commit to time instead of the working tree")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--ops", type=int, default=600, help="calls per block")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ab_core-") as tmp:
        _copy_trees(args.rev, Path(tmp), args.new)
        sys.path.insert(0, tmp)
        factories: dict[str, Callable[[], Op]] = {}
        for name in ("aa_base", "aa_new"):
            factories[f"{name} core"], factories[f"{name} floor"] = _variants(name)
        samples: dict[str, list[float]] = {name: [] for name in factories}
        names = list(factories)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                samples[name].append(await _block(factories[name](), args.ops))

    def paired(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(samples[a], samples[b], strict=True))

    new = args.new or "the working tree"
    print(f"## {args.rev} (aa_base) beside {new} (aa_new): {args.rounds} rounds\n")
    print("| tree | core ns | floor ns | core / floor |")
    print("|---|---:|---:|---:|")
    for name in ("aa_base", "aa_new"):
        core, floor = f"{name} core", f"{name} floor"
        print(
            f"| {name} | {statistics.median(samples[core]):,.0f} | "
            f"{statistics.median(samples[floor]):,.0f} | {paired(core, floor):.3f} |"
        )
    print(
        f"\nnew / base: core {paired('aa_new core', 'aa_base core'):.3f}, "
        f"floor {paired('aa_new floor', 'aa_base floor'):.3f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
