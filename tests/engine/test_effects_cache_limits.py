"""Effect keys (idempotency), the TTL cache and run limits."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from _helpers import (
    assert_one_outcome_each,
    every_call_has_one_outcome,  # noqa: F401 (a fixture)
    own_pid_start,
    recorded,
    timeline,
    types,
)

from agent_adapter import CallContext, Decision, Executor, Registry, RunLimits, digest
from agent_adapter.engine import host_identity
from agent_adapter.errors import (
    AmbiguousEffect,
    ApprovalDenied,
    DuplicateEffect,
    EffectInFlight,
    GuardrailBlocked,
    RunLimitExceeded,
    ToolArgsInvalid,
    ToolError,
    ToolFailed,
    ToolTimeout,
    ToolUsageError,
)
from agent_adapter.ledger import (
    CallAmbiguous,
    CallCached,
    CallDuplicate,
    CallLimited,
    EffectClaimed,
    EffectResolved,
    MemoryLedger,
)

pytestmark = pytest.mark.usefixtures("every_call_has_one_outcome")


def ctx(call_id: str, run_id: str = "r1") -> CallContext:
    return CallContext(run_id=run_id, call_id=call_id)


class Refunds:
    """A refund tool whose behaviour the test picks per call."""

    def __init__(self, clock: Any, **options: Any) -> None:
        self.registry = Registry()
        self.ledger = MemoryLedger()
        self.ran: list[tuple[str, int]] = []
        self.mode = "ok"
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

        @self.registry.tool(effect="refund:{order_id}", **options)
        async def refund(order_id: str, amount: int) -> str:
            self.ran.append((order_id, amount))
            self.entered.set()
            if self.gate is not None:
                await self.gate.wait()
            if self.mode == "tool-error":
                raise ToolError("nothing refunded")
            if self.mode == "crash":
                raise RuntimeError("connection reset")
            return f"refunded {amount}"

        self.spec = refund
        self.executor = Executor(self.registry, ledger=self.ledger, clock=clock)

    async def run(self, call_id: str, amount: int = 5, run_id: str = "r1") -> Any:
        return await self.executor.run_spec(
            self.spec, {"order_id": "A1", "amount": amount}, ctx(call_id, run_id)
        )


# -- effects ---------------------------------------------------------------------------


async def test_committed_key_refuses_a_duplicate_with_the_same_args(clock: Any) -> None:
    """A second call with the same effect key and arguments is DuplicateEffect, naming c1."""
    t = Refunds(clock)
    assert await t.run("c1") == "refunded 5"
    with pytest.raises(DuplicateEffect) as info:
        await t.run("c2", run_id="r2")
    error = info.value
    assert (error.key, error.run_id, error.call_id, error.same_args, str(error)) == (
        "refund:A1",
        "r1",
        "c1",
        True,
        "effect refund:A1 was already committed by call c1 (run r1) with the same arguments",
    )
    d = digest({"order_id": "A1", "amount": 5})
    c1 = await recorded(t.ledger, call_id="c1")
    assert [e.type for e in c1] == timeline("call.succeeded", effect=True)
    assert (c1[2], c1[3].effect_key) == (
        EffectClaimed(
            seq=3,
            ts=1000.0,
            run_id="r1",
            call_id="c1",
            tool="refund",
            key="refund:A1",
            digest=d,
            holder=t.executor.executor_id,
            pid=os.getpid(),
            host=host_identity(),
            lease_until=1030.0,
            pid_start=own_pid_start(),
        ),
        "refund:A1",
    )
    c2 = await recorded(t.ledger, call_id="c2")
    assert [e.type for e in c2] == timeline("call.duplicate")
    assert c2[-1] == CallDuplicate(
        seq=c2[-1].seq,
        ts=1000.0,
        run_id="r2",
        call_id="c2",
        tool="refund",
        key="refund:A1",
        by_run_id="r1",
        by_call_id="c1",
        same_args=True,
    )
    assert t.ran == [("A1", 5)]


async def test_same_key_with_other_args_is_a_conflict(clock: Any) -> None:
    """The same key with other arguments is DuplicateEffect with same_args False."""
    t = Refunds(clock)
    await t.run("c1", amount=5)
    with pytest.raises(DuplicateEffect) as info:
        await t.run("c2", amount=9)
    assert (info.value.same_args, str(info.value), t.ran) == (
        False,
        "effect refund:A1 was already committed by call c1 (run r1) "
        "with other arguments (conflict)",
        [("A1", 5)],
    )


async def test_tool_error_releases_the_key(clock: Any) -> None:
    """A ToolError means nothing happened: the key is free and the next call runs."""
    t = Refunds(clock)
    t.mode = "tool-error"
    with pytest.raises(ToolError):
        await t.run("c1")
    t.mode = "ok"
    assert await t.run("c2") == "refunded 5"
    assert (t.ran, t.executor.state.effects["refund:A1"].call_id) == ([("A1", 5)] * 2, "c2")


@pytest.mark.parametrize("failure", ["crash", "timeout"])
async def test_failure_after_start_makes_the_key_ambiguous(clock: Any, failure: str) -> None:
    """After ToolFailed or a timeout the effect may have happened: the next call is ambiguous."""
    t = Refunds(clock, timeout=0.01)
    if failure == "crash":
        t.mode = "crash"
        with pytest.raises(ToolFailed):
            await t.run("c1")
    else:
        t.gate = asyncio.Event()
        with pytest.raises(ToolTimeout):
            await t.run("c1")
        t.gate = None
    t.mode = "ok"
    with pytest.raises(AmbiguousEffect) as info:
        await t.run("c2")
    reason = (
        "effect refund:A1 is claimed by call c1 (run r1) whose outcome is unknown; "
        "resolve it with resolve_effect"
    )
    assert (info.value.key, str(info.value), t.ran) == ("refund:A1", reason, [("A1", 5)])
    c2 = await recorded(t.ledger, call_id="c2")
    assert c2[-1] == CallAmbiguous(
        seq=c2[-1].seq,
        ts=1000.0,
        run_id="r1",
        call_id="c2",
        tool="refund",
        key="refund:A1",
        reason=reason,
    )
    assert t.executor.ambiguous_effects() == {"refund:A1": ("r1", "c1")}


async def test_cancel_during_the_body_is_held_until_its_outcome(clock: Any) -> None:
    """A call cancelled in its body finishes the body first: its real outcome is recorded
    (the key committed, never ambiguous), then the caller gets CancelledError."""
    t = Refunds(clock)
    t.gate = asyncio.Event()
    task = asyncio.create_task(t.run("c1"))
    await t.entered.wait()
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()
    t.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await types(t.ledger))[-1] == "call.succeeded"
    with pytest.raises(DuplicateEffect):
        await t.run("c2")
    assert t.executor.ambiguous_effects() == {}


async def test_key_claimed_by_a_running_call_is_in_flight(clock: Any) -> None:
    """While a call holding the key runs, another executor's call for the key is refused
    as in flight
    (EffectInFlight, an AmbiguousEffect), naming the holder and its lease, with a message
    that does not suggest resolving the key (that would run it twice)."""
    t = Refunds(clock)
    # Another executor on the same ledger (a call of the holder's own executor waits).
    other = Executor(t.registry, ledger=t.ledger, clock=clock)
    await other.start()
    t.gate = asyncio.Event()
    first = asyncio.create_task(t.run("c1"))
    await t.entered.wait()
    with pytest.raises(EffectInFlight) as info:
        await other.run_spec(t.spec, {"order_id": "A1", "amount": 5}, ctx("c2"))
    ex = t.executor
    assert str(info.value) == (
        f"effect refund:A1 is in flight: held by executor {ex.executor_id} (pid "
        f"{os.getpid()} on host {host_identity()}) for call c1 (run r1), lease until "
        "1970-01-01 00:17:10 UTC; it does not run twice: retry later, once that call has "
        "finished (the same call id decides again)"
    )
    assert "resolve" not in str(info.value)
    assert (info.value.kind, info.value.holder, info.value.lease_until) == (
        "effect-in-flight",
        ex.executor_id,
        1030.0,
    )
    assert isinstance(info.value, AmbiguousEffect)
    assert (ex.ambiguous_effects(), list(ex.in_flight_effects())) == ({}, ["refund:A1"])
    with pytest.raises(ToolUsageError, match="is in flight, not ambiguous"):
        await ex.resolve_effect("refund:A1", outcome="failed", reviewer="ops")
    t.gate.set()
    assert await first == "refunded 5"
    assert t.ran == [("A1", 5)]
    await assert_one_outcome_each(t.ledger)


@pytest.mark.parametrize(
    ("resolution", "next_error"), [("failed", None), ("committed", DuplicateEffect)]
)
async def test_resolve_effect(clock: Any, resolution: str, next_error: Any) -> None:
    """resolve_effect "failed" frees an ambiguous key; "committed" commits it to its call."""
    t = Refunds(clock)
    t.mode = "crash"
    with pytest.raises(ToolFailed):
        await t.run("c1")
    t.mode = "ok"
    await t.executor.resolve_effect("refund:A1", outcome=resolution, reviewer="ops", reason="seen")
    resolved = (await recorded(t.ledger))[-1]
    assert resolved == EffectResolved(
        seq=resolved.seq,
        ts=1000.0,
        run_id="r1",
        call_id="c1",
        key="refund:A1",
        outcome=resolution,
        reviewer="ops",
        reason="seen",
    )
    if next_error is None:
        assert await t.run("c2") == "refunded 5"
    else:
        with pytest.raises(DuplicateEffect) as info:
            await t.run("c2")
        assert (info.value.call_id, info.value.same_args) == ("c1", True)
    assert t.executor.ambiguous_effects() == {}


async def test_resolve_effect_refuses_keys_that_are_not_ambiguous(clock: Any) -> None:
    """Only an ambiguous key can be resolved; bad arguments are usage errors."""
    t = Refunds(clock)
    await t.run("c1")
    messages = []
    for key, outcome, reviewer in (
        ("refund:A1", "failed", "ops"),
        ("nope", "failed", "ops"),
        ("refund:A1", "maybe", "ops"),
        ("refund:A1", "failed", ""),
    ):
        with pytest.raises(ToolUsageError) as info:
            await t.executor.resolve_effect(key, outcome=outcome, reviewer=reviewer)
        messages.append(str(info.value))
    assert messages == [
        "effect refund:A1 is committed, not ambiguous; nothing to resolve",
        "effect nope is unknown, not ambiguous; nothing to resolve",
        'outcome must be "committed" or "failed"',
        "resolving an effect needs a reviewer name",
    ]


async def test_output_guard_block_commits_the_key(clock: Any) -> None:
    """When an output guard blocks, the body did run: its effect key is committed."""

    def hide(call: Any, result: Any) -> None:
        raise GuardrailBlocked("hidden")

    t = Refunds(clock, output_guards=[hide])
    with pytest.raises(GuardrailBlocked):
        await t.run("c1")
    with pytest.raises(DuplicateEffect) as info:
        await t.run("c2")
    assert (info.value.call_id, t.ran) == ("c1", [("A1", 5)])


async def test_effect_key_render_failure_is_a_usage_error(clock: Any) -> None:
    """A callable effect that raises ends the call as call.failed with ToolUsageError."""
    registry = Registry()

    @registry.tool(effect=lambda args: args["missing"])
    async def f(x: int) -> None:
        return None

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    with pytest.raises(ToolUsageError) as info:
        await executor.run_spec(f, {"x": 1}, ctx("c1"))
    assert str(info.value) == "effect key of f cannot be rendered: 'missing'"
    assert await types(ledger) == ["call.requested", "call.validated", "call.failed"]


# -- cache -----------------------------------------------------------------------------


def cached_tool(clock: Any, **options: Any) -> tuple[Executor, Any, MemoryLedger, list[int]]:
    registry = Registry()
    ran: list[int] = []

    @registry.tool(cache=10, **options)
    async def price(sku: int) -> int:
        ran.append(sku)
        if sku < 0:
            raise ToolError("no such sku")
        return sku * 100

    ledger = MemoryLedger()
    return Executor(registry, ledger=ledger, clock=clock), price, ledger, ran


async def test_cache_hit_within_ttl_and_miss_after(clock: Any) -> None:
    """A success is served from the cache (call.cached) until its TTL passes, across runs."""
    executor, price, ledger, ran = cached_tool(clock)
    assert await executor.run_spec(price, {"sku": 1}, ctx("c1")) == 100
    clock.advance(9.5)
    assert await executor.run_spec(price, {"sku": 1}, ctx("c2", "r2")) == 100
    assert await executor.run_spec(price, {"sku": 2}, ctx("c3")) == 200
    clock.advance(0.5)
    assert await executor.run_spec(price, {"sku": 1}, ctx("c4")) == 100
    assert ran == [1, 2, 1]
    c2 = await recorded(ledger, call_id="c2")
    assert [e.type for e in c2] == timeline("call.cached")
    assert c2[-1] == CallCached(
        seq=c2[-1].seq,
        ts=1009.5,
        run_id="r2",
        call_id="c2",
        tool="price",
        duration_ms=0.0,
        result=100,
        digest=digest({"sku": 1}),
    )


async def test_expired_entries_leave_the_cache_without_a_lookup(clock: Any) -> None:
    """A long-lived executor keeps about TTL x rate entries, not one per value ever cached."""
    executor, price, _ledger, ran = cached_tool(clock)
    for sku in range(100):  # 100 values, one a second: the first 90 expire on the way
        await executor.run_spec(price, {"sku": sku}, ctx(f"c{sku}"))
        clock.advance(1.0)
    assert (len(executor.state.cache), len(ran)) == (10, 100)
    # What is left is the 10 youngest, still served from the cache.
    assert await executor.run_spec(price, {"sku": 95}, ctx("again")) == 9500
    assert len(ran) == 100


async def test_a_long_lived_entry_does_not_hold_back_another_tools_expired_ones(
    clock: Any,
) -> None:
    """Expiry is per tool: a day-long entry stored first does not keep 10 s ones alive."""
    registry = Registry()

    @registry.tool(cache=86_400)
    async def daily(x: int) -> int:
        return x

    @registry.tool(cache=10)
    async def quick(x: int) -> int:
        return x

    executor = Executor(registry, clock=clock)
    await executor.call("daily", {"x": 0}, run_id="r", call_id="d")
    for x in range(100):
        clock.advance(1.0)
        await executor.call("quick", {"x": x}, run_id="r", call_id=f"q{x}")
    tools = sorted(tool for tool, _digest in executor.state.cache)
    assert tools == ["daily"] + ["quick"] * 10


async def test_failures_are_never_cached(clock: Any) -> None:
    """A failed call leaves nothing in the cache; the next identical call runs."""
    executor, price, ledger, ran = cached_tool(clock)
    for call_id in ("c1", "c2"):
        with pytest.raises(ToolError):
            await executor.run_spec(price, {"sku": -1}, ctx(call_id))
    assert (ran, executor.state.cache) == ([-1, -1], {})
    assert await types(ledger, "c2") == timeline("call.failed")


async def test_approval_still_applies_before_a_cache_hit(clock: Any) -> None:
    """A cached tool that needs approval is asked before the cache answers."""
    executor, price, ledger, ran = cached_tool(clock, confirm=True)
    yes = Decision(approved=True, reviewer="ui")
    await executor.run_spec(price, {"sku": 1}, CallContext(run_id="r", call_id="c1", approval=yes))
    with pytest.raises(ApprovalDenied):
        await executor.run_spec(price, {"sku": 1}, ctx("c2"))
    assert (
        await executor.run_spec(
            price, {"sku": 1}, CallContext(run_id="r", call_id="c3", approval=yes)
        )
        == 100
    )
    assert ran == [1]
    assert await types(ledger, "c3") == timeline("call.cached", approval="granted")


# -- limits ----------------------------------------------------------------------------


def limited(clock: Any, limits: RunLimits) -> tuple[Executor, MemoryLedger]:
    registry = Registry()

    @registry.tool
    async def a(fail: bool = False) -> str:
        if fail:
            raise ToolError("no")
        return "a"

    @registry.tool
    async def b() -> str:
        return "b"

    ledger = MemoryLedger()
    return Executor(registry, ledger=ledger, limits=limits, clock=clock), ledger


async def test_max_calls_per_run(clock: Any) -> None:
    """The call after max_calls in a run is call.limited; other runs are not affected."""
    executor, ledger = limited(clock, RunLimits(max_calls=2))
    assert await executor.call("a", {}, run_id="r1", call_id="c1") == "a"
    with pytest.raises(ToolError):
        await executor.call("a", {"fail": True}, run_id="r1", call_id="c2")
    with pytest.raises(RunLimitExceeded) as info:
        await executor.call("b", {}, run_id="r1", call_id="c3")
    assert await executor.call("b", {}, run_id="r2", call_id="c4") == "b"
    reason = "run r1 reached max_calls=2"
    assert str(info.value) == reason
    c3 = await recorded(ledger, call_id="c3")
    assert [e.type for e in c3] == timeline("call.limited")
    assert c3[-1] == CallLimited(
        seq=c3[-1].seq, ts=1000.0, run_id="r1", call_id="c3", tool="b", reason=reason
    )
    assert executor.state.run_calls == {"r1": 2, "r2": 1}


@pytest.mark.parametrize("per_tool", [1, {"a": 1}])
async def test_max_calls_per_tool(clock: Any, per_tool: Any) -> None:
    """max_calls_per_tool (an int, or a mapping) limits one tool in one run."""
    executor, ledger = limited(clock, RunLimits(max_calls_per_tool=per_tool))
    await executor.call("a", {}, run_id="r1", call_id="c1")
    with pytest.raises(RunLimitExceeded) as info:
        await executor.call("a", {}, run_id="r1", call_id="c2")
    assert str(info.value) == "run r1 reached max_calls_per_tool=1 for a"
    assert await executor.call("b", {}, run_id="r1", call_id="c3") == "b"
    assert await executor.call("a", {}, run_id="r2", call_id="c4") == "a"
    assert await types(ledger, "c2") == timeline("call.limited")


async def test_only_calls_past_the_check_count(clock: Any) -> None:
    """Invalid, blocked and limited calls do not count; denied ones do (they passed the check)."""
    registry = Registry()

    def block(call: Any) -> None:
        if call.args["x"] < 0:
            raise GuardrailBlocked("negative")

    @registry.tool(guards=[block], confirm=lambda call, c: call.args["x"] > 100)
    async def f(x: int) -> int:
        return x

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, limits=RunLimits(max_calls=2), clock=clock)
    with pytest.raises(ToolArgsInvalid):
        await executor.call("f", {"x": "no"}, run_id="r", call_id="c1")
    with pytest.raises(GuardrailBlocked):
        await executor.call("f", {"x": -1}, run_id="r", call_id="c2")
    with pytest.raises(ApprovalDenied):
        await executor.call("f", {"x": 500}, run_id="r", call_id="c3")
    assert await executor.call("f", {"x": 1}, run_id="r", call_id="c4") == 1
    with pytest.raises(RunLimitExceeded):
        await executor.call("f", {"x": 1}, run_id="r", call_id="c5")
    with pytest.raises(RunLimitExceeded):
        await executor.call("f", {"x": 1}, run_id="r", call_id="c6")
    assert executor.state.run_calls == {"r": 2}


async def test_edited_call_counts_once(clock: Any) -> None:
    """An approved edit re-runs the limit check but the call still counts once."""
    registry = Registry()

    @registry.tool(confirm=True)
    async def f(x: int) -> int:
        return x

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, limits=RunLimits(max_calls=1), clock=clock)
    edit = Decision(approved=True, reviewer="ui", edits={"x": 2})
    assert (
        await executor.run_spec(f, {"x": 1}, CallContext(run_id="r", call_id="c1", approval=edit))
        == 2
    )
    assert executor.state.run_calls == {"r": 1}


async def test_cache_hits_are_independent_copies(clock: Any) -> None:
    """Each cache hit gets its own copy: mutating one result does not change the next hit."""
    registry = Registry()

    @registry.tool(cache=10)
    async def items() -> dict[str, list[int]]:
        return {"items": [1]}

    executor = Executor(registry, clock=clock)
    first = await executor.call("items", {})
    hit = await executor.call("items", {})
    hit["items"].append(2)
    first["items"].append(3)
    assert await executor.call("items", {}) == {"items": [1]}
