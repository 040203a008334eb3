"""One-use tokens: bound to the state copy, the call id, the tool and the digest; 60 s; capped."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from _helpers import timeline
from agents import Runner, RunState
from agents.agent_tool_state import set_agent_tool_state_scope
from agents.exceptions import ModelBehaviorError
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall
from openai_agents_helpers import (
    CONFIG,
    approvals_that_ran,
    assistant_message,
    call_events,
    call_types,
    function_call,
    make_agent,
    outputs,
)

from agent_adapter import CallbackApproval, Executor, Registry
from agent_adapter.bridges.openai_agents import INTEGRATION, OpenAIAgentsIntegration
from agent_adapter.integrations.openai_agents import function_tools, resolve_interruptions
from agent_adapter.ledger import ApprovalGranted, ApprovalRejected, MemoryLedger

APPROVE = CallbackApproval(lambda request: True, reviewer="host")
APPROVED_RUN = timeline("call.succeeded", approval="granted")
NO_APPROVER = timeline("call.failed", approval="denied")
DENIED = (
    '{"error":{"kind":"approval-denied","message":"refund was not approved: '
    'no approval port and no decision in the call context"}}'
)


def build() -> tuple[Registry, list[str]]:
    """A registry with one gated ``refund`` tool that records each run."""
    registry = Registry()
    ran: list[str] = []

    @registry.tool(confirm=True)
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order."""
        ran.append(order_id)
        return f"refunded {amount_cents} on {order_id}"

    return registry, ran


def refund_call(call_id: str, order_id: str = "A1", amount_cents: int = 500) -> Any:
    """The model's call of ``refund``."""
    return function_call(
        "refund", {"order_id": order_id, "amount_cents": amount_cents}, call_id=call_id
    )


async def start(executor: Executor, registry: Registry, *turns: Any, **kw: Any) -> tuple[Any, ...]:
    """Run until the first pause; returns (agent, model, result)."""
    steps = [*turns, [assistant_message("done")], [assistant_message("again")]]
    agent, model = make_agent(function_tools(registry, executor=executor, **kw), *steps)
    result = await Runner.run(agent, "go", run_config=CONFIG)
    return agent, model, result


def sources(events: list[Any]) -> list[tuple[str, str]]:
    """(type, source) of each approval decision in ``events``."""
    return [(e.type, e.source) for e in events if isinstance(e, ApprovalGranted | ApprovalRejected)]


async def test_resuming_the_same_snapshot_twice_uses_the_token_once() -> None:
    """Two resumes of one snapshot (same scope): the first runs on the token, the second gets no
    approval."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await start(executor, registry, [refund_call("c1")])
    state = await resolve_interruptions(result, APPROVE)
    snapshot = copy.deepcopy(state, {id(agent): agent})  # the same scope id, a second time
    assert snapshot._agent_tool_state_scope_id == state._agent_tool_state_scope_id

    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model) == {"c1": "refunded 500 on A1"}
    await Runner.run(agent, snapshot, run_config=CONFIG)
    assert outputs(model) == {"c1": DENIED}

    assert ran == ["A1"]
    events = await call_events(ledger, "c1")
    assert [e.type for e in events] == APPROVED_RUN + NO_APPROVER
    assert sources(events) == [("approval.granted", "context"), ("approval.denied", "none")]


async def test_a_second_to_state_gets_no_approval_and_leaves_the_token_to_its_state() -> None:
    """A second ``to_state()`` is another scope: the SDK's approval there runs nothing; the token
    still serves its own copy."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await start(executor, registry, [refund_call("c1")])
    state = await resolve_interruptions(result, APPROVE)
    other = result.to_state()
    other.approve(result.interruptions[0])

    await Runner.run(agent, other, run_config=CONFIG)
    assert outputs(model) == {"c1": DENIED}
    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model) == {"c1": "refunded 500 on A1"}
    assert ran == ["A1"]
    assert await call_types(ledger, "c1") == NO_APPROVER + APPROVED_RUN


