"""ExecutorToolset in a real Agent run: the export, the ids, malformed JSON, where refusals go."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pydantic_ai
import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed as FrameworkToolFailed
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import DeferredToolRequests
from pydantic_support import REFUND, ScriptedModel, Support, agent_for, events, tags, tool_call

from agent_adapter import CallbackApproval, Executor, Registry
from agent_adapter.errors import GuardrailBlocked, IntegrationError, ToolFailed, ToolTimeout
from agent_adapter.integrations.pydantic_ai import NAME, ExecutorToolset
from agent_adapter.ledger import MemoryLedger


async def test_the_toolset_lists_the_tools_exported_to_pydantic_ai() -> None:
    """Only tools targeted to pydantic_ai are listed, each with the registry's own schema,
    its description, and no retry budget (refusals are never "please try again")."""
    support = Support()
    toolset = ExecutorToolset(support.registry, executor=Executor(support.registry))
    tools = await toolset.get_tools(None)  # type: ignore[arg-type]  # the listing reads no context
    refund = support.registry.get("refund")
    assert sorted(tools) == ["cancel", "lookup", "refund"]
    assert (
        tools["refund"].tool_def.parameters_json_schema,
        tools["refund"].tool_def.description,
        {t.max_retries for t in tools.values()},
        toolset.id,
        ExecutorToolset(support.registry, id="support").id,
    ) == (refund.json_schema, refund.description, {0}, None, "support")


async def test_ids_are_the_conversation_and_the_tool_call() -> None:
    """run_id is the run's conversation_id (never pydantic-ai's per-run run_id); call_id is
    the tool call id."""
    support = Support()
    ledger = MemoryLedger()
    model = ScriptedModel([[tool_call("lookup", {"order_id": "A1"}, "call-1")], "done"])
    toolset = ExecutorToolset(support.registry, executor=Executor(support.registry, ledger=ledger))
    result = await agent_for(model, toolset).run("go", conversation_id="conv-1")
    seen = {(e.run_id, e.call_id) for e in await events(ledger)}
    assert (result.output, seen, result.run_id != "conv-1") == (
        "done",
        {("conv-1", "call-1")},
        True,
    )
    assert model.output("call-1") == ({"order_id": "A1", "status": "shipped"}, "success")


@pytest.mark.parametrize(
    "raw", ['{"order_id": "A1"', "[1]", '"A1"', ""], ids=["truncated", "array", "string", "empty"]
)
async def test_malformed_arguments_are_recorded_as_invalid_and_the_run_goes_on(raw: str) -> None:
    """Arguments pydantic-ai's own validator would refuse before any toolset saw them (the
    run ending in UnexpectedModelBehavior, the ledger empty) reach the executor: recorded as
    call.invalid, the model told tool-args-invalid, the run going on. (Empty arguments are
    ``{}``, as pydantic-ai reads them: invalid for lookup, which needs order_id.)"""
    support = Support()
    ledger = MemoryLedger()
    model = ScriptedModel([[tool_call("lookup", raw, "c1")], "done"])
    toolset = ExecutorToolset(support.registry, executor=Executor(support.registry, ledger=ledger))
    result = await agent_for(model, toolset).run("go")
    output, outcome = model.output("c1")
    assert (result.output, outcome, output["error"]["kind"], support.ran) == (
        "done",
        "failed",
        "tool-args-invalid",
        [],
    )
    assert await tags(ledger) == [("call.requested", "c1"), ("call.invalid", "c1")]


async def test_malformed_arguments_of_a_confirm_tool_are_never_sent_for_approval() -> None:
    """A confirm tool's unparseable call does not pause the run: nobody is asked about it."""
    support = Support()
    ledger = MemoryLedger()
    model = ScriptedModel(
        [[tool_call("refund", '{"order_id": "A1", "amount_cents": 5', "c1")], "ok"]
    )
    toolset = ExecutorToolset(support.registry, executor=Executor(support.registry, ledger=ledger))
    result = await agent_for(model, toolset).run("go")
    assert (result.output, model.output("c1")[1]) == ("ok", "failed")
    assert await tags(ledger) == [("call.requested", "c1"), ("call.invalid", "c1")]


