"""Recorded ledgers (tests/ledger/golden/*.jsonl) must keep decoding, verifying and replaying.

engine_v1.jsonl was written by an earlier engine (claims without a holder or a lease):
approvals from the context and from a deferred port (with its answer), an edit, a
duplicate, a failure that left an ambiguous key and its resolution, a ToolError, a cache
hit, an invalid call and a replayed repeat. engine_v2.jsonl (and engine_v3.jsonl, the
same script with a body that asks mid-call: ``call.exchanged``) was recorded by
tests/ledger/golden/make_golden.py from real executor runs and holds every event tag (leases and
their renewal, guards, hooks, limits, a timeout, a cancel, denials). Every tag of
``EVENT_TAGS`` must appear in some golden file. If a change breaks these tests, old
ledgers on disk break the same way.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from agent_adapter import (
    CallContext,
    Decision,
    DeferredApproval,
    Executor,
    Registry,
    RunLimits,
    digest,
)
from agent_adapter.errors import AmbiguousEffect, DuplicateEffect, RunLimitExceeded, ToolError
from agent_adapter.ledger import (
    EVENT_TAGS,
    ApprovalRejected,
    ApprovalRequested,
    CallAmbiguous,
    CallBlocked,
    CallCancelled,
    CallDenied,
    CallLimited,
    CallTimedOut,
    EffectClaimed,
    EffectRenewed,
    EffectResolution,
    Event,
    GuardChecked,
    GuardVerdict,
    HookFailed,
    MemoryLedger,
    Problem,
    Record,
    UnknownEvent,
    Verification,
    decode_event,
    encode_event,
    export_line,
    parse_export_line,
    replay,
    verify_records,
)

GOLDEN = Path(__file__).parent / "golden" / "engine_v1.jsonl"
GOLDEN_V2 = GOLDEN.parent / "engine_v2.jsonl"


def _records(path: Path = GOLDEN) -> list[Record]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
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


# -- every tag ---------------------------------------------------------------------------

#: The tags engine_v1.jsonl has no record of (12 of the 29): engine_v2.jsonl records them,
#: but for call.exchanged (newer than both), which engine_v3.jsonl records.
NOT_IN_V1 = {
    "approval.denied",
    "call.exchanged",
    "call.ambiguous",
    "call.blocked",
    "call.cancelled",
    "call.denied",
    "call.limited",
    "call.timed_out",
    "effect.renewed",
    "guard.checked",
    "hook.failed",
    "unknown",
}


def test_every_event_tag_has_a_golden_record() -> None:
    """Each tag of EVENT_TAGS is read from some golden file: a tag added later fails here
    until a new file recorded by tests/ledger/golden/make_golden.py holds it (call.exchanged:
    engine_v3.jsonl)."""
    files = sorted(GOLDEN.parent.glob("*.jsonl"))
    seen = {decode_event(r.payload).type for path in files for r in _records(path)}
    assert sorted(EVENT_TAGS - seen) == []
    v1 = {decode_event(r.payload).type for r in _records(GOLDEN)}
    assert EVENT_TAGS - v1 == NOT_IN_V1


# -- engine_v2.jsonl: recorded by make_golden.py, every tag --------------------------------

RUN = "golden2"


def _events(records: list[Record]) -> list[Event]:
    events = []
    for record in records:
        event = decode_event(record.payload)
        event.seq, event.prev, event.hash = record.seq, record.prev, record.hash
        events.append(event)
    return events


def _registry_v2(runs: list[str]) -> Registry:
    # The tools of make_golden.py that reopening needs, as they were when it recorded the
    # file (names, options, effect keys); each body notes that it ran.
    registry = Registry()

    @registry.tool(confirm=True, effect="refund:{order_id}", redact=["note"])
    async def refund(order_id: str, amount_cents: int, note: str = "") -> str:
        runs.append(f"refund {order_id}")
        return f"refunded {amount_cents}"

    @registry.tool(cache=60)
    async def quote(sku: str) -> dict[str, Any]:
        runs.append(f"quote {sku}")
        return {"sku": sku, "price": 1.5}

    @registry.tool
    async def notify(message: str) -> str:
        runs.append(f"notify {message}")
        return f"sent: {message}"

    @registry.tool(effect="ship:{order_id}")
    async def ship(order_id: str) -> str:
        runs.append(f"ship {order_id}")
        return f"shipped {order_id}"

    return registry


def test_golden_v2_chain_verifies() -> None:
    """The stored chain verifies as written."""
    assert verify_records(_records(GOLDEN_V2)) == Verification(ok=True, checked=122)


def test_golden_v2_events_reencode_to_the_stored_bytes() -> None:
    """Every stored payload (the newer version's event too) decodes and encodes back to
    the very same bytes."""
    records = _records(GOLDEN_V2)
    assert [encode_event(decode_event(r.payload)) for r in records] == [r.payload for r in records]


async def test_golden_v2_ledger_rechains_identically() -> None:
    """Appending the decoded events to a new ledger reproduces every stored hash."""
    records = _records(GOLDEN_V2)
    ledger = MemoryLedger()
    for record in records:
        await ledger.append(decode_event(record.payload))
    assert [r.hash for r in ledger.records] == [r.hash for r in records]


def test_golden_v2_export_lines_read_back_to_the_stored_records() -> None:
    """Each record's export line (the CLI's `ledger export` format) reads back to it."""
    records = _records(GOLDEN_V2)
    assert [parse_export_line(export_line(r)) for r in records] == records


def test_golden_v2_call_timelines() -> None:
    """Each call's event types in ledger order, and the one event of no call."""
    timelines: dict[str, list[str]] = {}
    for record in _records(GOLDEN_V2):
        timelines.setdefault(record.call_id, []).append(record.type)
    plain = ["call.requested", "call.validated"]
    approved = [*plain, "approval.requested", "approval.granted"]
    ran = ["effect.claimed", "call.started"]
    asked = [*plain, "approval.requested"]
    pending = [*asked, "approval.pending", "call.pending", "approval.answered"]
    assert timelines == {
        "c1": [*approved, *ran, "call.succeeded", "call.replayed"],
        "c2": [*approved, "call.duplicate"],
        "c3": [*approved, *ran, "call.failed"],
        "c4": [*approved, *ran, "call.failed", "effect.resolved"],
        "c5": [*approved, "call.ambiguous"],
        "c6": [*approved, *ran, "call.succeeded"],
        "c7": [*approved, *ran, "call.failed"],
        "c8": [*asked, "approval.denied", "call.denied"],
        "c9": pending,
        "c10": [*asked, "approval.consumed", "approval.granted", *ran, "call.succeeded"],
        "c11": pending,
        "c12": [*asked, "approval.consumed", "approval.denied", "call.denied"],
        "c13": ["call.requested", "call.validated", "call.started", "call.succeeded"],
        "c14": ["call.requested", "call.validated", "call.cached"],
        "c15": ["call.requested", "call.invalid"],
        "c16": [*plain, "guard.checked", "call.started", "call.succeeded"],
        "c17": ["call.requested", "call.validated", "guard.checked", "call.blocked"],
        "c18": ["call.requested", "call.validated", "call.blocked"],
        "c19": [*plain, "call.started", "call.succeeded", "hook.failed"],
        "c20": ["call.requested", "call.validated", "call.limited"],
        "c21": ["call.requested", "call.validated", "call.started", "call.timed_out"],
        "c22": ["call.requested", "call.validated", "call.started", "call.cancelled"],
        "c23": ["call.requested", "call.validated", *ran, "effect.renewed", "call.succeeded"],
        "": ["unknown"],
    }


