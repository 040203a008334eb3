"""The hash chain (verify finds any changed byte), event encoding, and replay(events) audits."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from _helpers import recorded
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_adapter import CallContext, Decision, Executor, Registry, digest
from agent_adapter.errors import ToolError
from agent_adapter.ledger import (
    ApprovalGranted,
    ApprovalRecord,
    ApprovalRequested,
    CallFailed,
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallValidated,
    MemoryLedger,
    Problem,
    Record,
    UnknownEvent,
    Verification,
    decode_event,
    encode_event,
    replay,
    verify_records,
)
from agent_adapter.ledger._events import _ALL


async def _workload(ledger: MemoryLedger) -> None:
    registry = Registry()

    @registry.tool(confirm=True, effect="send:{to}")
    async def send(to: str, body: str) -> str:
        if to == "nobody":
            raise ToolError("no such recipient")
        return "sent"

    executor = Executor(registry, ledger=ledger, clock=lambda: 1000.0)
    yes = Decision(approved=True, reviewer="ui")
    edit = Decision(approved=True, reviewer="ui", edits={"to": "b", "body": "edited"})
    for call_id, args, approval in [
        ("c1", {"to": "a", "body": "hi"}, yes),
        ("c2", {"to": "nobody", "body": "é"}, yes),
        ("c3", {"to": "x", "body": "original"}, edit),
        ("c4", {"to": "y", "body": "no"}, None),
    ]:
        try:
            await executor.run_spec(
                send, args, CallContext(run_id="r", call_id=call_id, approval=approval)
            )
        except Exception:
            pass


def _records(key: bytes | None = None) -> list[Record]:
    ledger = MemoryLedger(key=key)
    asyncio.run(_workload(ledger))
    return list(ledger.records)


RECORDS = _records()
KEYED = _records(key=b"k" * 32)


def test_intact_chains_verify() -> None:
    """An untouched chain verifies, with and without a key (with the right key)."""
    assert (verify_records(RECORDS), verify_records(KEYED, key=b"k" * 32)) == (
        Verification(ok=True, checked=len(RECORDS)),
        Verification(ok=True, checked=len(KEYED)),
    )


def test_a_keyed_chain_needs_its_key() -> None:
    """A keyed (HMAC) chain does not verify without its key or with another key; under
    another key no hash verifies, which is not named as an altered seq."""
    assert (verify_records(KEYED), verify_records(KEYED, key=b"other")) == (
        Verification(
            ok=False, checked=0, first_bad_seq=1, reason="seq 1 does not match its hash (altered)"
        ),
        Verification(
            ok=False,
            checked=0,
            reason="no event's hash verifies under this key: wrong key, or the ledger was altered",
        ),
    )


def test_an_altered_first_record_under_the_right_key_is_named() -> None:
    """With the right key, a later hash verifies: a bad seq 1 is altered, not a wrong key."""
    first = KEYED[0]
    tampered = [msgspec.structs.replace(first, payload=first.payload + b" "), *KEYED[1:]]
    assert verify_records(tampered, key=b"k" * 32) == Verification(
        ok=False, checked=0, first_bad_seq=1, reason="seq 1 does not match its hash (altered)"
    )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_changed_byte_is_found(data: Any) -> None:
    """Changing any one byte of a stored payload, prev or hash is found at that record's seq."""
    index = data.draw(st.integers(0, len(RECORDS) - 1))
    record = RECORDS[index]
    field = data.draw(st.sampled_from(["payload", "prev", "hash"]))
    raw = record.payload if field == "payload" else getattr(record, field).encode()
    if not raw:  # the first record has no prev
        field, raw = "payload", record.payload
    pos = data.draw(st.integers(0, len(raw) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != raw[pos]))
    changed = raw[:pos] + bytes([new]) + raw[pos + 1 :]
    value: Any = changed if field == "payload" else changed.decode("latin-1")
    tampered = [
        *RECORDS[:index],
        msgspec.structs.replace(record, **{field: value}),
        *RECORDS[index + 1 :],
    ]
    result = verify_records(tampered)
    assert (result.ok, result.first_bad_seq, result.checked) == (False, record.seq, index)


def test_deleted_and_reordered_records_are_found() -> None:
    """A missing record or two swapped records are named by the first bad seq."""
    deleted = [*RECORDS[:3], *RECORDS[4:]]
    swapped = [RECORDS[0], RECORDS[2], RECORDS[1], *RECORDS[3:]]
    assert (verify_records(deleted), verify_records(swapped)) == (
        Verification(ok=False, checked=3, first_bad_seq=4, reason="seq 4 is missing (found 5)"),
        Verification(ok=False, checked=1, first_bad_seq=2, reason="seq 2 is missing (found 3)"),
    )


async def test_memory_ledger_verify_names_the_tampered_seq() -> None:
    """Ledger.verify() on a MemoryLedger finds a record edited in place."""
    ledger = MemoryLedger()
    await _workload(ledger)
    record = ledger.records[5]
    ledger.records[5] = msgspec.structs.replace(
        record, payload=record.payload.replace(b'"r"', b'"R"')
    )
    assert await ledger.verify() == Verification(
        ok=False, checked=5, first_bad_seq=6, reason="seq 6 does not match its hash (altered)"
    )


