"""A recorded ledger (tests/golden/engine_v1.jsonl) must keep decoding, verifying and replaying.

It was written by this version's engine: approvals from the context and from a deferred
port (with its answer), an edit, a duplicate, a failure that left an ambiguous key and
its resolution, a ToolError, a cache hit, an invalid call and a replayed repeat. If a
change breaks this test, old ledgers on disk break the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_adapter import CallContext, DeferredApproval, Executor, Registry, RunLimits, digest
from agent_adapter.errors import ToolError
from agent_adapter.ledger import (
    MemoryLedger,
    Record,
    Verification,
    decode_event,
    encode_event,
    replay,
    verify_records,
)

GOLDEN = Path(__file__).parent / "golden" / "engine_v1.jsonl"


def _records() -> list[Record]:
    out = []
    for line in GOLDEN.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        payload = row["payload"].encode()
        event = decode_event(payload)
        out.append(
            Record(
                seq=row["seq"],
                type=event.type,
                run_id=event.run_id,
                call_id=event.call_id,
                tool=event.tool,
                ts=event.ts,
                payload=payload,
                prev=row["prev"],
                hash=row["hash"],
            )
        )
    return out


def _registry() -> Registry:
    # The tools as they were when the ledger was written (names, options, effect keys).
    registry = Registry()

    @registry.tool(confirm=True, effect="refund:{order_id}", redact=["note"])
    async def refund(order_id: str, amount_cents: int, note: str = "") -> str:
        if amount_cents == 0:
            raise ToolError("nothing to refund")
        return f"refunded {amount_cents}"

    @registry.tool(cache=60)
    async def quote(sku: str) -> dict[str, Any]:
        return {"sku": sku, "price": 1.5}

    return registry


def test_golden_chain_verifies() -> None:
    """The stored chain verifies as written."""
    records = _records()
    assert verify_records(records) == Verification(ok=True, checked=58)


def test_golden_events_reencode_to_the_stored_bytes() -> None:
    """Every stored payload decodes and encodes back to the very same bytes."""
    records = _records()
    assert [encode_event(decode_event(r.payload)) for r in records] == [r.payload for r in records]


async def test_golden_ledger_rechains_identically() -> None:
    """Appending the decoded events to a new ledger reproduces every stored hash."""
    records = _records()
    ledger = MemoryLedger()
    for record in records:
        await ledger.append(decode_event(record.payload))
    assert [r.hash for r in ledger.records] == [r.hash for r in records]


def test_golden_audit() -> None:
    """The audit of the golden ledger: each call's outcome, approvals, and no problems."""
    records = _records()
    events = []
    for record in records:
        event = decode_event(record.payload)
        event.seq, event.prev, event.hash = record.seq, record.prev, record.hash
        events.append(event)
    audit = replay(events, verify_records(records))
    assert audit.problems() == []
    assert {k[1]: r.outcome for k, r in audit.calls.items()} == {
        "c1": "call.succeeded",
        "c2": "call.duplicate",
        "c3": "call.failed",
        "c4": "call.failed",
        "c5": "call.pending",
        "c6": "call.succeeded",
        "c7": "call.cached",
        "c8": "call.invalid",
        "c9": "call.succeeded",
        "c10": "call.succeeded",
    }
    c9, c10 = audit.call("golden", "c9"), audit.call("golden", "c10")
    edited = digest({"order_id": "E5", "amount_cents": 50, "note": ""})
    assert [(a.source, a.reviewer, a.digest, a.edited) for a in c9.approvals] == [
        ("context", "ui", edited, True)
    ]
    assert [(a.source, a.reviewer) for a in c10.approvals] == [("port", "carol")]
    assert all(b"secret" not in r.payload for r in records)


async def test_golden_ledger_reopens(clock: Any) -> None:
    """An executor opened on the golden ledger rebuilds limits, cache, effects and outcomes."""
    ledger = MemoryLedger()
    for record in _records():
        await ledger.append(decode_event(record.payload))
    registry = _registry()
    executor = await Executor.open(
        registry,
        ledger=ledger,
        approval=DeferredApproval(ledger, clock=clock),
        limits=RunLimits(max_calls=20),
        clock=lambda: 1_700_000_010.0,
    )
    state = executor.state
    assert (state.run_calls, state.tool_calls, len(state.outcomes), state.inflight) == (
        {"golden": 9},
        {("golden", "refund"): 7, ("golden", "quote"): 2},
        10,
        {},
    )
    assert {k: (s.status, s.call_id) for k, s in state.effects.items()} == {
        "refund:A1": ("committed", "c1"),
        "refund:E5": ("committed", "c9"),
        "refund:D4": ("committed", "c10"),
    }
    repeat = CallContext(run_id="golden", call_id="c6")
    assert await executor.run_spec(registry.get("quote"), {"sku": "é-1"}, repeat) == {
        "sku": "é-1",
        "price": 1.5,
    }
    fresh = CallContext(run_id="other", call_id="x1")
    assert await executor.run_spec(registry.get("quote"), {"sku": "é-1"}, fresh) == {
        "sku": "é-1",
        "price": 1.5,
    }
    assert [e.type async for e in ledger.read(after=58)] == [
        "call.replayed",
        "call.requested",
        "call.validated",
        "call.cached",
    ]
