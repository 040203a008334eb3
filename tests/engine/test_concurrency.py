"""Concurrency: many calls at once, atomic claims and limits, and cancellation."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from _helpers import (
    assert_one_outcome_each,
    every_call_has_one_outcome,  # noqa: F401 (a fixture)
    recorded,
    timeline,
    types,
)

from agent_adapter import CallbackApproval, CallContext, Executor, Registry, RunLimits
from agent_adapter.errors import DuplicateEffect, RunLimitExceeded
from agent_adapter.ledger import CallCancelled, MemoryLedger

pytestmark = pytest.mark.usefixtures("every_call_has_one_outcome")


class Gate:
    """Holds tool bodies until ``n`` of them are inside, then lets the test release them."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.inside = 0
        self.all_in = asyncio.Event()
        self.release = asyncio.Event()

    async def enter(self) -> None:
        self.inside += 1
        if self.inside == self.n:
            self.all_in.set()
        await self.release.wait()


async def test_500_concurrent_calls(clock: Any) -> None:
    """500 calls in flight at once: gap-free seq, a valid chain, one outcome each, in order."""
    n = 500
    gate = Gate(n)
    registry = Registry()

    @registry.tool
    async def work(i: int) -> int:
        await gate.enter()
        return i * 2

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    tasks = [
        asyncio.create_task(executor.call("work", {"i": i}, run_id=f"r{i % 7}", call_id=f"c{i}"))
        for i in range(n)
    ]
    await gate.all_in.wait()
    assert gate.inside == n  # every body is running at the same time
    gate.release.set()
    assert await asyncio.gather(*tasks) == [i * 2 for i in range(n)]

    events = await recorded(ledger)
    assert [e.seq for e in events] == list(range(1, 4 * n + 1))
    assert (await ledger.verify()).ok
    await assert_one_outcome_each(ledger)
    per_call: dict[str, list[str]] = {}
    for e in events:
        per_call.setdefault(e.call_id, []).append(e.type)
    assert set(map(tuple, per_call.values())) == {
        ("call.requested", "call.validated", "call.started", "call.succeeded")
    }
    assert len(per_call) == n


async def test_concurrent_claims_of_one_effect_key(clock: Any) -> None:
    """Of 50 concurrent calls for one effect key, exactly one runs; the rest, calls of the
    holder's own executor, wait for its outcome and are told it is a duplicate."""
    gate = Gate(1)
    registry = Registry()
    ran = []

    @registry.tool(effect="pay:{ref}")
    async def pay(ref: str, n: int) -> int:
        ran.append(n)
        await gate.enter()
        return n

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    tasks = [
        asyncio.create_task(executor.call("pay", {"ref": "A", "n": i}, call_id=f"c{i}"))
        for i in range(50)
    ]
    await gate.all_in.wait()
    gate.release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    kinds = Counter(type(r).__name__ for r in results)
    assert (len(ran), kinds) == (1, Counter({"int": 1, "DuplicateEffect": 49}))
    assert all(isinstance(r, int | DuplicateEffect) for r in results)
    await assert_one_outcome_each(ledger)


async def test_concurrent_calls_respect_run_limits(clock: Any) -> None:
    """100 concurrent calls against max_calls=10: exactly 10 run, 90 are limited."""
    gate = Gate(10)
    registry = Registry()

    @registry.tool
    async def step(i: int) -> int:
        await gate.enter()
        return i

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, limits=RunLimits(max_calls=10), clock=clock)
    tasks = [
        asyncio.create_task(executor.call("step", {"i": i}, run_id="r", call_id=f"c{i}"))
        for i in range(100)
    ]
    await gate.all_in.wait()
    gate.release.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert Counter(type(r).__name__ for r in results) == Counter(
        {"int": 10, "RunLimitExceeded": 90}
    )
    assert all(isinstance(r, int | RunLimitExceeded) for r in results)
    assert executor.state.run_calls == {"r": 10}
    await assert_one_outcome_each(ledger)


async def test_cancel_in_the_middle_of_a_slow_tool(clock: Any) -> None:
    """Cancelling the task mid-body records call.cancelled (started) and re-raises."""
    gate = Gate(1)
    registry = Registry()

    @registry.tool
    async def slow() -> str:
        await gate.enter()
        return "never"

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    task = asyncio.create_task(executor.run_spec(slow, {}, CallContext(run_id="r", call_id="c")))
    await gate.all_in.wait()
    clock.advance(2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    events = await recorded(ledger)
    assert [e.type for e in events] == timeline("call.cancelled")
    assert events[-1] == CallCancelled(
        seq=4,
        ts=1002.0,
        run_id="r",
        call_id="c",
        tool="slow",
        duration_ms=2000.0,
        started=True,
        counted=True,
    )
    assert (await ledger.verify()).ok


async def test_cancel_while_the_port_decides(clock: Any) -> None:
    """A cancel while the approval port is deciding: call.cancelled, not started, no body."""
    asked = asyncio.Event()
    never = asyncio.Event()
    ran = []

    async def decide(request: Any) -> bool:
        asked.set()
        await never.wait()
        return True

    registry = Registry()

    @registry.tool(confirm=True)
    async def act() -> None:
        ran.append(1)

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=CallbackApproval(decide), clock=clock)
    task = asyncio.create_task(executor.run_spec(act, {}, CallContext(run_id="r", call_id="c")))
    await asked.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    events = await recorded(ledger)
    assert ([e.type for e in events], events[-1].started, ran) == (
        ["call.requested", "call.validated", "approval.requested", "call.cancelled"],
        False,
        [],
    )


async def test_cancel_during_after_tool_adds_no_second_outcome(clock: Any) -> None:
    """A cancel that lands in an after_tool hook leaves the recorded success as the one outcome."""
    in_hook = asyncio.Event()
    never = asyncio.Event()

    class SlowObserver:
        async def after_tool(self, call: Any, outcome: Any) -> None:
            in_hook.set()
            await never.wait()

    registry = Registry()

    @registry.tool
    async def ping() -> str:
        return "pong"

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[SlowObserver()], clock=clock)
    task = asyncio.create_task(executor.run_spec(ping, {}, CallContext(run_id="r", call_id="c")))
    await in_hook.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await types(ledger) == timeline("call.succeeded")
    await assert_one_outcome_each(ledger)
    assert executor.state.outcomes == {
        ("r", "c"): (executor.state.outcomes[("r", "c")][0], "call.succeeded")
    }
