"""The hash chain (verify finds any changed byte), event encoding, and replay(events) audits."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
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
    chain_hash,
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
        [Problem(kind="broken-chain", message="seq 5 does not link to the hash of seq 4", seq=5)],
        [Problem(kind="broken-chain", message="seq 10 altered", seq=10)],
        [],
    ]


async def _chained(ledger: MemoryLedger) -> list[Any]:
    return [e async for e in ledger.read()]


# -- replay(events) alone: the chain recomputed from the events ------------------------

REENCODED = (
    "altered, or written by a newer version with fields this one does not read: "
    "Ledger.verify() checks the stored bytes"
)


def _changed(value: Any) -> Any:
    """Another value of the same JSON type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.5
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, 1]
    assert isinstance(value, dict), value
    return {**value, "added": 1}


async def _read_back(key: bytes | None = None) -> tuple[MemoryLedger, list[Any]]:
    ledger = MemoryLedger(key=key)
    await _workload(ledger)
    return ledger, await _chained(ledger)


FIELDS = [
    (index, name)
    for index, event in enumerate(decode_event(r.payload) for r in RECORDS)
    for name in ["seq", "prev", "hash", *msgspec.to_builtins(event)]
    if name != "type" and not (name == "prev" and index == 0)
]


@pytest.mark.parametrize(("index", "name"), FIELDS, ids=[f"{i + 1}-{n}" for i, n in FIELDS])
async def test_replay_alone_finds_any_changed_field(index: int, name: str) -> None:
    """replay(events) with no verification: one field of one event changed (any field of
    any event of a real ledger) is a broken-chain problem at that event's seq."""
    _, events = await _read_back()
    event = events[index]
    value = getattr(event, name)
    if name == "seq":
        expected = Problem(
            kind="broken-chain",
            message=f"seq {index + 1} is missing (found {index + 2})",
            seq=index + 1,
        )
    elif name == "prev":
        expected = Problem(
            kind="broken-chain",
            message=f"seq {index + 1} does not link to the hash of seq {index}",
            seq=index + 1,
        )
    else:
        expected = Problem(
            kind="broken-chain",
            message=f"seq {index + 1} does not match its hash ({REENCODED})",
            seq=index + 1,
        )
    events[index] = msgspec.structs.replace(event, **{name: _changed(value)})
    assert replay(events).problems()[:1] == [expected]


async def test_replay_alone_of_an_intact_ledger_checks_every_hash() -> None:
    """An untouched ledger read back: the chain verifies from the events alone."""
    ledger, events = await _read_back()
    assert replay(events).chain == Verification(ok=True, checked=len(ledger.records))


async def test_replay_alone_of_a_keyed_chain_needs_the_key() -> None:
    """A keyed chain: without its key (or with another) the audit cannot check it, never
    ok and never altered; with the key it verifies, and an altered event is named."""
    key = b"k" * 32
    ledger, events = await _read_back(key=key)
    altered = [*events]
    altered[4] = msgspec.structs.replace(altered[4], tool="other")
    no_key = Verification(
        ok=False,
        checked=0,
        reason="no event's hash is the SHA-256 of its bytes: the chain is keyed (HMAC) and "
        "cannot be checked without its key, or every event was altered",
    )
    wrong_key = Verification(
        ok=False,
        checked=0,
        reason="no event's hash verifies under this key: a wrong key, or a chain written "
        "(or rewritten) without it",
    )
    assert [
        replay(events).chain,
        replay(altered).chain,
        replay(events, key=b"other").chain,
        replay(events, key=key).chain,
        replay(altered, key=key).chain,
    ] == [
        no_key,
        no_key,
        wrong_key,
        Verification(ok=True, checked=len(ledger.records)),
        Verification(
            ok=False,
            checked=4,
            first_bad_seq=5,
            reason=f"seq 5 does not match its hash ({REENCODED})",
        ),
    ]
    assert replay(events).problems() == [
        Problem(kind="broken-chain", message=no_key.reason, seq=None)
    ]


def _chain_of(payloads: list[bytes]) -> list[Any]:
    """Events decoded from a chain of these stored payloads, with their chain fields."""
    events, prev = [], ""
    for seq, payload in enumerate(payloads, 1):
        stored = chain_hash(seq, prev, payload)
        event = decode_event(payload)
        event.seq, event.prev, event.hash = seq, prev, stored
        events.append(event)
        prev = stored
    return events


async def test_replay_alone_of_events_it_cannot_reencode() -> None:
    """A newer version's event type is not checked (cannot be checked, never ok); a known
    type with a field this version drops does not match (never ok); neither raises, and
    the links past them are still checked."""
    payloads = [r.payload for r in RECORDS[:3]]
    newer = b'{"type":"call.teleported","ts":1.0,"run_id":"r","call_id":"c","to":"mars"}'
    extra = b'{"type":"call.validated","ts":1.0,"run_id":"r","call_id":"c","digest":"d","later":1}'
    with_newer = _chain_of([*payloads, newer, *payloads])
    with_extra = _chain_of([*payloads, extra, *payloads])
    relinked = [
        *with_newer[:5],
        msgspec.structs.replace(with_newer[5], prev="0" * 64),
        *with_newer[6:],
    ]
    assert [replay(with_newer).chain, replay(with_extra).chain, replay(relinked).chain] == [
        Verification(
            ok=False,
            checked=6,
            reason="seq 4 cannot be re-encoded to its stored bytes by this version (an event "
            "type it does not know, written by a newer one): its hash is not checked; check "
            "the stored bytes with Ledger.verify() or `agent-adapter ledger verify`",
        ),
        Verification(
            ok=False,
            checked=3,
            first_bad_seq=4,
            reason=f"seq 4 does not match its hash ({REENCODED})",
        ),
        Verification(
            ok=False, checked=5, first_bad_seq=6, reason="seq 6 does not link to the hash of seq 5"
        ),
    ]


def test_replay_of_events_without_hashes_claims_no_check() -> None:
    """Events built by hand (no hashes at all): the audit has no chain verdict, not "ok"."""
    audit = replay([_ev(CallRequested, 1), _ev(CallSucceeded, 2)])
    assert (audit.chain, audit.problems()) == (None, [])
