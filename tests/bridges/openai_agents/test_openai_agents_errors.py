"""Errors across the SDK: model-visible kinds as JSON output, the rest raised, cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _helpers import timeline
from agents import Runner
from agents.exceptions import UserError
from openai_agents_helpers import (
    CONFIG,
    assistant_message,
    call_types,
    function_call,
    make_agent,
    outputs,
)

from agent_adapter import DeferredApproval, Executor, Registry, RunLimits
from agent_adapter.errors import (
    AdapterError,
    DuplicateEffect,
    GuardrailBlocked,
    ToolError,
    ToolFailed,
    ToolTimeout,
)
from agent_adapter.integrations.openai_agents import (
    function_tools,
    run,
    run_sync,
    unwrap,
)
from agent_adapter.ledger import MemoryLedger


def no_refunds_over_limit(call: Any) -> None:
    """An input guard: blocks refunds of 10,000 or more."""
    if call.args.get("amount_cents", 0) >= 10_000:
        raise GuardrailBlocked("refunds of 10000 or more need a manager")


def build(gate: asyncio.Event | None = None) -> Registry:
    """A registry with one tool per error path."""
    registry = Registry()

    @registry.tool(guards=[no_refunds_over_limit])
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order."""
        return f"refunded {amount_cents} on {order_id}"

    @registry.tool
    async def out_of_stock(sku: str) -> str:
        """Always refuses on purpose."""
        raise ToolError(f"{sku} is out of stock")

    @registry.tool
    async def crash(sku: str) -> str:
        """Fails by accident."""
        raise ValueError(f"bad sku {sku}")

    @registry.tool(timeout=0.01)
    async def slow(sku: str) -> str:
        """Never finishes in time."""
        await asyncio.Event().wait()
        return sku

    @registry.tool(effect="ship:{order_id}")
    async def ship(order_id: str) -> str:
        """Ship an order once."""
        return f"shipped {order_id}"

    @registry.tool
    async def values(kind: str) -> Any:
        """Returns a value of the asked kind."""
        return {"str": "plain text", "dict": {"a": 1, "b": [True, None]}, "list": [1, 2.5]}.get(
            kind, 7
        )

    @registry.tool(confirm=True)
    async def wire(amount_cents: int) -> str:
        """A gated tool."""
        return f"wired {amount_cents}"

    @registry.tool
    async def hang(sku: str) -> str:
        """Waits until cancelled."""
        assert gate is not None
        gate.set()
        await asyncio.Event().wait()
        return sku

    return registry


async def run_turn(executor: Executor, *calls: Any, **kwargs: Any) -> Any:
    """One turn of ``calls``, then a final message; returns the scripted model."""
    agent, model = make_agent(
        function_tools(executor.registry, executor=executor),
        list(calls),
        [assistant_message("done")],
    )
    await Runner.run(agent, "go", run_config=CONFIG, **kwargs)
    return model


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (
            function_call("refund", "{not json", call_id="c1"),
            '{"error":{"kind":"tool-args-invalid","message":"invalid arguments for refund: '
            'JSON is malformed: object keys must be strings (byte 1)"}}',
        ),
        (
            function_call("refund", {"order_id": "A1"}, call_id="c1"),
            '{"error":{"kind":"tool-args-invalid","message":"invalid arguments for refund: '
            'Object missing required field `amount_cents`"}}',
        ),
        (
            function_call("out_of_stock", {"sku": "X9"}, call_id="c1"),
            '{"error":{"kind":"tool-error","message":"X9 is out of stock"}}',
        ),
        (
            function_call("refund", {"order_id": "A1", "amount_cents": 20_000}, call_id="c1"),
            '{"error":{"kind":"guardrail-blocked","message":'
            '"refunds of 10000 or more need a manager"}}',
        ),
    ],
)
async def test_model_visible_errors_are_tool_output(call: Any, expected: str) -> None:
    """Invalid arguments (bad JSON too), ToolError and GuardrailBlocked reach the model as JSON."""
    model = await run_turn(Executor(build()), call)
    assert outputs(model) == {"c1": expected}


async def test_run_limit_is_model_visible_within_one_run_id() -> None:
    """RunLimitExceeded reaches the model; a run_id in a mapping context makes calls one run."""
    ledger = MemoryLedger()
    executor = Executor(build(), ledger=ledger, limits=RunLimits(max_calls=1))
    model = await run_turn(
        executor,
        function_call("values", {"kind": "str"}, call_id="c1"),
        function_call("values", {"kind": "str"}, call_id="c2"),
        context={"run_id": "r-ctx"},
    )
    assert outputs(model) == {
        "c1": "plain text",
        "c2": '{"error":{"kind":"run-limit-exceeded","message":"run r-ctx reached max_calls=1"}}',
    }
    assert await call_types(ledger, "c2") == timeline("call.limited")


async def test_approval_pending_is_model_visible() -> None:
    """With no token and a deferred executor port the call ends approval-pending, shown to the
    model."""
    ledger = MemoryLedger()
    executor = Executor(build(), ledger=ledger, approval=DeferredApproval(ledger))
    agent, model = make_agent(
        function_tools(executor.registry, executor=executor),
        [function_call("wire", {"amount_cents": 5}, call_id="c1")],
        [assistant_message("done")],
    )
    result = await Runner.run(agent, "go", run_config=CONFIG)
    state = result.to_state()
    state.approve(result.interruptions[0])  # the SDK's approval alone
    await Runner.run(agent, state, run_config=CONFIG)
    [request_id] = [e.request_id async for e in ledger.read() if e.type == "call.pending"]
    assert outputs(model) == {
        "c1": '{"error":{"kind":"approval-pending","message":'
        f'"approval {request_id} for wire is pending"}}}}'
    }