async def test_a_state_through_json_gets_no_approval() -> None:
    """An approval stored in a state's JSON lets the SDK call the tool; the executor's port decides
    (here: yes, "port")."""
    registry, _ran = build()
    ledger = MemoryLedger()
    executor = Executor(
        registry, ledger=ledger, approval=CallbackApproval(lambda r: True, reviewer="exec")
    )
    agent, model, result = await start(executor, registry, [refund_call("c1")])
    state = await resolve_interruptions(result.to_state(), APPROVE)
    loaded = await RunState.from_json(agent, state.to_json())
    assert loaded._agent_tool_state_scope_id != state._agent_tool_state_scope_id

    await Runner.run(agent, loaded, run_config=CONFIG)
    assert outputs(model) == {"c1": "refunded 500 on A1"}
    events = await call_events(ledger, "c1")
    assert [e.type for e in events] == APPROVED_RUN
    granted = next(e for e in events if isinstance(e, ApprovalGranted))
    assert (granted.source, granted.reviewer) == ("port", "exec")
    assert await approvals_that_ran(ledger) == {"c1": ("port", "exec", True)}


async def test_always_approve_never_approves_for_the_executor() -> None:
    """``always_approve=True`` lets the SDK run this and later calls; without tokens the executor
    denies both."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await start(
        executor, registry, [refund_call("c1")], [refund_call("c2", "A2")]
    )
    state = result.to_state()
    state.approve(result.interruptions[0], always_approve=True)
    result = await Runner.run(agent, state, run_config=CONFIG)

    assert result.interruptions == []  # c2 was not even paused: the SDK's flag is sticky
    assert outputs(model) == {"c1": DENIED, "c2": DENIED}
    assert ran == []
    assert await call_types(ledger, "c1") == NO_APPROVER
    assert await call_types(ledger, "c2") == NO_APPROVER


async def test_a_token_covers_only_its_own_call_even_with_always_approve() -> None:
    """The port approved c1 (token) and the host set always_approve: c1 runs, the later c2 is
    denied."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await start(
        executor, registry, [refund_call("c1")], [refund_call("c2", "A2")]
    )
    state = await resolve_interruptions(result, APPROVE)
    state.approve(result.interruptions[0], always_approve=True)
    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model) == {"c1": "refunded 500 on A1", "c2": DENIED}
    assert ran == ["A1"]


async def test_other_arguments_under_the_same_call_id_get_no_approval() -> None:
    """The SDK refuses a reused call id with new arguments; the token's digest refuses them too."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, _model, result = await start(executor, registry, [refund_call("c1")])
    state = await resolve_interruptions(result, APPROVE)
    scope = state._agent_tool_state_scope_id
    snapshot = copy.deepcopy(state, {id(agent): agent})
    for call in _tool_calls(snapshot):
        call.arguments = '{"order_id":"A1","amount_cents":99999}'
    with pytest.raises(ModelBehaviorError, match="reused a tool call ID"):
        await Runner.run(agent, snapshot, run_config=CONFIG)
    assert await call_types(ledger, "c1") == []

    # Below the SDK: the same state copy, call id and tool, other arguments.
    [tool] = agent.tools
    forged = '{"order_id":"A1","amount_cents":99999}'
    ctx = ToolContext(context=None, tool_name="refund", tool_call_id="c1", tool_arguments=forged)
    set_agent_tool_state_scope(ctx, scope)
    assert await tool.on_invoke_tool(ctx, forged) == DENIED
    assert ran == []
    events = await call_events(ledger, "c1")
    assert [e.type for e in events] == NO_APPROVER
    assert sources(events) == [("approval.denied", "none")]


def _tool_calls(state: Any) -> list[ResponseFunctionToolCall]:
    """Every raw function call object reachable from ``state`` (for forging a snapshot)."""
    found: list[ResponseFunctionToolCall] = []
    seen: set[int] = set()

    def walk(obj: Any, depth: int) -> None:
        if id(obj) in seen or depth > 12 or isinstance(obj, str | int | float | bool | None):
            return
        seen.add(id(obj))
        if isinstance(obj, ResponseFunctionToolCall):
            found.append(obj)
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value, depth + 1)
        elif isinstance(obj, list | tuple | set):
            for value in obj:
                walk(value, depth + 1)
        elif hasattr(obj, "__dict__"):
            for key, value in vars(obj).items():
                if key not in ("agent", "_current_agent", "_starting_agent"):
                    walk(value, depth + 1)

    walk(state, 0)
    return found


@pytest.mark.parametrize(("wait_s", "output"), [(59.9, "refunded 500 on A1"), (60.0, DENIED)])
async def test_a_token_expires_after_60_seconds(
    token_clock: Any, wait_s: float, output: str
) -> None:
    """A token used within 60 s approves; at 60 s it has expired and the executor decides."""
    registry, _ran = build()
    executor = Executor(registry)
    agent, model, result = await start(executor, registry, [refund_call("c1")])
    state = await resolve_interruptions(result, APPROVE)
    token_clock.advance(wait_s)
    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model) == {"c1": output}


async def test_one_resolve_issues_at_most_256_tokens(caplog: pytest.LogCaptureFixture) -> None:
    """257 approved calls: 256 tokens, one call falls back to the executor's port, one WARNING with
    the count."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(
        registry, ledger=ledger, approval=CallbackApproval(lambda r: True, reviewer="exec")
    )
    calls = [refund_call(f"c{i}", f"A{i}") for i in range(257)]
    agent, _model, result = await start(executor, registry, calls)
    assert len(result.interruptions) == 257
    with caplog.at_level(logging.WARNING, logger="agent_adapter.bridges.openai_agents"):
        state = await resolve_interruptions(result, APPROVE)
    assert [(r.levelname, r.getMessage().split(" ")[0]) for r in caplog.records] == [
        ("WARNING", "1")
    ]
    assert len(INTEGRATION.tokens) == 256
    await Runner.run(agent, state, run_config=CONFIG)
    assert len(ran) == 257
    granted = [e async for e in ledger.read() if isinstance(e, ApprovalGranted)]
    assert sorted({(e.source, e.reviewer) for e in granted}) == [
        ("context", "host"),
        ("port", "exec"),
    ]
    assert [e.source for e in granted].count("port") == 1
    ran_with = await approvals_that_ran(ledger)
    assert len(ran_with) == 257
    assert sorted(set(ran_with.values())) == [("context", "host", True), ("port", "exec", True)]
    assert len(INTEGRATION.tokens) == 0