# -- event encoding --------------------------------------------------------------------


def test_every_event_type_round_trips() -> None:
    """Each event class encodes and decodes to an equal event, tag included."""
    events = [cls(run_id="r", call_id="c", tool="t", ts=1.5, seq=3) for cls in _ALL]
    assert [decode_event(encode_event(e)) for e in events] == events
    assert len({e.type for e in events}) == len(events)


def test_unknown_types_and_fields_stay_readable() -> None:
    """A newer version's event type decodes as UnknownEvent; unknown fields are ignored."""
    newer = b'{"type":"call.teleported","seq":7,"run_id":"r","call_id":"c","to":"mars"}'
    extra = b'{"type":"call.validated","run_id":"r","digest":"d","added_later":1}'
    assert (decode_event(newer), decode_event(extra)) == (
        UnknownEvent(
            seq=7, run_id="r", call_id="c", original_type="call.teleported", data={"to": "mars"}
        ),
        CallValidated(run_id="r", digest="d"),
    )


# -- replay / audit --------------------------------------------------------------------


async def test_audit_of_a_real_ledger() -> None:
    """replay() gives each call's digest, approvals (who, source, digest), outcome; no problems."""
    ledger = MemoryLedger()
    await _workload(ledger)
    audit = replay(await recorded(ledger), await ledger.verify())
    c3 = audit.call("r", "c3")
    edited = digest({"to": "b", "body": "edited"})
    assert (audit.problems(), audit.events, len(audit.calls)) == ([], len(ledger.records), 4)
    assert (c3.digest, c3.ran_digest, c3.approvals, c3.outcome, c3.outcomes, c3.started) == (
        digest({"to": "x", "body": "original"}),
        edited,
        [
            ApprovalRecord(
                approved=True, reviewer="ui", source="context", digest=edited, edited=True
            )
        ],
        "call.succeeded",
        1,
        True,
    )
    assert [(r.call_id, r.outcome) for r in audit.calls.values()] == [
        ("c1", "call.succeeded"),
        ("c2", "call.failed"),
        ("c3", "call.succeeded"),
        ("c4", "call.denied"),
    ]


def _ev(cls: Any, seq: int, call_id: str = "c", **kw: Any) -> Any:
    return cls(seq=seq, run_id="r", call_id=call_id, tool="t", **kw)


def test_problems_of_each_kind() -> None:
    """Unapproved digest, ambiguous, incomplete and multiple outcomes are each reported."""
    events = [
        _ev(CallRequested, 1, "u"),
        _ev(ApprovalRequested, 2, "u", digest="d1"),
        _ev(ApprovalGranted, 3, "u", digest="d1", source="port", reviewer="x"),
        _ev(CallStarted, 4, "u", digest="d2"),
        _ev(CallSucceeded, 5, "u"),
        _ev(CallRequested, 6, "a"),
        _ev(CallStarted, 7, "a", digest="d"),
        _ev(CallRequested, 8, "i"),
        _ev(CallRequested, 9, "m"),
        _ev(CallSucceeded, 10, "m"),
        _ev(CallFailed, 11, "m"),
    ]
    assert replay(events).problems() == [
        Problem(
            kind="unapproved",
            message="call u (t) ran with digest d2 that no approval covered",
            run_id="r",
            call_id="u",
            seq=1,
        ),
        Problem(
            kind="ambiguous",
            message=(
                "call a (t) started and has no outcome: its effect may or may not have happened"
            ),
            run_id="r",
            call_id="a",
            seq=6,
        ),
        Problem(
            kind="incomplete", message="call i (t) has no outcome", run_id="r", call_id="i", seq=8
        ),
        Problem(
            kind="multiple-outcomes",
            message="call m has 2 outcomes",
            run_id="r",
            call_id="m",
            seq=9,
        ),
    ]


async def test_broken_chain_is_a_problem() -> None:
    """A missing event, a broken prev link, or a failed verification is a broken-chain problem."""
    ledger = MemoryLedger()
    await _workload(ledger)
    events = await _chained(ledger)
    missing = [*events[:2], *events[3:]]
    relinked = [*events[:4], msgspec.structs.replace(events[4], prev="0" * 64), *events[5:]]
    bad = Verification(ok=False, checked=9, first_bad_seq=10, reason="seq 10 altered")
    assert [
        replay(missing).problems(),
        replay(relinked).problems(),
        replay(events, bad).problems(),
        replay(events).problems(),
    ] == [
        [Problem(kind="broken-chain", message="seq 3 is missing (found 4)", seq=3)],
        [Problem(kind="broken-chain", message="seq 5 does not link to the previous hash", seq=5)],
        [Problem(kind="broken-chain", message="seq 10 altered", seq=10)],
        [],
    ]


async def _chained(ledger: MemoryLedger) -> list[Any]:
    return [e async for e in ledger.read()]