@pytest.mark.parametrize(
    ("calls", "error", "outcome"),
    [
        ([function_call("crash", {"sku": "X9"}, call_id="c1")], ToolFailed, "call.failed"),
        ([function_call("slow", {"sku": "X9"}, call_id="c1")], ToolTimeout, "call.timed_out"),
    ],
)
async def test_other_errors_fail_the_run_with_our_error_as_cause(
    calls: list[Any], error: type[AdapterError], outcome: str
) -> None:
    """ToolFailed and ToolTimeout make Runner.run raise the SDK's UserError, ours as __cause__."""
    ledger = MemoryLedger()
    executor = Executor(build(), ledger=ledger)
    agent, _model = make_agent(
        function_tools(executor.registry, executor=executor), calls, [assistant_message("done")]
    )
    with pytest.raises(UserError, match="Error running tool") as caught:
        await Runner.run(agent, "go", run_config=CONFIG)
    assert type(caught.value.__cause__) is error
    assert unwrap(caught.value) is caught.value.__cause__
    assert (await call_types(ledger, "c1"))[-1] == outcome


async def test_a_duplicate_effect_is_raised_to_the_host_not_retried_by_the_model() -> None:
    """A second call with a committed effect key fails the run, DuplicateEffect as the cause."""
    executor = Executor(build())
    agent, _model = make_agent(
        function_tools(executor.registry, executor=executor),
        [function_call("ship", {"order_id": "A1"}, call_id="c1")],
        [function_call("ship", {"order_id": "A1"}, call_id="c2")],
        [assistant_message("done")],
    )
    with pytest.raises(UserError) as caught:
        await Runner.run(agent, "go", run_config=CONFIG)
    duplicate = caught.value.__cause__
    assert isinstance(duplicate, DuplicateEffect)
    assert (duplicate.key, duplicate.call_id, duplicate.same_args) == ("ship:A1", "c1", True)


async def test_run_gives_our_exception_back_as_itself() -> None:
    """``run`` is Runner.run with a tool's AdapterError raised as itself, its own cause kept."""
    executor = Executor(build())
    agent, _model = make_agent(
        function_tools(executor.registry, executor=executor),
        [function_call("crash", {"sku": "X9"}, call_id="c1")],
    )
    with pytest.raises(ToolFailed, match="bad sku X9") as caught:
        await run(agent, "go", run_config=CONFIG)
    assert isinstance(caught.value.__cause__, ValueError)


async def test_run_returns_the_result_when_nothing_fails() -> None:
    """``run`` returns Runner.run's result unchanged."""
    executor = Executor(build())
    agent, _model = make_agent(
        function_tools(executor.registry, executor=executor), [assistant_message("hello")]
    )
    result = await run(agent, "go", run_config=CONFIG)
    assert result.final_output == "hello"


def test_run_sync_gives_our_exception_back_as_itself() -> None:
    """``run_sync`` is Runner.run_sync with a tool's AdapterError raised as itself."""
    executor = Executor(build())
    agent, _model = make_agent(
        function_tools(executor.registry, executor=executor),
        [function_call("crash", {"sku": "X9"}, call_id="c1")],
    )
    policy = asyncio.get_event_loop_policy()
    try:
        with pytest.raises(ToolFailed, match="bad sku X9"):
            run_sync(agent, "go", run_config=CONFIG)
    finally:
        # Runner.run_sync keeps the thread's default loop open on purpose; the test closes it.
        policy.get_event_loop().close()
        policy.set_event_loop(None)


def test_unwrap_walks_the_chain_and_leaves_foreign_errors_alone() -> None:
    """``unwrap`` returns the first AdapterError in the cause chain, else the error itself."""
    ours = ToolFailed("boom")
    try:
        try:
            raise ours
        except ToolFailed as exc:
            raise UserError("Error running tool crash") from exc
    except UserError as wrapped:
        assert unwrap(wrapped) is ours
    plain = RuntimeError("not ours")
    assert unwrap(plain) is plain
    looped = RuntimeError("a")
    looped.__cause__ = looped
    assert unwrap(looped) is looped


@pytest.mark.parametrize(
    ("kind", "output"),
    [
        ("str", "plain text"),
        ("dict", '{"a":1,"b":[true,null]}'),
        ("list", "[1,2.5]"),
        ("int", "7"),
    ],
)
async def test_return_values_reach_the_model_as_text_or_json(kind: str, output: str) -> None:
    """A str is passed through; anything else is sent as JSON (never a Python repr)."""
    model = await run_turn(Executor(build()), function_call("values", {"kind": kind}, call_id="c1"))
    assert outputs(model) == {"c1": output}


async def test_cancellation_propagates_and_is_recorded() -> None:
    """Cancelling the host's task while a tool runs raises CancelledError; the ledger says
    call.cancelled."""
    gate = asyncio.Event()
    ledger = MemoryLedger()
    executor = Executor(build(gate), ledger=ledger)
    agent, _model = make_agent(
        function_tools(executor.registry, executor=executor),
        [function_call("hang", {"sku": "X9"}, call_id="c1")],
        [assistant_message("done")],
    )
    task = asyncio.ensure_future(Runner.run(agent, "go", run_config=CONFIG))
    await gate.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await call_types(ledger, "c1") == timeline("call.cancelled")
