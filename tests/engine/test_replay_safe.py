"""Step 0: a repeat of (run_id, call_id) never runs the tool again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _helpers import (
    assert_one_outcome_each,
    every_call_has_one_outcome,  # noqa: F401 (a fixture)
    recorded,
    types,
)

from agent_adapter import (
    CallbackApproval,
    CallContext,
    Decision,
    DeferredApproval,
    Executor,
    Registry,
    RunLimits,
    digest,
)
from agent_adapter.errors import (
    AdapterError,
    AmbiguousEffect,
    ApprovalDenied,
    ApprovalPending,
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
from agent_adapter.ledger import CallReplayed, MemoryLedger, replay

pytestmark = pytest.mark.usefixtures("every_call_has_one_outcome")


class World:
    """Tools with behaviour chosen by arguments, and a counter of bodies run."""

    def __init__(self, clock: Any, act_timeout: float = 30, **executor_options: Any) -> None:
        self.registry = Registry()
        self.ledger = MemoryLedger()
        self.runs = 0
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

        # A short timeout only where a test wants one: a body held by a gate must not
        # time out under a loaded machine.
        @self.registry.tool(effect="do:{key}", timeout=act_timeout)
        async def act(key: str, mode: str = "ok") -> str:
            self.runs += 1
            self.entered.set()
            if mode == "tool-error":
                raise ToolError("declined")
            if mode == "crash":
                raise RuntimeError("crashed")
            if mode == "slow":
                await asyncio.Event().wait()
            if mode == "wait":
                await self.gate.wait()
            if mode == "block":
                raise GuardrailBlocked("not used")
            return f"done {key}"

        @self.registry.tool
        async def pause(key: str) -> str:
            # No effect key: a cancel reaches the body (an effect body is shielded).
            self.runs += 1
            self.entered.set()
            await self.gate.wait()
            return f"done {key}"

        @self.registry.tool(redact_result=True)
        async def secret() -> str:
            self.runs += 1
            return "classified"

        @self.registry.tool(confirm=True)
        async def guarded(x: int) -> int:
            self.runs += 1
            return x

        self.executor = Executor(self.registry, ledger=self.ledger, clock=clock, **executor_options)

    async def call(self, tool: str, args: Any, call_id: str = "c1", **ctx: Any) -> Any:
        return await self.executor.run_spec(
            self.registry.get(tool), args, CallContext(run_id="r1", call_id=call_id, **ctx)
        )


async def test_repeat_of_a_success_returns_the_recorded_value(clock: Any) -> None:
    """Same ids and digest: the recorded value comes back, call.replayed is recorded, no body."""
    w = World(clock)
    assert await w.call("act", {"key": "k"}) == "done k"
    clock.advance(1)
    assert await w.call("act", '{"mode": "ok", "key": "k"}') == "done k"
    events = await recorded(w.ledger)
    assert [e.type for e in events] == [
        "call.requested",
        "call.validated",
        "effect.claimed",
        "call.started",
        "call.succeeded",
        "call.replayed",
    ]
    assert events[-1] == CallReplayed(
        seq=6,
        ts=1001.0,
        run_id="r1",
        call_id="c1",
        tool="act",
        digest=digest({"key": "k", "mode": "ok"}),
        outcome_seq=5,
    )
    assert w.runs == 1
    await assert_one_outcome_each(w.ledger)


@pytest.mark.parametrize(
    ("mode", "error_type", "message"),
    [
        ("tool-error", ToolError, "declined"),
        ("crash", ToolFailed, "act failed: RuntimeError: crashed"),
        ("slow", ToolTimeout, "act did not finish within 0.01 s"),
    ],
)
async def test_repeat_of_a_failure_raises_the_recorded_error(
    clock: Any, mode: str, error_type: type[AdapterError], message: str
) -> None:
    """Same ids and digest after a failure: the recorded error again, and no second run."""
    w = World(clock, act_timeout=0.01)
    with pytest.raises(error_type):
        await w.call("act", {"key": "k", "mode": mode})
    with pytest.raises(error_type) as info:
        await w.call("act", {"key": "k", "mode": mode})
    assert (type(info.value), str(info.value), w.runs) == (error_type, message, 1)
    assert (await types(w.ledger))[-1] == "call.replayed"


async def test_repeats_of_refusals_raise_the_recorded_error(clock: Any) -> None:
    """Invalid, denied, limited, pending, duplicate and ambiguous outcomes replay as errors."""
    w = World(clock, limits=RunLimits(max_calls_per_tool={"secret": 0}))
    cases: list[tuple[str, Any, str, type[AdapterError]]] = [
        ("act", {"key": 1}, "i1", ToolArgsInvalid),
        ("guarded", {"x": 1}, "d1", ApprovalDenied),
        ("secret", {}, "l1", RunLimitExceeded),
    ]
    first: list[tuple[str, str]] = []
    for tool, args, call_id, error_type in cases:
        with pytest.raises(error_type) as info:
            await w.call(tool, args, call_id)
        first.append((type(info.value).__name__, str(info.value)))
    again: list[tuple[str, str]] = []
    for tool, args, call_id, error_type in cases:
        with pytest.raises(error_type) as info:
            await w.call(tool, args, call_id)
        again.append((type(info.value).__name__, str(info.value)))
    assert again == first
    assert w.runs == 0


async def test_repeat_of_pending_duplicate_and_ambiguous(clock: Any) -> None:
    """Pending (same request id), duplicate (same committing call) and ambiguous replay."""
    w = World(clock)
    w.executor = Executor(
        w.registry, ledger=w.ledger, clock=clock, approval=DeferredApproval(w.ledger, clock=clock)
    )
    with pytest.raises(ApprovalPending) as pending:
        await w.call("guarded", {"x": 1}, "p1")
    with pytest.raises(ApprovalPending) as pending_again:
        await w.call("guarded", {"x": 1}, "p1")
    assert pending_again.value.request_id == pending.value.request_id

    await w.call("act", {"key": "k"}, "a1")
    with pytest.raises(DuplicateEffect):
        await w.call("act", {"key": "k"}, "a2")
    with pytest.raises(DuplicateEffect) as dup:
        await w.call("act", {"key": "k"}, "a2")
    assert (dup.value.key, dup.value.run_id, dup.value.call_id, dup.value.same_args) == (
        "do:k",
        "r1",
        "a1",
        True,
    )

    with pytest.raises(ToolFailed):
        await w.call("act", {"key": "z", "mode": "crash"}, "z1")
    with pytest.raises(AmbiguousEffect):
        await w.call("act", {"key": "z"}, "z2")
    with pytest.raises(AmbiguousEffect) as amb:
        await w.call("act", {"key": "z"}, "z2")
    assert amb.value.key == "do:z"
    assert w.runs == 2


async def test_repeat_with_other_arguments_is_a_usage_error(clock: Any) -> None:
    """A call id reused with other arguments is ToolUsageError, and nothing is recorded."""
    w = World(clock)
    await w.call("act", {"key": "k"})
    before = len(w.ledger.records)
    with pytest.raises(ToolUsageError) as info:
        await w.call("act", {"key": "other"})
    assert str(info.value) == (
        "call c1 (run r1) already ran with other arguments; "
        "a call id cannot be reused for new arguments"
    )
    assert (len(w.ledger.records), w.runs) == (before, 1)


async def test_repeat_of_a_cancelled_call_is_a_usage_error(clock: Any) -> None:
    """A cancelled call has no value to replay: ToolUsageError saying so."""
    w = World(clock)
    task = asyncio.create_task(w.call("pause", {"key": "k"}))
    await w.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ToolUsageError) as info:
        await w.call("pause", {"key": "k"})
    assert str(info.value) == "call c1 was cancelled; it has no value to replay"
    assert w.runs == 1


async def test_repeat_of_a_redacted_result_is_a_usage_error(clock: Any) -> None:
    """A result stored only as a digest (redact_result) cannot be replayed."""
    w = World(clock)
    assert await w.call("secret", {}) == "classified"
    with pytest.raises(ToolUsageError) as info:
        await w.call("secret", {})
    assert str(info.value) == (
        "call c1 succeeded but its result was stored only as a digest (redact_result); "
        "it cannot be replayed"
    )
    succeeded = (await recorded(w.ledger))[-2]
    assert (succeeded.type, succeeded.result, succeeded.result_digest, succeeded.redacted) == (
        "call.succeeded",
        None,
        digest("classified"),
        True,
    )
    assert all(b"classified" not in r.payload for r in w.ledger.records)


async def test_repeat_while_running_is_ambiguous(clock: Any) -> None:
    """A repeat while the first is still running does not run: AmbiguousEffect."""
    w = World(clock)
    first = asyncio.create_task(w.call("act", {"key": "k", "mode": "wait"}))
    await w.entered.wait()
    with pytest.raises(AmbiguousEffect) as info:
        await w.call("act", {"key": "k", "mode": "wait"})
    assert str(info.value) == (
        "call c1 (run r1) already started and has no outcome "
        "(still running, or its process died); it does not run again"
    )
    w.gate.set()
    assert await first == "done k"
    assert w.runs == 1


async def test_repeat_after_an_edit_matches_the_requested_arguments(clock: Any) -> None:
    """The repeat is compared with the arguments as requested, before the reviewer's edit."""
    w = World(clock)
    edit = Decision(approved=True, reviewer="ui", edits={"x": 2})
    assert await w.call("guarded", {"x": 1}, approval=edit) == 2
    assert await w.call("guarded", {"x": 1}) == 2
    with pytest.raises(ToolUsageError):
        await w.call("guarded", {"x": 2})
    assert w.runs == 1


