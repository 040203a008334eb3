"""The shared benchmark harness: paired rounds, calibrated blocks, ratios in one process run.

Method (the one in ``notes/perf-floors.md``):

- every variant runs its operation ``n`` times in one block; ``n`` is calibrated per
  variant so that a block takes about ``block_ms`` (35 ms; 5 ms in ``--quick``);
- one round times every variant once; the order rotates by one position per round, so
  no variant always runs first (or right after the same neighbour);
- ``gc.collect()`` runs before each block and GC stays enabled while timing;
- reported: **median** ns per op over rounds; **spread** = inter-quartile range across
  rounds / median; **ratio** = median of the per-round ratios variant / baseline, both
  timed in the same round. Ratios are what to compare across machines and runs.

Async variants are timed inside one running event loop (``await op()`` in a loop), so
the loop start-up cost is never part of an op.

API (kept small and stable; other bench scripts import it):

``parse_args(description, argv=None) -> argparse.Namespace``
    Standard flags: ``--quick`` (a smoke run that finishes in seconds), ``--rounds N``,
    ``--block-ms MS``, ``--clock wall|cpu``. ``args.rounds`` and ``args.block_ms`` are
    filled in (quick or not); ``args.clock`` is None unless given.
``Variant(name, op, n=None, setup=None)``
    ``op`` is a zero-argument callable (sync benches) or a zero-argument coroutine
    function (async benches). ``n`` fixes the ops per block instead of calibrating.
    ``setup(n)``, when given, is called (sync, untimed) before every block of ``n`` ops,
    calibration blocks included: fresh state per block (a new ledger, a model scripted
    for ``n`` runs) so that state grown by earlier blocks never slows later ones.
``bench(variants, *, baseline=None, rounds, block_ms, clock="wall") -> dict[str, Result]``
``await abench(variants, *, baseline=None, rounds, block_ms, clock="wall") -> dict[...]``
    Run the rounds. ``baseline`` names the variant that ratios are taken against (the
    first variant when None). The dict keeps the variants' order. ``clock="cpu"`` times
    blocks with this thread's CPU time (``time.thread_time_ns``), so time the process
    spends preempted by other processes on a shared machine is not counted; use it only
    for CPU-bound work done in the calling thread (never for I/O, fsync or thread hops).
``Result``: ``name``, ``samples`` (ns/op per round, in round order), ``median_ns``,
    ``spread``, ``ratio`` (None for no baseline), ``n``.
``summarize(samples) -> (median, spread)`` and ``paired_ratio(samples, base_samples)``
    for derived per-round figures (e.g. a marginal cost ``(T(N) - T(0)) / N``).
``results_table(results, *, title=None, target=None) -> str``
    The standard markdown table: variant | median | spread | ratio (| target).
``markdown_table(headers, rows) -> str``
    Any markdown table (first column left-aligned, the rest right-aligned).
``fmt_ns(ns)``, ``fmt_ratio(r)``, ``fmt_pct(fraction)``: the number formats used.
``header(packages=...) -> str``
    Machine, CPU, load, Python, OpenSSL, package versions and git commit as markdown. It
    returns "" when ``AGENT_ADAPTER_BENCH_NESTED=1`` (``run_all.py`` prints it once).

Scripts print markdown to stdout (``print(header())`` first, then one ``## section``
per table); ``run_all.py`` concatenates those outputs into ``results/latest.md``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import os
import platform
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Result",
    "Variant",
    "abench",
    "bench",
    "fmt_ns",
    "fmt_pct",
    "fmt_ratio",
    "header",
    "markdown_table",
    "paired_ratio",
    "parse_args",
    "results_table",
    "summarize",
]

FULL_ROUNDS = 15
FULL_BLOCK_MS = 35.0
QUICK_ROUNDS = 3
QUICK_BLOCK_MS = 5.0
DEFAULT_PACKAGES = ("agent-adapter", "msgspec", "openai-agents", "openai", "pydantic")

_perf_ns = time.perf_counter_ns
_CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The standard flags; fills ``rounds`` and ``block_ms`` for full or ``--quick`` runs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a smoke run that finishes in seconds")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 15, quick 3)")
    parser.add_argument(
        "--block-ms", type=float, default=None, help="target ms per block (default 35, quick 5)"
    )
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default=None,
        help="wall: perf_counter; cpu: this thread's CPU time (script default when omitted)",
    )
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else FULL_ROUNDS
    if args.block_ms is None:
        args.block_ms = QUICK_BLOCK_MS if args.quick else FULL_BLOCK_MS
    return args


@dataclass(frozen=True)
class Variant:
    """One thing to time: ``op`` is called (or awaited) ``n`` times per block."""

    name: str
    op: Callable[[], Any]
    n: int | None = None
    setup: Callable[[int], Any] | None = None


@dataclass
class Result:
    """The per-round samples of one variant (ns per op) and their summary."""

    name: str
    samples: list[float]
    median_ns: float
    spread: float
    ratio: float | None
    n: int
    ratios: list[float] = field(default_factory=list)


def summarize(samples: Sequence[float]) -> tuple[float, float]:
    """(median, inter-quartile range / median) of ``samples``."""
    med = statistics.median(samples)
    if len(samples) < 2 or med == 0:
        return med, 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return med, (q3 - q1) / abs(med)


def paired_ratio(samples: Sequence[float], base: Sequence[float]) -> float:
    """Median over rounds of ``samples[i] / base[i]`` (both from the same round)."""
    return statistics.median(s / b for s, b in zip(samples, base, strict=True))


# -- timing -----------------------------------------------------------------------------


def _block_sync(
    op: Callable[[], Any],
    n: int,
    setup: Callable[[int], Any] | None = None,
    now: Callable[[], int] = _perf_ns,
) -> float:
    if setup is not None:
        setup(n)
    gc.collect()
    r = range(n)
    t0 = now()
    for _ in r:
        op()
    return (now() - t0) / n


async def _block_async(
    op: Callable[[], Awaitable[Any]],
    n: int,
    setup: Callable[[int], Any] | None = None,
    now: Callable[[], int] = _perf_ns,
) -> float:
    if setup is not None:
        setup(n)
    gc.collect()
    r = range(n)
    t0 = now()
    for _ in r:
        await op()
    return (now() - t0) / n


def _next_n(n: int, per_op_ns: float, block_ms: float) -> int | None:
    """None when ``n`` ops already fill at least a fifth of the block (then scale once)."""
    block_ns = block_ms * 1e6
    if per_op_ns * n >= block_ns / 5:
        return max(1, round(block_ns / max(per_op_ns, 1e-3)))
    return None


def _calibrate_sync(v: Variant, block_ms: float, now: Callable[[], int]) -> int:
    n = 1
    while True:
        per_op = _block_sync(v.op, n, v.setup, now)
        target = _next_n(n, per_op, block_ms)
        if target is not None:
            return target
        n *= 4


async def _calibrate_async(v: Variant, block_ms: float, now: Callable[[], int]) -> int:
    n = 1
    while True:
        per_op = await _block_async(v.op, n, v.setup, now)
        target = _next_n(n, per_op, block_ms)
        if target is not None:
            return target
        n *= 4


def _orders(count: int, rounds: int) -> Iterable[list[int]]:
    idx = list(range(count))
    for r in range(rounds):
        k = r % count if count else 0
        yield idx[k:] + idx[:k]


def _summarise(
    variants: Sequence[Variant],
    ns: dict[str, int],
    samples: dict[str, list[float]],
    baseline: str | None,
) -> dict[str, Result]:
    base_name = baseline if baseline is not None else variants[0].name
    if base_name not in samples:
        raise ValueError(f"baseline {base_name!r} is not one of the variants")
    base = samples[base_name]
    out: dict[str, Result] = {}
    for v in variants:
        s = samples[v.name]
        med, spread = summarize(s)
        ratios = [a / b for a, b in zip(s, base, strict=True)]
        out[v.name] = Result(
            name=v.name,
            samples=s,
            median_ns=med,
            spread=spread,
            ratio=statistics.median(ratios),
            n=ns[v.name],
            ratios=ratios,
        )
    return out


def _check(variants: Sequence[Variant]) -> None:
    names = [v.name for v in variants]
    if not names or len(set(names)) != len(names):
        raise ValueError("variants must be non-empty with unique names")


def bench(
    variants: Sequence[Variant],
    *,
    baseline: str | None = None,
    rounds: int = FULL_ROUNDS,
    block_ms: float = FULL_BLOCK_MS,
    clock: str = "wall",
) -> dict[str, Result]:
    """Time synchronous variants in rotating rounds; ratios against ``baseline``."""
    _check(variants)
    now = _CLOCKS[clock]
    ns = {v.name: v.n or _calibrate_sync(v, block_ms, now) for v in variants}
    samples: dict[str, list[float]] = {v.name: [] for v in variants}
    for order in _orders(len(variants), rounds):
        for i in order:
            v = variants[i]
            samples[v.name].append(_block_sync(v.op, ns[v.name], v.setup, now))
    return _summarise(variants, ns, samples, baseline)


async def abench(
    variants: Sequence[Variant],
    *,
    baseline: str | None = None,
    rounds: int = FULL_ROUNDS,
    block_ms: float = FULL_BLOCK_MS,
    clock: str = "wall",
) -> dict[str, Result]:
    """Time async variants (coroutine functions) inside the running loop, like :func:`bench`."""
    _check(variants)
    now = _CLOCKS[clock]
    ns = {v.name: v.n or await _calibrate_async(v, block_ms, now) for v in variants}
    samples: dict[str, list[float]] = {v.name: [] for v in variants}
    for order in _orders(len(variants), rounds):
        for i in order:
            v = variants[i]
            samples[v.name].append(await _block_async(v.op, ns[v.name], v.setup, now))
    return _summarise(variants, ns, samples, baseline)


# -- output -----------------------------------------------------------------------------


def fmt_ns(ns: float) -> str:
    """Nanoseconds with thousands separators (``12,345``)."""
    return f"{ns:,.0f}"


def fmt_ratio(r: float | None) -> str:
    """A ratio with three decimals, or an em dash for none."""
    return "—" if r is None else f"{r:.3f}"


def fmt_pct(fraction: float) -> str:
    """A fraction as a percentage with one decimal."""
    return f"{fraction * 100:.1f}%"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table; the first column left-aligned, the others right-aligned."""
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def results_table(
    results: dict[str, Result],
    *,
    title: str | None = None,
    target: dict[str, float] | None = None,
) -> str:
    """variant | median ns | spread | ratio [| target | met]; ``title`` as a ``##`` heading.

    ``target`` maps variant names to the highest acceptable ratio.
    """
    headers = ["variant", "median ns/op", "spread", "ratio"]
    if target:
        headers += ["target", "met"]
    rows = []
    for r in results.values():
        row = [r.name, fmt_ns(r.median_ns), fmt_pct(r.spread), fmt_ratio(r.ratio)]
        if target:
            t = target.get(r.name)
            if t is None or r.ratio is None:
                row += ["", ""]
            else:
                row += [f"<= {t:g}", "yes" if r.ratio <= t else "**no**"]
        rows.append(row)
    table = markdown_table(headers, rows)
    return f"## {title}\n\n{table}\n" if title else table + "\n"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = out.stdout.strip() or "unknown"
    return commit + (" (with local changes)" if dirty.stdout.strip() else "")


def header(packages: Sequence[str] = DEFAULT_PACKAGES) -> str:
    """Machine, Python and package versions as markdown ("" inside ``run_all.py``)."""
    if os.environ.get("AGENT_ADAPTER_BENCH_NESTED") == "1":
        return ""
    try:
        load = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        load = "n/a"
    lines = [
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, {_cpu_model()}, "
        f"{platform.system()} {platform.release()}",
        f"- load average (1/5/15 min) at start: {load}",
        f"- Python {platform.python_version()} ({platform.python_implementation()}), "
        f"{ssl.OPENSSL_VERSION}",
        "- packages: " + ", ".join(f"{p} {_version(p)}" for p in packages),
        f"- git commit: {_git_commit()}",
        f"- command: {' '.join([Path(sys.executable).name, *sys.argv])}",
    ]
    return "\n".join(lines) + "\n"
