"""Regression tests for what a review found past the boundary checks (issue 10): each
reproduced a call without its one outcome, an unreadable record, a placeholder run as
arguments, or a wrong verdict on an intact or altered ledger."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from _helpers import assert_one_outcome_each, recorded

from agent_adapter import (
    CallbackApproval,
    CallContext,
    DeferredApproval,
    Executor,
    Registry,
)
from agent_adapter.errors import (
    AdapterError,
    ApprovalPending,
    GuardrailBlocked,
    ToolError,
    ToolUsageError,
)
from agent_adapter.ledger import MemoryLedger, SQLiteLedger, decode_event, replay


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_an_intact_ledger_with_int_valued_floats_opens_without_a_word(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """timeout=1 (an int) and an int clock: every float field is recorded as a float, and
    the replay's hash check uses the stored bytes: no false 'altered', verify=True opens."""
    registry = Registry()

    @registry.tool(timeout=1)
    async def slow(n: int) -> int:
        if n == 0:
            await asyncio.Event().wait()  # past the timeout
        return n

    ticks = iter(range(1_700_000_000, 1_800_000_000))
    path = tmp_path / "l.db"
    async with Executor(registry, ledger=SQLiteLedger(path), clock=lambda: next(ticks)) as ex:
        assert await ex.call("slow", {"n": 1}, run_id="r") == 1
    reopened = await Executor.open(registry, ledger=SQLiteLedger(path), verify=True)
    await reopened.close()
    assert warnings_of(caplog) == []


async def test_an_altered_record_of_an_int_clock_warns(caplog: pytest.LogCaptureFixture) -> None:
    """The hash check on stored bytes finds the alteration an int clock used to hide."""
    registry = Registry()

    @registry.tool()
    async def fast(n: int) -> int:
        return n

    ledger = MemoryLedger()
    ticks = iter(range(1_700_000_000, 1_800_000_000))
    executor = Executor(registry, ledger=ledger, clock=lambda: next(ticks))
    assert await executor.call("fast", {"n": 1}, run_id="r") == 1
    record = ledger.records[-1]
    record.payload = record.payload.replace(b'"result":1', b'"result":9')
    await Executor.open(registry, ledger=ledger)
    assert [w for w in warnings_of(caplog) if "does not match its hash (altered)" in w]


async def test_a_renamed_event_type_warns(caplog: pytest.LogCaptureFixture) -> None:
    """A record whose type was renamed (it reads as UnknownEvent) is checked by its bytes."""
    ledger = MemoryLedger()
    registry = Registry()

    @registry.tool(effect="pay:{ref}")
    async def pay(ref: str) -> str:
        return ref

    await Executor(registry, ledger=ledger).call("pay", {"ref": "I1"}, run_id="r")
    claim = next(r for r in ledger.records if r.type == "effect.claimed")
    claim.payload = claim.payload.replace(b'"effect.claimed"', b'"effect.claimed.v2"')
    await Executor.open(registry, ledger=ledger)
    assert [w for w in warnings_of(caplog) if f"seq {claim.seq} does not match" in w]


@pytest.mark.parametrize(
    "error",
    [ToolError(None), ToolError(402), GuardrailBlocked(None)],
    ids=repr,  # type: ignore[arg-type]
)
async def test_errors_whose_message_is_not_text_still_end_the_call(error: AdapterError) -> None:
    """str() of the error never raises: the call gets its one outcome, its key is free."""
    registry = Registry()

    @registry.tool(effect="pay:{ref}")
    async def pay(ref: str) -> str:
        raise error

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    with pytest.raises(AdapterError):
        await executor.call("pay", {"ref": "I1"}, run_id="r")
    await assert_one_outcome_each(ledger)


async def test_redact_result_with_int_keys_succeeds() -> None:
    """{200: "ok"} is digested as JSON with text keys (it escaped as a TypeError)."""
    registry = Registry()

    @registry.tool(redact_result=True)
    async def status() -> dict[int, str]:
        return {200: "ok"}

    ledger = MemoryLedger()
    assert await Executor(registry, ledger=ledger).call("status", {}, run_id="r") == {200: "ok"}
    await assert_one_outcome_each(ledger)


async def test_refuse_normalises_its_reviewer_and_reason() -> None:
    """refuse(reviewer=None, reason=None) records "" for both; a reviewer of another
    type is refused before anything is recorded."""
    registry = Registry()

    @registry.tool(confirm=True)
    async def pay(ref: str) -> str:
        return ref

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    ctx = CallContext(run_id="r", call_id="c1")
    assert await executor.refuse(registry.get("pay"), {"ref": "a"}, ctx, reviewer=None, reason=None)  # type: ignore[arg-type]
    with pytest.raises(ToolUsageError):
        await executor.refuse(
            registry.get("pay"),
            {"ref": "a"},
            CallContext(run_id="r", call_id="c2"),
            reviewer=5,  # type: ignore[arg-type]
        )
    denied = [e for e in await recorded(ledger) if e.type == "call.denied"]
    assert [(e.call_id, e.reviewer, e.reason) for e in denied] == [("c1", "", "")]  # type: ignore[attr-defined]