async def test_repeat_after_a_restart(clock: Any) -> None:
    """A new executor on the same ledger replays finished calls and refuses unfinished ones."""
    w = World(clock)
    await w.call("act", {"key": "k"}, "done")
    w.entered.clear()
    # A call that started and never finished: the process "died" mid-body.
    task = asyncio.create_task(w.call("act", {"key": "z", "mode": "wait"}, "died"))
    await w.entered.wait()
    # What a crash leaves: everything up to the durable call.started, no outcome.
    crashed = MemoryLedger()
    crashed.allow_unfinished = True  # type: ignore[attr-defined]
    for event in await recorded(w.ledger):
        await crashed.append(event)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    restarted = await Executor.open(w.registry, ledger=crashed, clock=clock)
    spec = w.registry.get("act")
    assert await restarted.run_spec(spec, {"key": "k"}, CallContext(run_id="r1", call_id="done"))
    # Until the dead holder's lease runs out its key is in flight, as if it were alive:
    # a new call is told to retry later, and nothing offers to resolve it.
    with pytest.raises(EffectInFlight):
        await restarted.run_spec(spec, {"key": "z"}, CallContext(run_id="r1", call_id="early"))
    assert restarted.ambiguous_effects() == {}
    clock.advance(restarted.lease_s + restarted.skew_margin_s + 1)
    with pytest.raises(AmbiguousEffect) as ambiguous:
        await restarted.run_spec(spec, {"key": "z"}, CallContext(run_id="r1", call_id="died"))
    with pytest.raises(AmbiguousEffect):
        await restarted.run_spec(spec, {"key": "z"}, CallContext(run_id="r1", call_id="new"))
    assert not isinstance(ambiguous.value, EffectInFlight)
    assert restarted.ambiguous_effects() == {"do:z": ("r1", "died")}
    assert w.runs == 2


