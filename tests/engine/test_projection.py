"""Executor.open / start: projections rebuilt from the ledger equal the live executor's."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from _helpers import (
    every_call_has_one_outcome,  # noqa: F401 (a fixture)
    recorded,
)

from agent_adapter import CallContext, Decision, Executor, Registry, RunLimits
from agent_adapter.errors import AdapterError
from agent_adapter.ledger import MemoryLedger

pytestmark = pytest.mark.usefixtures("every_call_has_one_outcome")

LIMITS = RunLimits(max_calls=5, max_calls_per_tool={"pay": 4, "quote": 2})


def snapshot(executor: Executor) -> dict[str, Any]:
    """Everything the executor remembers, as plain values."""
    state = executor.state
    return {
        "outcomes": dict(state.outcomes),
        "inflight": {k: msgspec.structs.asdict(v) for k, v in state.inflight.items()},
        "run_calls": dict(state.run_calls),
        "tool_calls": dict(state.tool_calls),
        "cache": dict(state.cache),
        "effects": {k: msgspec.structs.asdict(v) for k, v in state.effects.items()},
    }


def build() -> tuple[Registry, asyncio.Event, asyncio.Event]:
    registry = Registry()
    rule_entered = asyncio.Event()
    never = asyncio.Event()

    async def rule(call: Any, ctx: Any) -> bool:
        if call.args.get("amount", 0) == 13:
            rule_entered.set()
            await never.wait()
        return bool(call.args.get("amount", 0) > 100)

    @registry.tool(effect="pay:{ref}", confirm=rule)
    async def pay(ref: str, amount: int) -> str:
        if amount == 0:
            raise RuntimeError("crash")
        if amount < 0:
            from agent_adapter.errors import ToolError

            raise ToolError("refused")
        return f"paid {ref}"

    @registry.tool(cache=60)
    async def quote(sku: str) -> int:
        return len(sku)

    @registry.tool(effect=lambda args: args["nope"])
    async def broken(x: int) -> None:
        return None

    return registry, rule_entered, never


async def workload(executor: Executor, rule_entered: asyncio.Event) -> list[str]:
    """A mix of every outcome across two runs; returns each call's result or error kind."""
    yes = Decision(approved=True, reviewer="ui")
    plan: list[tuple[str, str, str, dict[str, Any], Any]] = [
        ("r1", "c1", "pay", {"ref": "a", "amount": 5}, None),
        ("r1", "c2", "pay", {"ref": "a", "amount": 5}, None),  # duplicate
        ("r1", "c3", "pay", {"ref": "b", "amount": 0}, None),  # crash -> ambiguous key
        ("r1", "c4", "pay", {"ref": "b", "amount": 1}, None),  # ambiguous
        ("r2", "c5", "pay", {"ref": "c", "amount": -1}, None),  # ToolError releases
        ("r2", "c6", "pay", {"ref": "c", "amount": 500}, yes),  # approved
        ("r2", "c7", "pay", {"ref": "d", "amount": 500}, None),  # denied
        ("r2", "c8", "quote", {"sku": "abc"}, None),
        ("r2", "c9", "quote", {"sku": "abc"}, None),  # cached
        ("r2", "c10", "quote", {"sku": "q"}, None),  # run limit
        ("r2", "c11", "pay", {"ref": "x"}, None),  # invalid
        # The effect key cannot render: refused right after validation (where keys are
        # rendered, so checks see them), before the limit check: not counted.
        ("r1", "c12", "broken", {"x": 1}, None),
    ]
    results = []
    for run_id, call_id, tool, args, approval in plan:
        ctx = CallContext(run_id=run_id, call_id=call_id, approval=approval)
        try:
            results.append(str(await executor.run_spec(executor.registry.get(tool), args, ctx)))
        except AdapterError as exc:
            results.append(exc.kind)
    # Cancelled while the confirm rule runs: after the limit check, before any other event.
    task = asyncio.create_task(executor.call("pay", {"ref": "f", "amount": 13}, run_id="r3"))
    await rule_entered.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        results.append("cancelled")
    return results