async def test_a_port_pending_without_a_text_id_is_recorded() -> None:
    """A custom port raising ApprovalPending(request_id=None): call.pending recorded."""
    registry = Registry()

    @registry.tool(confirm=True)
    async def pay(ref: str) -> str:
        return ref

    def port(request: Any) -> bool:
        raise ApprovalPending("queued", request_id=None)  # type: ignore[arg-type]

    ledger = MemoryLedger()
    with pytest.raises(ApprovalPending):
        await Executor(registry, ledger=ledger, approval=CallbackApproval(port)).call(
            "pay", {"ref": "a"}, run_id="r"
        )
    await assert_one_outcome_each(ledger)


def test_a_number_msgspec_cannot_hold_reads_flagged() -> None:
    """1e900 is valid JSON no float holds: the record reads as a flagged UnknownEvent."""
    event = decode_event(b'{"type":"call.started","ts":1e900}')
    assert event.malformed


async def test_str_subclasses_are_recorded_as_their_text() -> None:
    """A reviewer, a reason and a tool name given as str subclasses are recorded as
    plain text (they were encoded as '<unencodable S>')."""

    class S(str):
        pass

    registry = Registry()

    @registry.tool(name=S("pay"), effect="pay:{ref}")
    async def pay(ref: str) -> str:
        raise RuntimeError("down")

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    with pytest.raises(AdapterError):
        await executor.call("pay", {"ref": "a"}, run_id="r")
    await executor.resolve_effect("pay:a", outcome="failed", reviewer=S("alice"), reason=S("ok"))
    events = await recorded(ledger)
    assert {e.tool for e in events if e.call_id and e.type != "effect.resolved"} == {"pay"}
    resolved = [e for e in events if e.type == "effect.resolved"]
    assert [(e.reviewer, e.reason) for e in resolved] == [("alice", "ok")]  # type: ignore[attr-defined]
    assert (await ledger.verify()).ok


@pytest.mark.parametrize("reading", [float("nan"), True, "noon"], ids=repr)
async def test_a_clock_that_returns_no_time_is_refused_before_anything_is_recorded(
    reading: Any,
) -> None:
    """A clock reading that is not a finite number: ValueError at once, nothing recorded;
    a Decimal or an int is converted."""
    registry = Registry()

    @registry.tool()
    async def echo(n: int) -> int:
        return n

    ledger = MemoryLedger()
    with pytest.raises(ValueError, match="not a finite number of seconds"):
        await Executor(registry, ledger=ledger, clock=lambda: reading).call("echo", {"n": 1})
    assert ledger.records == []
    decimal = Executor(registry, ledger=MemoryLedger(), clock=lambda: Decimal("1.5"))
    assert await decimal.call("echo", {"n": 2}) == 2


async def test_metadata_changed_after_the_context_was_built_is_repaired() -> None:
    """A hook that puts a lone surrogate into ctx.metadata: the event is repaired and
    recorded, and the call has its one outcome (it ended with no outcome before)."""
    registry = Registry()

    class Hook:
        def before_tool(self, call: Any) -> None:
            call.ctx.metadata["note"] = "caf\udce9"

    @registry.tool()
    async def echo(n: int) -> int:
        return n

    ledger = MemoryLedger()
    ctx = CallContext(run_id="r", call_id="c1", metadata={"a": 1})
    executor = Executor(registry, ledger=ledger, hooks=[Hook()])
    assert await executor.run_spec(registry.get("echo"), {"n": 1}, ctx) == 1
    await assert_one_outcome_each(ledger)
    requested = (await recorded(ledger))[0]
    assert requested.metadata == {"a": 1, "note": "caf\\udce9"}  # type: ignore[attr-defined]


async def test_deferred_edits_holding_objects_are_refused() -> None:
    """An edit value of a str subclass is refused, never recorded as a placeholder the
    call then runs with."""

    class Account(str):
        pass

    registry = Registry()

    @registry.tool(confirm=True)
    async def pay(to: str, amount: int) -> str:
        return to

    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger, approval=deferred)
    with pytest.raises(ApprovalPending):
        await executor.call("pay", {"to": "a1", "amount": 5}, run_id="r")
    [request] = await deferred.pending()
    before = len(ledger.records)
    with pytest.raises(ToolUsageError, match="cannot be recorded as JSON arguments"):
        await deferred.answer(
            request.request_id, approved=True, reviewer="b", edits={"to": Account("x")}
        )
    assert len(ledger.records) == before


async def test_object_arguments_of_a_redacting_tool_are_not_recorded_in_clear() -> None:
    """A dataclass given as the arguments (refused by validation) is recorded as its
    JSON form with the redacted field hidden (it was recorded in clear)."""

    @dataclasses.dataclass
    class Args:
        card: str
        cents: int

    registry = Registry()

    @registry.tool(redact=["card"])
    async def charge(card: str, cents: int) -> str:
        return "ok"

    ledger = MemoryLedger()
    with pytest.raises(AdapterError):
        await Executor(registry, ledger=ledger).call("charge", Args("4111111111111111", 5))
    payloads = b"".join(r.payload for r in ledger.records)
    assert re.search(rb"(?<![0-9a-f])4111111111111111(?![0-9a-f])", payloads) is None
    assert replay([e async for e in ledger.read()], await ledger.verify()).problems() == []