def test_golden_v2_records_of_the_tags_v1_lacks() -> None:
    """The records of the tags engine_v1.jsonl has none of, whole, with the claim whose
    lease the renewal moves on."""
    events = {r.seq: decode_event(r.payload) for r in _records(GOLDEN_V2)}
    asked = {e.call_id: e.request_id for e in events.values() if isinstance(e, ApprovalRequested)}
    g7 = digest({"order_id": "G7", "amount_cents": 100, "note": ""})
    r9 = digest({"order_id": "R9", "amount_cents": 700, "note": ""})
    kept = {s: e for s, e in events.items() if e.type in NOT_IN_V1 or s == 117}
    assert kept == {
        31: CallAmbiguous(
            ts=1700100000.035,
            call_id="c5",
            tool="refund",
            duration_ms=5.000114440917969,
            key="refund:C3",
            reason="effect refund:C3 is claimed by call c4 (run golden2) whose outcome is "
            "unknown; resolve it with resolve_effect",
            run_id=RUN,
        ),
        50: ApprovalRejected(
            ts=1700100000.057,
            call_id="c8",
            tool="refund",
            request_id=asked["c8"],
            reviewer="ui",
            source="context",
            digest=g7,
            reason="not this one",
            run_id=RUN,
        ),
        51: CallDenied(
            ts=1700100000.057,
            call_id="c8",
            tool="refund",
            duration_ms=3.000020980834961,
            reviewer="ui",
            reason="not this one",
            run_id=RUN,
        ),
        76: ApprovalRejected(
            ts=1700100000.083,
            call_id="c12",
            tool="refund",
            request_id=asked["c12"],
            reviewer="dave",
            source="port",
            digest=r9,
            reason="fraud",
            run_id=RUN,
        ),
        77: CallDenied(
            ts=1700100000.083,
            call_id="c12",
            tool="refund",
            duration_ms=3.999948501586914,
            reviewer="dave",
            reason="fraud",
            run_id=RUN,
        ),
        89: GuardChecked(
            ts=1700100000.097,
            call_id="c16",
            tool="transfer",
            stage="input",
            verdicts=[GuardVerdict(name="within_limit", ok=True)],
            run_id=RUN,
        ),
        94: GuardChecked(
            ts=1700100000.102,
            call_id="c17",
            tool="transfer",
            stage="input",
            verdicts=[
                GuardVerdict(name="within_limit", ok=False, reason="over the transfer limit")
            ],
            run_id=RUN,
        ),
        95: CallBlocked(
            ts=1700100000.103,
            call_id="c17",
            tool="transfer",
            duration_ms=3.000020980834961,
            stage="input",
            by="within_limit",
            reason="over the transfer limit",
            run_id=RUN,
        ),
        98: CallBlocked(
            ts=1700100000.106,
            call_id="c18",
            tool="notify",
            duration_ms=1.9998550415039062,
            stage="hook",
            by="golden-hook",
            reason="quiet hours",
            run_id=RUN,
        ),
        103: HookFailed(
            ts=1700100000.111,
            call_id="c19",
            tool="notify",
            hook="golden-hook",
            stage="after_tool",
            error="RuntimeError: pager down",
            run_id=RUN,
        ),
        106: CallLimited(
            ts=1700100000.114,
            call_id="c20",
            tool="notify",
            duration_ms=2.000093460083008,
            reason="run golden2 reached max_calls_per_tool=1 for notify",
            run_id=RUN,
        ),
        110: CallTimedOut(
            ts=1700100000.118,
            call_id="c21",
            tool="lookup",
            duration_ms=3.000020980834961,
            timeout_s=0.05,
            run_id=RUN,
        ),
        114: CallCancelled(
            ts=1700100000.122,
            call_id="c22",
            tool="export",
            duration_ms=3.999948501586914,
            started=True,
            counted=True,
            run_id=RUN,
        ),
        117: EffectClaimed(
            ts=1700100000.126,
            call_id="c23",
            tool="ship",
            key="ship:S1",
            digest=digest({"order_id": "S1"}),
            holder="golden-exec",
            pid=4242,
            host="golden-host",
            lease_until=1700100000.427,
            run_id=RUN,
        ),
        119: EffectRenewed(
            ts=1700100000.129,
            call_id="c23",
            tool="ship",
            key="ship:S1",
            lease_until=1700100000.429,
            run_id=RUN,
        ),
        122: UnknownEvent(
            ts=1700100000.132,
            original_type="run.annotated",
            data={"note": "written by a newer version"},
            run_id=RUN,
        ),
    }


