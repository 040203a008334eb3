"""The two activities on their own (Temporal's ActivityEnvironment, no server): errors
mapped by kind, generically, and the catch-up that lets a retry see another worker's
outcome."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from temporal_support import require

require()

from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from agent_adapter import Executor, Registry, digest  # noqa: E402
from agent_adapter.errors import (  # noqa: E402
    AmbiguousEffect,
    LedgerError,
    ToolError,
    ToolUsageError,
)
from agent_adapter.integrations.temporal import (  # noqa: E402
    Prepared,
    PrepareInput,
    RunInput,
    ToolActivities,
    ToolResult,
)
from agent_adapter.ledger import MemoryLedger, SQLiteLedger  # noqa: E402


def _env(workflow_id: str = "wf-1", attempt: int = 1) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=workflow_id, attempt=attempt)
    return env


def _registry(ran: list[str]) -> Registry:
    registry = Registry()

    @registry.tool(effect="pay:{order_id}")
    async def pay(order_id: str) -> str:
        """Pay."""
        ran.append(order_id)
        return f"paid {order_id}"

    @registry.tool
    async def broken() -> str:
        """Fails unexpectedly."""
        raise RuntimeError("boom")

    @registry.tool
    async def declines() -> str:
        """Says it did nothing."""
        raise ToolError("card declined")

    @registry.tool(confirm=lambda call, ctx: call.args["amount"] > 100)
    async def spend(amount: int) -> int:
        """Approval above 100."""
        return amount

    return registry


DUPLICATE = "effect pay:A was already committed by call c1 (run wf-1) with the same arguments"


def _failure(error: BaseException) -> tuple[str | None, bool, str]:
    assert isinstance(error, ApplicationError)
    return error.type, error.non_retryable, error.message


async def test_host_kinds_are_non_retryable_application_errors_typed_by_kind() -> None:
    """tool-failed and duplicate-effect raise, typed by kind and never retried; the
    duplicate names the key and the call that committed it; tool-error is data."""
    ran: list[str] = []
    executor = Executor(_registry(ran))
    activities = ToolActivities(executor)
    env = _env()
    first = await env.run(
        activities.run, RunInput(tool="pay", args={"order_id": "A"}, call_id="c1")
    )
    with pytest.raises(ApplicationError) as duplicate:
        await _env("wf-2").run(
            activities.run, RunInput(tool="pay", args={"order_id": "A"}, call_id="c1")
        )
    with pytest.raises(ApplicationError) as broken:
        await env.run(activities.run, RunInput(tool="broken", args={}, call_id="c2"))
    declined = await env.run(activities.run, RunInput(tool="declines", args={}, call_id="c3"))
    assert (first, ran, declined) == (
        ToolResult(value="paid A", ledger_call_id="c1"),
        ["A"],
        ToolResult(error={"kind": "tool-error", "message": "card declined"}, ledger_call_id="c3"),
    )
    assert (_failure(duplicate.value), duplicate.value.details) == (
        ("duplicate-effect", True, "duplicate-effect: " + DUPLICATE),
        (
            {
                "kind": "duplicate-effect",
                "message": DUPLICATE,
                "key": "pay:A",
                "run_id": "wf-1",
                "call_id": "c1",
                "same_args": True,
                "ledger_call_id": "c1",
            },
        ),
    )
    assert _failure(broken.value) == (
        "tool-failed",
        True,
        "tool-failed: broken failed: RuntimeError: boom",
    )


class _Quarantined(AmbiguousEffect):
    """A kind this bridge has never heard of."""

    kind = "effect-quarantined"


class _Refuses:
    def before_tool(self, call: Any) -> None:
        raise _Quarantined("pay:A is quarantined by an operator")


async def test_a_new_kind_needs_no_change_in_the_bridge() -> None:
    """An error of a kind added later is mapped by its ``kind``: a non-retryable failure
    whose type is that kind."""
    executor = Executor(_registry([]), hooks=[_Refuses()])
    with pytest.raises(ApplicationError) as refused:
        await _env().run(
            ToolActivities(executor).run, RunInput(tool="pay", args={"order_id": "A"}, call_id="c1")
        )
    assert _failure(refused.value) == (
        "effect-quarantined",
        True,
        "effect-quarantined: pay:A is quarantined by an operator",
    )


class _FailingLedger(MemoryLedger):
    async def append_many(self, events: Any) -> Any:
        raise LedgerError("ledger is locked")


async def test_a_ledger_failure_is_left_retryable() -> None:
    """A store failure is not a refusal: Temporal may retry it (step 0 makes that safe)."""
    executor = Executor(_registry([]), ledger=_FailingLedger())
    with pytest.raises(ApplicationError) as failed:
        await _env().run(
            ToolActivities(executor).run, RunInput(tool="pay", args={"order_id": "A"}, call_id="c1")
        )
    assert _failure(failed.value) == ("ledger", False, "ledger: ledger is locked")


async def test_a_retry_catches_up_with_another_workers_outcome(tmp_path: Path) -> None:
    """Two workers on one SQLite ledger: the first records the outcome; the second, open
    since before, is asked the retry (attempt 2) and answers from the ledger without
    running the body again."""
    ran: list[str] = []
    path = str(tmp_path / "ledger.db")
    first = await Executor.open(_registry(ran), ledger=SQLiteLedger(path))
    second = await Executor.open(_registry(ran), ledger=SQLiteLedger(path))
    try:
        request = RunInput(tool="pay", args={"order_id": "A"}, call_id="c1")
        done = await _env().run(ToolActivities(first).run, request)
        retried = await _env(attempt=2).run(ToolActivities(second).run, request)
    finally:
        await first.close()
        await second.close()
    ledger = SQLiteLedger(path)
    types = [event.type async for event in ledger.read()]
    await ledger.close()
    assert (done, retried, ran, types) == (
        ToolResult(value="paid A", ledger_call_id="c1"),
        ToolResult(value="paid A", ledger_call_id="c1"),
        ["A"],
        [
            "call.requested",
            "call.validated",
            "effect.claimed",
            "call.started",
            "call.succeeded",
            "call.replayed",
        ],
    )


async def test_prepare_digests_asks_the_rule_and_records_nothing() -> None:
    """``prepare`` validates, digests and asks the confirm rule; it appends no event."""
    ledger = MemoryLedger()
    activities = ToolActivities(Executor(_registry([]), ledger=ledger))
    env = _env()
    small = await env.run(
        activities.prepare, PrepareInput(tool="spend", args={"amount": 5}, call_id="c1")
    )
    large = await env.run(
        activities.prepare, PrepareInput(tool="spend", args='{"amount": 500}', call_id="c2")
    )
    assert (small, large, [e async for e in ledger.read()]) == (
        Prepared(tool="spend", call_id="c1", digest=digest({"amount": 5}), args={"amount": 5}),
        Prepared(
            tool="spend",
            call_id="c2",
            digest=digest({"amount": 500}),
            needs_approval=True,
            args={"amount": 500},
        ),
        [],
    )


def test_tool_activities_refuses_what_is_not_an_executor() -> None:
    """A registry (or anything else) instead of an executor is a one-line usage error."""
    with pytest.raises(ToolUsageError) as refused:
        ToolActivities(Registry())  # type: ignore[arg-type]
    assert str(refused.value) == (
        "ToolActivities takes an Executor (await Executor.open(registry, ledger=...)), not Registry"
    )
