"""The audit: ``replay(events)`` over a whole ledger, beside decoding its payloads, one run.

The ledger is 100,000 events (10,000 with ``--quick``) of whole calls from
``bench_ledger.call_events`` (requested, validated, started, succeeded; every other call
claims an effect key), appended to a ``MemoryLedger`` and read back decoded, as
``agent-adapter ledger audit`` reads them. One op is one pass over every event:

- BASE: ``decode_event`` of every stored payload (what reading the ledger back costs);
- ``verify_records``: the store's check of the stored bytes (``Ledger.verify()``);
- ``replay(events, verification)``: the fold alone, the store's verification passed in;
- ``replay(events)``: the fold plus the chain recomputed from the events' canonical bytes
  (the exported-log path: no store to ask).

Figures are events per second (median over rounds, this thread's CPU time by default:
the work is CPU-bound in the calling thread) and the paired per-round ratio of time per
pass to BASE.

Run: ``python benchmarks/bench_audit.py [--quick] [--rounds N] [--clock wall|cpu]``.
"""

from __future__ import annotations

import asyncio

from _harness import Variant, bench, fmt_pct, fmt_ratio, header, markdown_table, parse_args
from bench_ledger import append_calls

from agent_adapter.ledger import Event, MemoryLedger, decode_event, replay, verify_records


async def _ledger(target: int) -> tuple[MemoryLedger, list[Event]]:
    ledger = MemoryLedger()
    await append_calls(ledger, target)
    return ledger, [e async for e in ledger.read()]


def main() -> None:
    args = parse_args(__doc__ or "")
    target = 10_000 if args.quick else 100_000
    ledger, events = asyncio.run(_ledger(target))
    records = ledger.records
    verification = verify_records(records)
    assert verification.ok
    # The fold must see an intact chain, or the figures would time an early exit.
    assert replay(events).chain == verification, replay(events).chain

    def decode_all() -> None:
        for record in records:
            decode_event(record.payload)

    variants = [
        Variant("decode_event of every payload (BASE)", decode_all, n=1),
        Variant("verify_records(records): the stored bytes", lambda: verify_records(records), n=1),
        Variant(
            "replay(events, verification): the fold only",
            lambda: replay(events, verification),
            n=1,
        ),
        Variant("replay(events): the fold + hashes recomputed", lambda: replay(events), n=1),
    ]
    rounds = max(args.rounds // 3, 3)
    results = bench(variants, rounds=rounds, block_ms=args.block_ms, clock=args.clock or "cpu")
    print(header(packages=("agent-adapter", "msgspec")), end="")
    print(f"- {len(events):,} events; {rounds} rounds; clock: {args.clock or 'cpu'}\n")
    rows = [
        [
            r.name,
            f"{len(events) / (r.median_ns / 1e9):,.0f}",
            f"{r.median_ns / len(events):,.0f}",
            fmt_pct(r.spread),
            fmt_ratio(r.ratio),
        ]
        for r in results.values()
    ]
    print(f"## Audit: one pass over {len(events):,} events (ratio = time / BASE)\n")
    print(markdown_table(["variant", "events/s (median)", "ns/event", "spread", "ratio"], rows))


if __name__ == "__main__":
    main()