def test_golden_v2_audit() -> None:
    """The audit: each call's outcome, the effect keys, the approvals, and exactly the one
    problem recorded on purpose (refund:F6 left ambiguous, never resolved)."""
    records = _records(GOLDEN_V2)
    audit = replay(_events(records), verify_records(records))
    assert audit.problems() == [
        Problem(
            kind="ambiguous",
            message="effect refund:F6: call c7 (refund) failed with tool-failed (an exception, "
            "not a ToolError) after its body started; the effect may or may not have "
            "happened, and no effect.resolved says which",
            run_id=RUN,
            call_id="c7",
            seq=40,
            key="refund:F6",
        )
    ]
    assert {k[1]: r.outcome for k, r in audit.calls.items()} == {
        "c1": "call.succeeded",
        "c2": "call.duplicate",
        "c3": "call.failed",
        "c4": "call.failed",
        "c5": "call.ambiguous",
        "c6": "call.succeeded",
        "c7": "call.failed",
        "c8": "call.denied",
        "c9": "call.pending",
        "c10": "call.succeeded",
        "c11": "call.pending",
        "c12": "call.denied",
        "c13": "call.succeeded",
        "c14": "call.cached",
        "c15": "call.invalid",
        "c16": "call.succeeded",
        "c17": "call.blocked",
        "c18": "call.blocked",
        "c19": "call.succeeded",
        "c20": "call.limited",
        "c21": "call.timed_out",
        "c22": "call.cancelled",
        "c23": "call.succeeded",
    }
    assert {k: (e.status, e.call_id, e.holder) for k, e in audit.effects.items()} == {
        "refund:A1": ("committed", "c1", "golden-exec"),
        "refund:B2": ("free", "c3", "golden-exec"),
        "refund:C3": ("committed", "c6", "golden-exec"),
        "refund:F6": ("ambiguous", "c7", "golden-exec"),
        "refund:D4": ("committed", "c10", "golden-exec"),
        "ship:S1": ("committed", "c23", "golden-exec"),
    }
    c4 = audit.call(RUN, "c4").effect
    assert c4 is not None
    assert (c4.status, c4.resolution) == (
        "free",
        EffectResolution(
            outcome="failed", reviewer="ops", reason="the gateway has no refund", seq=32
        ),
    )
    assert audit.effects["ship:S1"].lease_until == 1700100000.429  # as the renewal moved it
    approvals = {
        k[1]: [
            (a.approved, a.source, a.reviewer, a.reason, a.digest == r.digest) for a in r.approvals
        ]
        for k, r in audit.calls.items()
        if r.approvals
    }
    ui = [(True, "context", "ui", "", True)]
    assert approvals == {
        **{f"c{i}": ui for i in range(1, 8)},
        "c8": [(False, "context", "ui", "not this one", True)],
        "c10": [(True, "port", "carol", "ok", True)],
        "c12": [(False, "port", "dave", "fraud", True)],
    }
    assert all(b"secret" not in r.payload for r in records)