def _blocking_guard(call: Any) -> None:
    raise GuardrailBlocked("order A1 is under review")


@pytest.mark.parametrize(
    ("tool", "kind", "recorded"),
    [("cancel", "tool-error", "call.failed"), ("lookup", "guardrail-blocked", "call.blocked")],
)
async def test_model_visible_refusals_are_tool_failures_recorded_as_themselves(
    tool: str, kind: str, recorded: str
) -> None:
    """A model-visible refusal reaches the model as pydantic-ai's failed tool return (its
    history says "failed", not "success" as returned text would) with the JSON error, and
    the ledger records the refusal's own outcome; the run goes on."""
    support = Support()
    ledger = MemoryLedger()
    model = ScriptedModel([[tool_call(tool, {"order_id": "A1"}, "c1")], "done"])
    guards = [_blocking_guard] if tool == "lookup" else []
    executor = Executor(support.registry, ledger=ledger, guards=guards)
    result = await agent_for(model, ExecutorToolset(support.registry, executor=executor)).run("go")
    output, outcome = model.output("c1")
    assert (result.output, outcome, output["error"]["kind"]) == ("done", "failed", kind)
    assert (await tags(ledger))[-1] == (recorded, "c1")


async def test_host_kinds_are_raised_to_the_host_as_themselves() -> None:
    """An unexpected failure and a timeout come out of ``agent.run`` as our own errors, not
    as pydantic-ai's; the ledger records their outcome."""
    registry = Registry()
    never = asyncio.Event()

    @registry.tool(targets=[NAME])
    async def explode(order_id: str) -> str:
        raise RuntimeError("the database went away")

    @registry.tool(targets=[NAME], timeout=0.05)
    async def hang(order_id: str) -> str:
        await never.wait()  # never set: the executor's timeout ends it
        return "never"

    ledger = MemoryLedger()
    toolset = ExecutorToolset(registry, executor=Executor(registry, ledger=ledger))
    for tool, error in (("explode", ToolFailed), ("hang", ToolTimeout)):
        model = ScriptedModel([[tool_call(tool, {"order_id": "A1"}, f"{tool}-1")], "done"])
        with pytest.raises(error):
            await agent_for(model, toolset).run("go")
    outcomes = [t for t in await tags(ledger) if t[0] in ("call.failed", "call.timed_out")]
    assert outcomes == [("call.failed", "explode-1"), ("call.timed_out", "hang-1")]


async def test_pydantic_ai_test_model_calls_the_tools_with_the_registry_schema() -> None:
    """pydantic-ai's TestModel builds arguments from the advertised schema; they validate."""
    support = Support()
    ledger = MemoryLedger()
    toolset = ExecutorToolset(support.registry, executor=Executor(support.registry, ledger=ledger))
    agent = Agent(TestModel(call_tools=["lookup"]), toolsets=[toolset])
    await agent.run("go")
    assert [name for name, _ in support.ran] == ["lookup"]
    assert [t for t, _ in await tags(ledger)][-1] == "call.succeeded"


