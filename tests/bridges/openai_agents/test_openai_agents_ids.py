"""Ids: call ids from the SDK, run ids from the trace (tracing on) or fresh per call (off)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agents import RunConfig, Runner, RunState
from agents.tool_context import ToolContext
from agents.tracing import set_trace_processors
from agents.tracing.processor_interface import TracingProcessor
from agents.tracing.setup import get_trace_provider
from openai_agents_helpers import (
    CONFIG,
    assistant_message,
    call_events,
    call_types,
    function_call,
    make_agent,
    outputs,
)

from agent_adapter import CallbackApproval, CallContext, Executor, Registry
from agent_adapter.integrations.openai_agents import (
    INTEGRATION,
    function_tools,
    resolve_interruptions,
)
from agent_adapter.ledger import CallRequested, MemoryLedger

APPROVE = CallbackApproval(lambda request: True, reviewer="host")
TRACED = RunConfig(workflow_name="bridge-tests")


class Traces(TracingProcessor):
    """An in-memory trace processor: records started trace ids, exports nothing."""

    def __init__(self) -> None:
        self.trace_ids: list[str] = []

    def on_trace_start(self, trace: Any) -> None:
        self.trace_ids.append(trace.trace_id)

    def on_trace_end(self, trace: Any) -> None:
        pass

    def on_span_start(self, span: Any) -> None:
        pass

    def on_span_end(self, span: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def traces() -> Iterator[Traces]:
    """Tracing on, into memory only; the SDK's own processors come back afterwards."""
    provider = get_trace_provider()
    saved = list(provider._multi_processor._processors)  # type: ignore[attr-defined]
    collector = Traces()
    set_trace_processors([collector])
    yield collector
    set_trace_processors(saved)


def build() -> tuple[Registry, list[str]]:
    """A gated ``refund`` and an ungated ``lookup``, both recording each run."""
    registry = Registry()
    ran: list[str] = []

    @registry.tool(confirm=True)
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order."""
        ran.append(f"refund {order_id}")
        return f"refunded {amount_cents} on {order_id}"

    @registry.tool
    async def lookup(order_id: str) -> str:
        """Look an order up."""
        ran.append(f"lookup {order_id}")
        return "paid"

    return registry, ran


async def run_ids(ledger: MemoryLedger) -> dict[str, str]:
    """The run id the executor recorded for each call id."""
    return {e.call_id: e.run_id async for e in ledger.read() if isinstance(e, CallRequested)}


async def test_tracing_off_gives_each_call_a_fresh_run_and_the_sdk_call_id() -> None:
    """With tracing off and no run_id in the context, every call is its own run; call ids are the
    SDK's."""
    registry, _ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, _model = make_agent(
        function_tools(registry, executor=executor),
        [
            function_call("lookup", {"order_id": "A1"}, call_id="c1"),
            function_call("lookup", {"order_id": "A2"}, call_id="c2"),
        ],
        [assistant_message("done")],
    )
    await Runner.run(agent, "go", run_config=CONFIG)
    ids = await run_ids(ledger)
    assert sorted(ids) == ["c1", "c2"]
    assert ids["c1"] != ids["c2"]
    assert all(run_id.startswith("run_") for run_id in ids.values())


async def test_a_run_id_in_a_mapping_context_is_used_when_tracing_is_off() -> None:
    """``Runner.run(..., context={"run_id": ...})`` gives every call of the run that id."""
    registry, _ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, _model = make_agent(
        function_tools(registry, executor=executor),
        [
            function_call("lookup", {"order_id": "A1"}, call_id="c1"),
            function_call("lookup", {"order_id": "A2"}, call_id="c2"),
        ],
        [assistant_message("done")],
    )
    await Runner.run(agent, "go", run_config=CONFIG, context={"run_id": "r-host"})
    assert await run_ids(ledger) == {"c1": "r-host", "c2": "r-host"}