def test_golden_v2_audit_of_the_events_alone() -> None:
    """Without the store's check, the newer version's event cannot be re-encoded to its
    stored bytes: the chain is reported as not checkable, never ok, and nothing raises."""
    audit = replay(_events(_records(GOLDEN_V2)))
    assert audit.chain == Verification(
        ok=False,
        checked=121,
        reason="seq 122 cannot be re-encoded to its stored bytes by this version (an event "
        "type it does not know, written by a newer one): its hash is not checked; check the "
        "stored bytes with Ledger.verify() or `agent-adapter ledger verify`",
    )
    assert [(p.kind, p.seq) for p in audit.problems()] == [
        ("broken-chain", None),
        ("ambiguous", 40),
    ]


async def test_golden_v2_ledger_reopens(caplog: pytest.LogCaptureFixture) -> None:
    """An executor opened on engine_v2.jsonl rebuilds limits, cache, effect keys (the one
    left ambiguous included), approvals and outcomes, without a warning; no body runs."""
    ledger = MemoryLedger()
    for record in _records(GOLDEN_V2):
        await ledger.append(decode_event(record.payload))
    runs: list[str] = []
    registry = _registry_v2(runs)

    def now() -> float:
        return 1_700_100_010.0

    deferred = DeferredApproval(ledger, clock=now)
    with caplog.at_level(logging.WARNING, logger="agent_adapter"):
        executor = await Executor.open(
            registry,
            ledger=ledger,
            approval=deferred,
            limits=RunLimits(max_calls_per_tool={"notify": 1}),
            clock=now,
        )
    assert caplog.records == []
    state = executor.state
    assert (state.run_calls, state.tool_calls, len(state.outcomes), state.inflight) == (
        {RUN: 19},
        {
            (RUN, "refund"): 12,
            (RUN, "quote"): 2,
            (RUN, "transfer"): 1,
            (RUN, "notify"): 1,
            (RUN, "lookup"): 1,
            (RUN, "export"): 1,
            (RUN, "ship"): 1,
        },
        23,
        {},
    )
    assert {k: (s.status, s.call_id, s.lease_until) for k, s in state.effects.items()} == {
        "refund:A1": ("committed", "c1", 1700100000.306),
        "refund:C3": ("committed", "c6", 1700100000.343),
        "refund:F6": ("ambiguous", "c7", 1700100000.351),
        "refund:D4": ("committed", "c10", 1700100000.37),
        "ship:S1": ("committed", "c23", 1700100000.429),
    }
    assert (
        executor.ambiguous_effects(),
        executor.in_flight_effects(),
        await deferred.pending(),
    ) == (
        {"refund:F6": (RUN, "c7")},
        {},
        [],
    )
    repeat = CallContext(run_id=RUN, call_id="c13")
    assert await executor.run_spec(registry.get("quote"), {"sku": "é-1"}, repeat) == {
        "sku": "é-1",
        "price": 1.5,
    }
    ui = Decision(approved=True, reviewer="ui")
    retry = CallContext(run_id=RUN, call_id="n1", approval=ui)
    with pytest.raises(AmbiguousEffect):
        await executor.run_spec(
            registry.get("refund"), {"order_id": "F6", "amount_cents": 5}, retry
        )
    with pytest.raises(DuplicateEffect):
        await executor.call("ship", {"order_id": "S1"}, run_id=RUN, call_id="n2")
    with pytest.raises(RunLimitExceeded):
        await executor.call("notify", {"message": "again"}, run_id=RUN, call_id="n3")
    await executor.close()
    assert runs == []
    assert [(e.call_id, e.type) async for e in ledger.read(after=122)] == [
        ("c13", "call.replayed"),
        ("n1", "call.requested"),
        ("n1", "call.validated"),
        ("n1", "approval.requested"),
        ("n1", "approval.granted"),
        ("n1", "call.ambiguous"),
        ("n2", "call.requested"),
        ("n2", "call.validated"),
        ("n2", "call.duplicate"),
        ("n3", "call.requested"),
        ("n3", "call.validated"),
        ("n3", "call.limited"),
    ]