async def test_open_rebuilds_the_projections_identically(clock: Any) -> None:
    """Limits, cache, effect keys and the outcome index come back equal after Executor.open."""
    registry, rule_entered, _never = build()
    ledger = MemoryLedger()
    live = Executor(registry, ledger=ledger, limits=LIMITS, clock=clock)
    results = await workload(live, rule_entered)
    assert results == [
        "paid a",
        "duplicate-effect",
        "tool-failed",
        "ambiguous-effect",
        "tool-error",
        "paid c",
        "approval-denied",
        "3",
        "3",
        "run-limit-exceeded",
        "tool-args-invalid",
        "tool-usage",
        "cancelled",
    ]
    reopened = await Executor.open(registry, ledger=ledger, limits=LIMITS, clock=clock)
    assert snapshot(reopened) == snapshot(live)
    assert (live.state.run_calls, live.state.tool_calls) == (
        {"r1": 4, "r2": 5, "r3": 1},
        {
            ("r1", "pay"): 4,
            ("r2", "pay"): 3,
            ("r2", "quote"): 2,
            ("r3", "pay"): 1,
        },
    )


async def test_reopened_executor_behaves_like_the_old_one(clock: Any) -> None:
    """A new executor on a copy of the ledger answers the next calls as the live one does."""
    registry, rule_entered, _never = build()
    ledger = MemoryLedger()
    live = Executor(registry, ledger=ledger, limits=LIMITS, clock=clock)
    await workload(live, rule_entered)
    copy = MemoryLedger()
    for event in await recorded(ledger):
        await copy.append(event)
    reopened = await Executor.open(registry, ledger=copy, limits=LIMITS, clock=clock)

    async def answers(executor: Executor) -> list[str]:
        out = []
        for run_id, call_id, tool, args in [
            # r1 has 4 calls counted (the broken effect key is refused before its limit
            # check): one more fits, then r1 is at max_calls.
            ("r1", "n0", "quote", {"sku": "zz"}),
            ("r1", "n1", "quote", {"sku": "yy"}),
            ("r3", "n2", "pay", {"ref": "a", "amount": 5}),  # committed key
            ("r3", "n3", "pay", {"ref": "b", "amount": 1}),  # ambiguous key
            ("r3", "n4", "quote", {"sku": "abc"}),  # cached
            ("r2", "c5", "pay", {"ref": "c", "amount": -1}),  # a repeat: replayed error
        ]:
            try:
                out.append(str(await executor.call(tool, args, run_id=run_id, call_id=call_id)))
            except AdapterError as exc:
                out.append(exc.kind)
        return out

    expected = [
        "2",
        "run-limit-exceeded",
        "duplicate-effect",
        "ambiguous-effect",
        "3",
        "tool-error",
    ]
    assert (await answers(live), await answers(reopened)) == (expected, expected)
    assert [(e.type, e.call_id) for e in await recorded(ledger)] == [
        (e.type, e.call_id) for e in await recorded(copy)
    ]


async def test_start_after_live_calls_does_not_count_twice(clock: Any) -> None:
    """Entering ``async with`` after some calls rebuilds the state once, not on top of it."""
    registry, _entered, _never = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, limits=LIMITS, clock=clock)
    await executor.call("quote", {"sku": "abc"}, run_id="r", call_id="c1")
    before = snapshot(executor)
    async with executor:
        assert snapshot(executor) == before
        assert await executor.call("quote", {"sku": "abc"}, run_id="r", call_id="c2") == 3
    assert executor.state.run_calls == {"r": 2}


async def test_an_executor_nobody_started_replays_its_ledger_before_the_first_call() -> None:
    """Executor(ledger=...) without open()/start(): the first call replays, so a committed
    effect key still refuses a second refund."""
    from agent_adapter.errors import DuplicateEffect

    registry = Registry()
    ran: list[str] = []

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        ran.append(order_id)
        return "ok"

    ledger = MemoryLedger()
    first = Executor(registry, ledger=ledger)
    assert await first.call("refund", {"order_id": "A1"}) == "ok"
    second = Executor(registry, ledger=ledger)  # a new process, started by nobody
    with pytest.raises(DuplicateEffect):
        await second.call("refund", {"order_id": "A1"})
    assert ran == ["A1"]