async def test_tracing_on_uses_the_trace_id_across_the_pause(traces: Traces) -> None:
    """With tracing on, calls before and after an approval pause share the run's trace id."""
    registry, _ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, model = make_agent(
        function_tools(registry, executor=executor),
        [
            function_call("lookup", {"order_id": "A1"}, call_id="c1"),
            function_call("refund", {"order_id": "A1", "amount_cents": 5}, call_id="c2"),
        ],
        [assistant_message("done")],
    )
    result = await Runner.run(agent, "go", run_config=TRACED)
    state = await resolve_interruptions(result, APPROVE)
    await Runner.run(agent, state, run_config=TRACED)
    assert outputs(model) == {"c1": "paid", "c2": "refunded 5 on A1"}
    trace_id = traces.trace_ids[0]
    assert trace_id.startswith("trace_")
    assert await run_ids(ledger) == {"c1": trace_id, "c2": trace_id}


async def test_resuming_an_older_copy_after_a_newer_one_finished_runs_nothing_twice(
    traces: Traces,
) -> None:
    """With tracing on, an older saved state resumed later reaches step 0: the recorded value, no
    second run."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, model = make_agent(
        function_tools(registry, executor=executor),
        [function_call("refund", {"order_id": "A1", "amount_cents": 5}, call_id="c1")],
        [assistant_message("done")],
        [assistant_message("done again")],
    )
    result = await Runner.run(agent, "go", run_config=TRACED)
    older = result.to_state().to_json()  # saved before anyone decided

    newer = await resolve_interruptions(result, APPROVE)
    await Runner.run(agent, newer, run_config=TRACED)
    assert outputs(model) == {"c1": "refunded 5 on A1"}

    loaded = await RunState.from_json(agent, older)
    loaded = await resolve_interruptions(loaded, APPROVE)
    final = await Runner.run(agent, loaded, run_config=TRACED)
    assert final.final_output == "done again"
    assert outputs(model) == {"c1": "refunded 5 on A1"}
    assert ran == ["refund A1"]
    events = await call_events(ledger, "c1")
    assert [e.type for e in events] == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "approval.granted",
        "call.started",
        "call.succeeded",
        "call.replayed",
    ]
    assert {e.run_id for e in events} == {traces.trace_ids[0]}


async def test_without_a_stable_run_id_an_older_copy_is_decided_again() -> None:
    """With tracing off, re-running an older copy is a new run: the executor's port decides."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, _model = make_agent(
        function_tools(registry, executor=executor),
        [function_call("refund", {"order_id": "A1", "amount_cents": 5}, call_id="c1")],
        [assistant_message("done")],
        [assistant_message("done again")],
    )
    result = await Runner.run(agent, "go", run_config=CONFIG)
    older = result.to_state().to_json()
    await Runner.run(agent, await resolve_interruptions(result, APPROVE), run_config=CONFIG)
    loaded = await RunState.from_json(agent, older)
    loaded.approve(loaded.get_interruptions()[0])  # the SDK's approval only: no token
    await Runner.run(agent, loaded, run_config=CONFIG)
    assert ran == ["refund A1"]
    assert (await call_types(ledger, "c1"))[-2:] == ["approval.denied", "call.denied"]


def test_bind_context_reads_the_tool_call_id() -> None:
    """``INTEGRATION.bind_context`` maps a ToolContext onto the executor's CallContext."""
    ctx = ToolContext(
        context={"run_id": "r-9"}, tool_name="refund", tool_call_id="c7", tool_arguments="{}"
    )
    assert INTEGRATION.bind_context(ctx) == CallContext(
        run_id="r-9", call_id="c7", approval=None, metadata={"integration": "openai_agents"}
    )
    fresh = INTEGRATION.bind_context(
        ToolContext(context=None, tool_name="refund", tool_call_id="c8", tool_arguments="{}")
    )
    assert fresh.call_id == "c8" and fresh.run_id.startswith("run_")