async def test_golden_requests_read_without_a_description() -> None:
    """The deferred requests of both golden files (written before approval.pending
    recorded the tool's description) read back with an empty one, and everything else
    as recorded: a reader shows "not recorded", never fails."""
    for path in (GOLDEN, GOLDEN_V2):
        ledger = MemoryLedger()
        for record in _records(path):
            await ledger.append(decode_event(record.payload))
        asked = [e for e in _events(_records(path)) if e.type == "approval.pending"]
        deferred = DeferredApproval(ledger)
        requests = [await deferred.get(e.request_id) for e in asked]
        assert asked, path
        assert [(r.description, r.tool, r.digest, r.args) for r in requests] == [
            ("", e.tool, e.digest, e.args) for e in asked
        ]


# -- engine_v3.jsonl: make_golden.py with a body that asked mid-call (call.exchanged) -------

GOLDEN_V3 = GOLDEN.parent / "engine_v3.jsonl"


def test_golden_v3_verifies_reencodes_and_exports_back() -> None:
    """The chain verifies; each payload decodes and encodes to its bytes; export lines
    read back to the records."""
    records = _records(GOLDEN_V3)
    assert verify_records(records) == Verification(ok=True, checked=128)
    assert [encode_event(decode_event(r.payload)) for r in records] == [r.payload for r in records]
    assert [parse_export_line(export_line(r)) for r in records] == records


def test_golden_v3_exchanges_are_records_of_their_call() -> None:
    """c24's questions, between call.started and its outcome, the card scrubbed; the
    audit has only the one problem v2 has (refund:F6), so exchanges add none."""
    records = _records(GOLDEN_V3)
    audit = replay(_events(records), verify_records(records))
    assert [(p.kind, p.key) for p in audit.problems()] == [("ambiguous", "refund:F6")]
    survey = audit.call(RUN, "c24")
    assert [e.type for e in survey.events] == [
        "call.requested",
        "call.validated",
        "call.started",
        "call.exchanged",
        "call.exchanged",
        "call.succeeded",
    ]
    assert [(e.method, e.request, e.response, e.error, e.peer) for e in survey.exchanges] == [
        (
            "elicitation/create",
            {"message": "Go on? (card [redacted])"},
            {"action": "accept", "content": {"answer": "yes"}},
            "",
            "golden-client 1.0",
        ),
        (
            "sampling/createMessage",
            {"messages": ["Go on?"]},
            None,
            "refused: the client did not declare sampling",
            "golden-client 1.0",
        ),
    ]


async def test_golden_v3_reopens_and_replays_the_call_that_asked() -> None:
    """An executor opened on engine_v3.jsonl answers a repeat of c24 from the ledger:
    the recorded value, no run and no new exchange."""
    runs: list[str] = []
    registry = _registry_v2(runs)

    @registry.tool(redact=["card"])
    async def survey(card: str, question: str) -> str:
        runs.append("survey")
        return "surveyed again"

    ledger = MemoryLedger()
    for record in _records(GOLDEN_V3):
        await ledger.append(decode_event(record.payload))
    executor = await Executor.open(registry, ledger=ledger)
    try:
        ctx = CallContext(run_id=RUN, call_id="c24")
        args = {"card": "4111", "question": "Go on?"}
        assert await executor.run_spec(registry.get("survey"), args, ctx) == "surveyed"
    finally:
        await executor.close()
    assert runs == []
    assert [r.type for r in ledger.records][-1] == "call.replayed"