class TickingClock:
    """A token clock that moves one second at every reading while ``ticking``: time passes
    between any two things the bridge does, as it does when a resolve is slow."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.ticking = True

    def __call__(self) -> float:
        if self.ticking:
            self.now += 1.0
        return self.now


async def test_256_approvals_all_run_on_tokens_that_live_from_the_resolves_return() -> None:
    """256 approved calls, resolved while the token clock moves a second at every reading:
    every token lives its 60 s from the moment resolve_interruptions returns, so 59 s later
    each call runs exactly once on its own token (source context); none falls back to the
    executor (which has no port: it would deny) and no warning is logged."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    ticking = TickingClock()
    INTEGRATION.set_clock(ticking)
    try:
        calls = [refund_call(f"c{i}", f"A{i}") for i in range(256)]
        agent, model, result = await start(executor, registry, calls)
        assert len(result.interruptions) == 256
        state = await resolve_interruptions(result, APPROVE)
        ticking.ticking = False
        ticking.now += 59.0
        await Runner.run(agent, state, run_config=CONFIG)
    finally:
        INTEGRATION.set_clock(None)
    assert sorted(ran) == sorted(f"A{i}" for i in range(256))
    assert outputs(model) == {f"c{i}": f"refunded 500 on A{i}" for i in range(256)}
    ran_with = await approvals_that_ran(ledger)
    assert ran_with == {f"c{i}": ("context", "host", True) for i in range(256)}
    assert len(INTEGRATION.tokens) == 0


async def test_a_full_table_drops_its_oldest_token_with_a_warning(
    caplog: pytest.LogCaptureFixture, token_clock: Any
) -> None:
    """A table of two: the third token drops the first, whose call falls back to the executor's
    port."""
    registry, ran = build()
    ledger = MemoryLedger()
    small = OpenAIAgentsIntegration(capacity=2, clock=token_clock)
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await start(
        executor,
        registry,
        [refund_call("c1", "A1"), refund_call("c2", "A2"), refund_call("c3", "A3")],
        integration=small,
    )
    with caplog.at_level(logging.WARNING, logger="agent_adapter.bridges.openai_agents"):
        state = await resolve_interruptions(result, APPROVE)
    assert [(r.levelname, r.getMessage().split(" ")[0]) for r in caplog.records] == [
        ("WARNING", "1")
    ]
    assert len(small.tokens) == 2
    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model) == {"c1": DENIED, "c2": "refunded 500 on A2", "c3": "refunded 500 on A3"}
    assert sorted(ran) == ["A2", "A3"]