def test_an_unsupported_pydantic_ai_is_refused_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pydantic-ai outside 2.60 to below 3 is an IntegrationError naming the extra."""
    monkeypatch.setattr(pydantic_ai, "__version__", "1.9.0")
    with pytest.raises(IntegrationError, match=r"pydantic-ai 1\.9\.0 is not supported"):
        ExecutorToolset(Support().registry)


async def test_a_refund_in_the_same_message_as_a_lookup_pauses_alone() -> None:
    """A lookup and a confirm refund in one message: the lookup runs, the refund pauses;
    after approval the resume runs the refund only (the lookup's result is kept)."""
    support = Support()
    ledger = MemoryLedger()
    model = ScriptedModel(
        [[tool_call("lookup", {"order_id": "A1"}, "c0"), tool_call("refund", REFUND, "c1")], "done"]
    )
    toolset = ExecutorToolset(support.registry, executor=Executor(support.registry, ledger=ledger))
    agent = agent_for(model, toolset)
    paused = await agent.run("go")
    assert support.ran == [("lookup", {"order_id": "A1"})]
    assert isinstance(paused.output, DeferredToolRequests)
    review = await toolset.resolve_deferred(paused.output, CallbackApproval(lambda r: True))
    done = await agent.run(
        message_history=paused.all_messages(), deferred_tool_results=review.results
    )
    assert (done.output, [n for n, _ in support.ran]) == ("done", ["lookup", "refund"])


async def test_a_cancelled_run_records_call_cancelled_and_propagates() -> None:
    """Cancelling ``agent.run`` while a body runs: CancelledError reaches the caller and the
    ledger records ``call.cancelled`` (never a failure of the tool)."""
    registry = Registry()
    started = asyncio.Event()
    never = asyncio.Event()

    @registry.tool(targets=[NAME])
    async def slow(order_id: str) -> str:
        started.set()
        await never.wait()
        return "never"

    ledger = MemoryLedger()
    toolset = ExecutorToolset(registry, executor=Executor(registry, ledger=ledger))
    model = ScriptedModel([[tool_call("slow", {"order_id": "A1"}, "c1")], "done"])
    task = asyncio.create_task(agent_for(model, toolset).run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await tags(ledger))[-1] == ("call.cancelled", "c1")


async def test_a_host_refusal_is_given_again_to_the_same_call_never_run() -> None:
    """After a DuplicateEffect ends a run, running the same call again (same conversation
    and tool call id) raises the recorded refusal again; the body ran once, for the first
    refund only."""
    from agent_adapter.errors import DuplicateEffect

    support = Support()
    ledger = MemoryLedger()
    toolset = ExecutorToolset(support.registry, executor=Executor(support.registry, ledger=ledger))
    yes = CallbackApproval(lambda r: True)

    async def refund_once(call_id: str) -> object:
        agent = agent_for(ScriptedModel([[tool_call("refund", REFUND, call_id)], "ok"]), toolset)
        paused = await agent.run("go", conversation_id="conv-1")
        assert isinstance(paused.output, DeferredToolRequests)
        review = await toolset.resolve_deferred(paused.output, yes)
        done = await agent.run(
            message_history=paused.all_messages(), deferred_tool_results=review.results
        )
        return done.output

    assert await refund_once("c1") == "ok"
    for _ in range(2):
        with pytest.raises(DuplicateEffect):
            await refund_once("c2")
    assert support.ran == [("refund", REFUND)]
    outcomes = [t for t in await tags(ledger) if t[0] in ("call.duplicate", "call.replayed")]
    assert outcomes == [("call.duplicate", "c2"), ("call.replayed", "c2")]


async def test_the_arguments_reach_the_executor_as_they_are_when_the_call_runs() -> None:
    """What the toolset's validator decoded reaches the executor as it is when the call runs
    (a pydantic-ai hook's in-place change included); a non-JSON value put in it, and
    ``validate_python`` input that is no object, are refused by the executor (call.invalid)."""
    from pydantic_ai import RunContext
    from pydantic_ai.usage import RunUsage

    support = Support()
    ledger = MemoryLedger()
    toolset = ExecutorToolset(support.registry, executor=Executor(support.registry, ledger=ledger))
    tool = (await toolset.get_tools(None))["lookup"]  # type: ignore[arg-type]
    base = RunContext(deps=None, model=TestModel(), usage=RunUsage(), conversation_id="conv")

    async def call(call_id: str, args: Any) -> Any:
        ctx = replace(base, tool_name="lookup", tool_call_id=call_id)
        return await toolset.call_tool("lookup", args, ctx, tool)

    changed = tool.args_validator.validate_json('{"order_id": "A1"}')
    changed["order_id"] = "B2"
    odd = tool.args_validator.validate_json('{"order_id": "A1"}')
    odd["order_id"] = object()
    assert (await call("c1", changed))["order_id"] == "B2"
    for call_id, args in (("c2", odd), ("c3", tool.args_validator.validate_python(["x"]))):
        with pytest.raises(FrameworkToolFailed, match="tool-args-invalid"):
            await call(call_id, args)
    assert support.ran == [("lookup", {"order_id": "B2"})]
    invalid = [c for t, c in await tags(ledger) if t == "call.invalid"]
    assert invalid == ["c2", "c3"]
