"""The traps of LangGraph that the bridge refuses, records or documents, one test each."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Send
from langgraph_support import REFUND, Support, agent, answer, ask, calls, thread, types

from agent_adapter import Executor, Registry
from agent_adapter.errors import DuplicateEffect, ToolUsageError
from agent_adapter.integrations.langgraph import (
    NAME,
    InvalidToolCallsMiddleware,
    langgraph_tools,
)
from agent_adapter.ledger import CallRequested, MemoryLedger
from agent_adapter.testing.langgraph import ScriptedChatModel

pytestmark = pytest.mark.usefixtures("bounded")

R2 = {"order_id": "A2", "amount_cents": 700}


def plain_graph(
    executor: Executor, support: Support, model: ScriptedChatModel, *, send: bool
) -> Any:
    """The hand-built agent loop: a model node and a ToolNode reached by a plain edge
    (``send=False``: every call of a message in one task) or by a Send per call."""
    tools = langgraph_tools(support.registry, executor=executor)

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def route(state: MessagesState) -> Any:
        last = state["messages"][-1]
        if not getattr(last, "tool_calls", None):
            return END
        return [Send("tools", [call]) for call in last.tool_calls]

    builder = StateGraph(MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    if send:
        builder.add_conditional_edges("agent", route, ["tools", END])
    else:
        builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


def answers(result: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """tool_call_id -> (status, content) of the ToolMessages in a result."""
    return {
        m.tool_call_id: (m.status, m.content)
        for m in result["messages"]
        if isinstance(m, ToolMessage)
    }


async def test_several_calls_of_one_message_in_one_task_are_refused_at_the_first_interrupt() -> (
    None
):
    """A plain StateGraph + ToolNode runs every call of one message in one task, so a
    resume would rerun them all and match answers by order (r1's approval reaching r2):
    the first call that needs approval is refused with a ToolUsageError naming the fix,
    before any interrupt, approval or body."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        model = ScriptedChatModel(turns=[calls(("refund", REFUND, "r1"), ("refund", R2, "r2"))])
        graph = plain_graph(executor, support, model, send=False)
        with pytest.raises(ToolUsageError, match="create_agent") as refused:
            await graph.ainvoke(ask(), thread("t1"))
        assert ("Send" in str(refused.value), await types(executor), support.ran) == (True, [], [])


async def test_one_call_per_message_in_a_plain_tool_node_is_fine() -> None:
    """The refusal is about several calls in one task: a plain ToolNode given one call
    per message interrupts and resumes like create_agent."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        model = ScriptedChatModel(turns=[calls(("refund", REFUND, "r1"))])
        graph = plain_graph(executor, support, model, send=False)
        (paused,) = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        await graph.ainvoke(Command(resume={paused.id: answer(paused)}), thread("t1"))
    assert support.ran == [("refund", REFUND)]


async def test_a_send_per_call_gives_each_call_its_own_interrupt_and_answer() -> None:
    """Routed with a Send per call, two refunds of one message pause separately; approving
    r1 and denying r2 runs r1 only: no answer reaches another call."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        model = ScriptedChatModel(turns=[calls(("refund", REFUND, "r1"), ("refund", R2, "r2"))])
        graph = plain_graph(executor, support, model, send=True)
        paused = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        by_call = {p.value["call_id"]: p for p in paused}
        resume = {
            by_call["r1"].id: answer(by_call["r1"]),
            by_call["r2"].id: answer(by_call["r2"], approved=False, reason="too much"),
        }
        done = await graph.ainvoke(Command(resume=resume), thread("t1"))
        outcomes = sorted(
            (c, t) for t, c in await types(executor) if t in ("call.succeeded", "call.denied")
        )
    assert (sorted(by_call), support.ran, outcomes, answers(done)["r2"][0]) == (
        ["r1", "r2"],
        [("refund", REFUND)],
        [("r1", "call.succeeded"), ("r2", "call.denied")],
        "error",
    )


async def test_human_in_the_loop_middleware_in_front_of_a_confirm_tool_asks_twice() -> None:
    """Documented, not refused (the tool cannot see the middleware): HumanInTheLoopMiddleware
    on a tool the executor already confirms asks first through its own interrupt, then the
    bridge asks again; and its edit replaces the call before the executor sees it, so the
    ledger records the edited arguments as the call's own. README: leave the registry's
    confirm tools out of ``interrupt_on``."""
    support = Support()
    edited = {"order_id": "A1", "amount_cents": 100}
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        hitl = HumanInTheLoopMiddleware(interrupt_on={"refund": True})
        graph, _ = agent(
            executor, support.registry, [calls(("refund", REFUND, "c1"))], middleware=[hitl]
        )
        (first,) = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        decision = {"type": "edit", "edited_action": {"name": "refund", "args": edited}}
        second = await graph.ainvoke(
            Command(resume={first.id: {"decisions": [decision]}}), thread("t1")
        )
        (ours,) = second["__interrupt__"]
        await graph.ainvoke(Command(resume={ours.id: answer(ours)}), thread("t1"))
        requested = [e.args async for e in executor.ledger.read() if isinstance(e, CallRequested)]
    assert ("action_requests" in first.value, ours.value["args"], requested, support.ran) == (
        True,
        edited,
        [edited],
        [("refund", edited)],
    )


def unparseable(*, with_valid: bool = False) -> AIMessage:
    """A model turn whose refund arguments LangChain could not parse."""
    valid = [{"name": "lookup", "args": {"order_id": "A1"}, "id": "c2", "type": "tool_call"}]
    return AIMessage(
        content="",
        tool_calls=valid if with_valid else [],
        invalid_tool_calls=[
            {
                "name": "refund",
                "args": '{"order_id": "A1", "amount_cents": 5',
                "id": "c1",
                "error": "unterminated JSON",
                "type": "invalid_tool_call",
            }
        ],
    )


async def test_invalid_tool_calls_are_dropped_by_langgraph_without_the_middleware() -> None:
    """The trap itself: a call whose arguments did not parse never reaches a tool; the
    agent ends, the ledger never hears of it and the model is never told."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        graph, model = agent(executor, support.registry, [unparseable()])
        done = await graph.ainvoke(ask(), thread("t1"))
        assert (await types(executor), answers(done), len(model.seen)) == ([], {}, 1)


@pytest.mark.parametrize("with_valid", [False, True], ids=["alone", "beside-a-valid-call"])
async def test_invalid_tool_calls_are_recorded_and_answered(with_valid: bool) -> None:
    """With ``InvalidToolCallsMiddleware(tools)`` the unparseable call is recorded
    (call.requested + call.invalid) and answered with tool-args-invalid, which the model
    reads on its next turn (alone: the agent goes back to the model instead of ending)."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        tools = langgraph_tools(support.registry, executor=executor)
        graph, model = agent(
            executor,
            support.registry,
            [unparseable(with_valid=with_valid)],
            middleware=[InvalidToolCallsMiddleware(tools)],
        )
        done = await graph.ainvoke(ask(), thread("t1"))
        invalid = [t for t, c in await types(executor) if c == "c1"]
    status, content = answers(done)["c1"]
    seen = [m.tool_call_id for m in model.seen[-1] if isinstance(m, ToolMessage)]
    assert (invalid, status, '"kind":"tool-args-invalid"' in content, "c1" in seen) == (
        ["call.requested", "call.invalid"],
        "error",
        True,
        True,
    )


async def test_a_refusal_raised_to_the_host_is_our_exception_and_leaves_the_thread_at_tools() -> (
    None
):
    """DuplicateEffect comes out of ainvoke as itself (ToolNode's handler leaves it); the
    thread stays at next=('tools',). Invoking it again replays the recorded refusal (the
    body does not run); answering the call as the tools node lets the agent go on."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        turns = [calls(("refund", REFUND, "c1")), calls(("refund", REFUND, "c2"))]
        graph, _ = agent(executor, support.registry, turns)
        (p1,) = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        (p2,) = (await graph.ainvoke(Command(resume={p1.id: answer(p1)}), thread("t1")))[
            "__interrupt__"
        ]
        with pytest.raises(DuplicateEffect) as caught:
            await graph.ainvoke(Command(resume={p2.id: answer(p2)}), thread("t1"))
        state = await graph.aget_state(thread("t1"))
        with pytest.raises(DuplicateEffect):
            await graph.ainvoke(None, thread("t1"))  # the recorded refusal, replayed
        reply = ToolMessage("already refunded", tool_call_id="c2", name="refund", status="error")
        await graph.aupdate_state(thread("t1"), {"messages": [reply]}, as_node="tools")
        done = await graph.ainvoke(None, thread("t1"))
        replayed = [c for t, c in await types(executor) if t == "call.replayed"]
    assert (
        type(caught.value),
        p2.value["effect_notice"].startswith("refund:A1 is already committed"),
        state.next,
        done["messages"][-1].content,
        support.ran,
        replayed,
    ) == (DuplicateEffect, True, ("tools",), "done", [("refund", REFUND)], ["c2"])


async def test_answer_invalid_tool_calls_in_a_graph_of_ones_own() -> None:
    """``answer_invalid_tool_calls`` (for hand-built graphs) records each unparseable call
    to our tools once (a repeat is answered from the ledger) and answers a call to any other
    tool without recording it."""
    from agent_adapter.integrations.langgraph import answer_invalid_tool_calls

    support = Support()
    message = unparseable()
    message.invalid_tool_calls.append(
        {"name": "weather", "args": "{", "id": "c9", "error": "bad", "type": "invalid_tool_call"}
    )
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        tools = langgraph_tools(support.registry, executor=executor)
        first = await answer_invalid_tool_calls(message, tools, config=thread("t1"))
        again = await answer_invalid_tool_calls(message, tools, config=thread("t1"))
        events = await types(executor)
    kinds = [(m.tool_call_id, m.status, '"kind":"tool-args-invalid"' in m.content) for m in first]
    assert (kinds, [m.content for m in again] == [m.content for m in first], events) == (
        [("c1", "error", True), ("c9", "error", True)],
        True,
        [("call.requested", "c1"), ("call.invalid", "c1"), ("call.replayed", "c1")],
    )


async def test_a_send_of_the_whole_message_cannot_move_an_answer_to_another_call() -> None:
    """A router that Sends the whole message to the tools node runs both calls in one push
    task, past the one-call-per-task check. Once the first call ran, the resume pass skips
    its interrupt and LangGraph hands the second call the answer given for the first (by
    position). An answer names its call and tool, so that answer is refused: the second
    refund, which the reviewer denied, never runs (before the fix it ran under the first
    call's approval)."""
    registry, ran = Registry(), []

    @registry.tool(confirm=True, targets=[NAME])
    async def refund(order_id: str, amount_cents: int) -> str:
        ran.append((order_id, amount_cents))
        return "refunded"

    executor = Executor(registry, ledger=MemoryLedger())
    message = AIMessage(
        content="",
        id="m1",
        tool_calls=[
            {"name": "refund", "args": REFUND, "id": "c1", "type": "tool_call"},
            {"name": "refund", "args": REFUND, "id": "c2", "type": "tool_call"},
        ],
    )
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [message]})
    graph.add_node("tools", ToolNode(langgraph_tools(registry, executor=executor)))
    graph.add_edge(START, "model")
    graph.add_conditional_edges(
        "model", lambda state: [Send("tools", {"messages": state["messages"]})], ["tools"]
    )
    graph.add_edge("tools", END)
    app = graph.compile(checkpointer=InMemorySaver())
    config = thread("t1")
    (first,) = (await app.ainvoke({"messages": []}, config))["__interrupt__"]
    after = await app.ainvoke(Command(resume={first.id: answer(first)}), config)
    (second,) = after["__interrupt__"]
    await app.ainvoke(Command(resume={second.id: answer(second, approved=False)}), config)
    outcomes = [
        (e.type, e.call_id)
        async for e in executor.ledger.read()
        if e.type in ("call.succeeded", "call.denied")
    ]
    assert (first.value["call_id"], ran, outcomes) == (
        "c1",
        [("A1", 500)],
        [("call.succeeded", "c1"), ("call.denied", "c2")],
    )
