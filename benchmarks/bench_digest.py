"""The canonical argument digest against ``sha256(json.dumps(sort_keys=True))``.

Four argument shapes (small: 5 keys; medium: 50 keys nested 2-3 deep; large: ~10 KB of
many keys; large_str: ~10 KB that is mostly one string), each digested from a dict and
from the model's raw JSON text. Every figure is a ratio to the baseline timed in the
same round. Targets (issue 5): <= 0.25x for small, <= 0.15x for medium, <= 0.2x for
large, for ``digest()`` of a dict.

Run: ``python benchmarks/bench_digest.py [--quick]``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec
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
)

from agent_adapter.engine import Registry
from agent_adapter.engine._digest import canonical, digest

TARGETS = {"small": 0.25, "medium": 0.15, "large": 0.2, "large_str": 0.2}


def _small() -> dict[str, Any]:
    return {
        "path": "/srv/reports/2026-q3/summary.csv",
        "mode": "append",
        "retries": 3,
        "overwrite": False,
        "encoding": "utf-8",
    }


def _medium() -> dict[str, Any]:
    # 50 keys in all, nested two to three levels, ~1.1 KB canonical (floats, a null).
    return {
        "customer": {
            "id": "cus_9f8e7d6c5b4a",
            "name": "Ada Lovelace",
            "email": "ada@example.com",
            "address": {"street": "12 St James's Square", "city": "London", "zip": "SW1Y 4JH"},
        },
        "order": {
            "id": "ord_0001",
            "currency": "EUR",
            "total": 1234.5,
            "lines": [
                {"sku": "A-100", "qty": 2, "price": 9.99},
                {"sku": "B-200", "qty": 1, "price": 120.0},
            ],
        },
        "refund": {
            "amount": 99.95,
            "reason": "item damaged in transit, photos attached to the ticket",
            "notify": True,
            "channel": "email",
        },
        "options": {
            "dry_run": False,
            "idempotency_key": "rf-2026-11-30-0001",
            "priority": 5,
            "tags": ["vip", "eu", "q4"],
        },
        "audit": {
            "requested_by": "agent:support-bot",
            "ticket": "SUP-48213",
            "approved": None,
            "notes": "customer called twice about the parcel; escalate to a human if over 100",
        },
        "limits": {"max_amount": 500, "daily_cap": 2000},
        "shipping": {
            "carrier": "DHL",
            "tracking": "JD014600003828",
            "service": "express",
            "insured": True,
            "weight_kg": 1.25,
            "eta": "2026-12-02",
        },
        "meta": {
            "source": "chat-widget",
            "locale": "en-GB",
            "version": 3,
            "session": "sess_2b7c1e9a4d5f6e7a8b9c",
            "user_agent": "Mozilla/5.0 (X11; Linux x86_64)",
        },
    }


def _large() -> dict[str, Any]:
    # ~10 KB of many small keys: a batch of 28 documents.
    docs = []
    for i in range(28):
        docs.append(
            {
                "id": f"doc-{i:04d}",
                "title": f"Quarterly report section {i}",
                "author": {"name": f"Author {i % 7}", "team": "finance"},
                "score": round(0.5 + i / 64, 6),
                "pages": 10 + i,
                "tags": ["finance", f"q{i % 4 + 1}", "internal"],
                "published": i % 2 == 0,
                "summary": f"Revenue, costs and forecast for business unit {i} of the group",
                "created": f"2026-{i % 12 + 1:02d}-{i % 28 + 1:02d}T09:30:00Z",
                "reviewers": [f"reviewer-{i % 5}", f"reviewer-{(i + 2) % 5}"],
                "status": "final",
            }
        )
    return {"collection": "reports", "overwrite": False, "documents": docs}


def _large_str() -> dict[str, Any]:
    # ~10 KB that is mostly one string: a write_file payload.
    body = "".join(
        f"line {i:04d}: the quick brown fox jumps over the lazy dog\n" for i in range(176)
    )
    return {
        "path": "/srv/app/config/generated.txt",
        "content": body,
        "mode": "overwrite",
        "create_dirs": True,
        "encoding": "utf-8",
    }


SHAPES = {"small": _small, "medium": _medium, "large": _large, "large_str": _large_str}

BASE = "json.dumps sorted + sha256 (BASE)"
OURS = "**ours: digest(dict)**"
STR_BASE = "from str: json.loads + BASE"
OURS_STR = "ours from str: digest(msgspec.json.decode(raw))"
OURS_VALIDATE = "ours from str: spec.validate(raw) + digest (run_spec's path)"
FLOOR_ENC = "floor: canonical() encode only"
FLOOR_SHA = "floor: sha256(canonical bytes) only"


def _spec_for(args: dict[str, Any]) -> Any:
    # A tool whose parameters are the shape's top-level keys (typed Any), as a registry
    # builds one: validation is a msgspec decode into a Struct, then asdict.
    registry = Registry()
    params = ", ".join(f"{k}: Any" for k in args)
    namespace: dict[str, Any] = {"Any": Any}
    exec(f"async def tool({params}) -> None:\n    return None\n", namespace)
    return registry.tool(namespace["tool"])


def variants_for(args: dict[str, Any]) -> list[Variant]:
    raw = json.dumps(args, separators=(",", ":"))  # what a model sends: compact, unsorted
    data = canonical(args)
    dumps, loads, sha256 = json.dumps, json.loads, hashlib.sha256
    decode = msgspec.json.decode
    spec = _spec_for(args)
    assert digest(decode(raw)) == digest(args) == digest(spec.validate(raw))
    return [
        Variant(
            BASE,
            lambda: sha256(dumps(args, sort_keys=True, separators=(",", ":")).encode()).hexdigest(),
        ),
        Variant(OURS, lambda: digest(args)),
        Variant(
            STR_BASE,
            lambda: sha256(
                dumps(loads(raw), sort_keys=True, separators=(",", ":")).encode()
            ).hexdigest(),
        ),
        Variant(OURS_STR, lambda: digest(decode(raw))),
        Variant(OURS_VALIDATE, lambda: digest(spec.validate(raw))),
        Variant(FLOOR_ENC, lambda: canonical(args)),
        Variant(FLOOR_SHA, lambda: sha256(data).hexdigest()),
    ]


def main() -> None:
    args = parse_args(__doc__ or "")
    print(header(("agent-adapter", "msgspec")))
    # CPU time of this thread by default: on a shared 2-core VM, time spent preempted by
    # other processes would otherwise land on whichever variant was running.
    clock = args.clock or "cpu"
    results = {}
    sizes = {}
    for shape, make in SHAPES.items():
        value = make()
        sizes[shape] = len(canonical(value))
        results[shape] = bench(
            variants_for(value),
            baseline=BASE,
            rounds=args.rounds,
            block_ms=args.block_ms,
            clock=clock,
        )

    names = list(results["small"])
    headers = ["variant"]
    for shape in SHAPES:
        headers += [f"{shape} ({sizes[shape]:,} B) ns", "ratio"]
    headers.append("max spread")
    rows = []
    for name in names:
        row: list[Any] = [name]
        spreads = []
        for shape in SHAPES:
            r = results[shape][name]
            row += [fmt_ns(r.median_ns), fmt_ratio(r.ratio)]
            spreads.append(r.spread)
        row.append(fmt_pct(max(spreads)))
        rows.append(row)
    print(
        f"## Digest: ours vs json + sha256 ({args.rounds} rounds, {clock} clock, "
        "ratios paired per round)\n"
    )
    print(markdown_table(headers, rows))
    print()

    target_rows = []
    for shape in SHAPES:
        res = results[shape]
        ours = res[OURS].ratio
        assert ours is not None
        str_vs_str = paired_ratio(res[OURS_STR].samples, res[STR_BASE].samples)
        validate_vs_str = paired_ratio(res[OURS_VALIDATE].samples, res[STR_BASE].samples)
        target_rows.append(
            [
                shape,
                f"<= {TARGETS[shape]:g}",
                fmt_ratio(ours),
                "yes" if ours <= TARGETS[shape] else "**no**",
                fmt_ratio(res[FLOOR_SHA].ratio),
                fmt_ratio(str_vs_str),
                fmt_ratio(validate_vs_str),
            ]
        )
    print("## Digest targets (ratio of digest(dict) to BASE)\n")
    print(
        markdown_table(
            [
                "shape",
                "target",
                "ours (dict)",
                "met",
                "sha256 alone",
                "from str vs str BASE",
                "validate+digest vs str BASE",
            ],
            target_rows,
        )
    )
    print(
        "\n'sha256 alone' is the hash of the already-encoded canonical bytes: no digest "
        "that hashes them with SHA-256 can be cheaper. The 'from str' columns are ratios to "
        "json.loads + BASE in the same round."
    )


if __name__ == "__main__":
    main()