async def test_port_is_not_asked_again_on_a_repeat(clock: Any) -> None:
    """A replayed approved call does not ask the approval port again."""
    asked = []
    w = World(clock)
    w.executor = Executor(
        w.registry,
        ledger=w.ledger,
        clock=clock,
        approval=CallbackApproval(lambda r: asked.append(r.call_id) or True),
    )
    assert await w.call("guarded", {"x": 5}) == 5
    assert await w.call("guarded", {"x": 5}) == 5
    assert (asked, w.runs) == (["c1"], 1)


async def test_a_call_that_died_before_starting_runs_again(clock: Any) -> None:
    """After a crash before call.started (e.g. while a reviewer was asked), the ids may run."""
    w = World(clock)
    asked = asyncio.Event()
    never = asyncio.Event()

    async def slow_reviewer(request: Any) -> bool:
        asked.set()
        await never.wait()
        return True

    w.executor = Executor(
        w.registry, ledger=w.ledger, clock=clock, approval=CallbackApproval(slow_reviewer)
    )
    task = asyncio.create_task(w.call("guarded", {"x": 3}))
    await asked.wait()
    crashed = MemoryLedger()
    for event in await recorded(w.ledger):
        await crashed.append(event)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await types(crashed) == ["call.requested", "call.validated", "approval.requested"]

    restarted = await Executor.open(
        w.registry, ledger=crashed, clock=clock, approval=CallbackApproval(lambda r: True)
    )
    ctx = CallContext(run_id="r1", call_id="c1")
    assert await restarted.run_spec(w.registry.get("guarded"), {"x": 3}, ctx) == 3
    assert await types(crashed) == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "call.requested",
        "call.validated",
        "approval.requested",
        "approval.granted",
        "call.started",
        "call.succeeded",
    ]
    assert (w.runs, replay(await recorded(crashed)).problems()) == (1, [])
