"""The bridge's token table (issue + take) beside a plain dict insert + pop, same run.

One op is one pair: ``TokenTable.issue(binding, digest, decision)`` then
``TokenTable.take(binding)`` with 256 or 100,000 other tokens live in the table; the
baseline is ``d[binding] = value`` then ``d.pop(binding)`` on a dict of the same size.
Both cycle through the same precomputed bindings. Targets (issue 4): at most 1.5 us per
pair at 100,000 live tokens, and flat growth: at most 1.3x from 256 to 100,000.

Run: ``python benchmarks/bench_tokens.py [--quick]``.
"""

from __future__ import annotations

import itertools
from typing import Any

from _harness import (
    Variant,
    bench,
    fmt_ns,
    fmt_pct,
    fmt_ratio,
    header,
    markdown_table,
    paired_ratio,
    parse_args,
    results_table,
    summarize,
)

from agent_adapter.engine import Decision, TokenTable

SIZES = (256, 100_000)
TARGET_NS = 1_500.0
TARGET_GROWTH = 1.3
DIGEST = "9" * 64
DECISION = Decision(approved=True, reviewer="ops", reason="ok")


def _bindings(count: int, prefix: str) -> list[tuple[str, str, str]]:
    return [("scope_" + prefix, f"call_{prefix}_{i}", "refund") for i in range(count)]


def _token_op(live: int) -> Any:
    # TTL far beyond the run, capacity above the live set: no expiry and no drops are
    # timed, only the pair itself next to ``live`` other tokens.
    table = TokenTable(capacity=live + 2048, ttl_s=86_400.0)
    for binding in _bindings(live, "live"):
        table.issue(binding, DIGEST, DECISION)
    cycle = itertools.cycle(_bindings(1024, "op"))
    issue, take = table.issue, table.take

    def op() -> None:
        binding = next(cycle)
        issue(binding, DIGEST, DECISION)
        take(binding)

    return op


def _dict_op(live: int) -> Any:
    table: dict[tuple[str, str, str], tuple[Decision, float]] = {
        binding: (DECISION, 0.0) for binding in _bindings(live, "live")
    }
    cycle = itertools.cycle(_bindings(1024, "op"))
    pop = table.pop
    value = (DECISION, 0.0)

    def op() -> None:
        binding = next(cycle)
        table[binding] = value
        pop(binding)

    return op


def main() -> None:
    args = parse_args(__doc__ or "")
    variants = []
    for live in SIZES:
        variants.append(Variant(f"dict insert+pop, {live:,} live", _dict_op(live)))
        variants.append(Variant(f"TokenTable issue+take, {live:,} live", _token_op(live)))
    results = bench(
        variants,
        baseline=f"dict insert+pop, {SIZES[-1]:,} live",
        rounds=args.rounds,
        block_ms=args.block_ms,
    )
    print(header())
    print(
        results_table(
            results, title="Token table: one issue + take pair (ratio to dict at 100,000)"
        )
    )

    small = results[f"TokenTable issue+take, {SIZES[0]:,} live"]
    large = results[f"TokenTable issue+take, {SIZES[-1]:,} live"]
    base_large = results[f"dict insert+pop, {SIZES[-1]:,} live"]
    base_small = results[f"dict insert+pop, {SIZES[0]:,} live"]
    growth = paired_ratio(large.samples, small.samples)
    growth_spread = summarize([a / b for a, b in zip(large.samples, small.samples, strict=True)])[1]
    rows = [
        [
            "ns per pair at 100,000 live",
            fmt_ns(large.median_ns),
            fmt_ns(base_large.median_ns),
            fmt_ratio(paired_ratio(large.samples, base_large.samples)),
            fmt_pct(large.spread),
            f"<= {TARGET_NS:,.0f} ns",
            "yes" if large.median_ns <= TARGET_NS else "**no**",
        ],
        [
            "growth 256 -> 100,000 (TokenTable)",
            f"{growth:.3f}x",
            f"{paired_ratio(base_large.samples, base_small.samples):.3f}x",
            "",
            fmt_pct(growth_spread),
            f"<= {TARGET_GROWTH}x",
            "yes" if growth <= TARGET_GROWTH else "**no**",
        ],
    ]
    print("## Token table against its targets\n")
    print(
        markdown_table(
            ["figure", "value", "dict baseline", "ratio", "spread", "target", "met"], rows
        )
    )
    print(f"\n{args.rounds} rounds, median; spread = inter-quartile range / median.")


if __name__ == "__main__":
    main()
