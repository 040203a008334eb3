"""A support agent on LangGraph whose tool calls run through agent-adapter, offline.

A scripted chat model plays the LLM (``agent_adapter.testing.langgraph.ScriptedChatModel``):
it looks an order up, then asks to refund it. The refund needs approval (``confirm=True``),
so its task pauses with LangGraph's own ``interrupt()``; the reviewer's answer (``--decision
approve|deny|edit:<cents>``, approve by default) resumes it through ``review_interrupts``
and ``Command(resume=...)``. A second request for the same refund is approved too, but its
effect key is committed: ``DuplicateEffect`` comes out of ``ainvoke`` to the host, which
answers the call itself so the agent can go on. Then the ledger is printed and verified.

    python examples/langgraph/support_agent.py [--db ledger.db] [--decision approve]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from agent_adapter import CallbackApproval, Decision, Executor, Registry
from agent_adapter.errors import DuplicateEffect
from agent_adapter.integrations.langgraph import (
    NAME,
    InvalidToolCallsMiddleware,
    langgraph_tools,
    review_interrupts,
)
from agent_adapter.ledger import SQLiteLedger, replay
from agent_adapter.testing.langgraph import ScriptedChatModel, tool_call_message

ORDER = "A1"


def build_registry() -> Registry:
    """The support desk's tools: a cached lookup and a refund that needs approval."""
    registry = Registry()

    @registry.tool(cache=60, readonly=True, targets=[NAME])
    async def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return {"order_id": order_id, "status": "delivered", "paid_cents": 500}

    @registry.tool(confirm=True, effect="refund:{order_id}", targets=[NAME])
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order. Amounts are integer minor units."""
        return f"refunded {amount_cents} cents on {order_id}"

    return registry


def script() -> list[AIMessage]:
    """What the model says, turn by turn (the second refund is the customer asking again)."""
    return [
        tool_call_message("lookup", {"order_id": ORDER}, "call_lookup"),
        tool_call_message("refund", {"order_id": ORDER, "amount_cents": 500}, "call_refund"),
        AIMessage(content="Your refund is on its way."),
        tool_call_message("refund", {"order_id": ORDER, "amount_cents": 500}, "call_refund_2"),
        AIMessage(content="That order was refunded already."),
    ]


def reviewer(decision: str) -> CallbackApproval:
    """The person deciding: approve, deny, or approve another amount (``edit:<cents>``)."""

    def decide(request: Any) -> Decision:
        print(f"reviewer sees: {request.tool} {request.args} (run {request.run_id})")
        if decision.startswith("edit:"):
            edits = {**request.args, "amount_cents": int(decision.split(":", 1)[1])}
            return Decision(approved=True, reviewer="alice", edits=edits)
        return Decision(approved=decision == "approve", reviewer="alice", reason=decision)

    return CallbackApproval(decide)


async def turn(graph: Any, payload: Any, config: Any, port: CallbackApproval) -> dict[str, Any]:
    """One host turn: invoke, and while a tool call waits for approval, review and resume."""
    result = await graph.ainvoke(payload, config)
    while result.get("__interrupt__"):
        review = await review_interrupts(result, port)
        result = await graph.ainvoke(review.command, config)
    return dict(result)


def show(result: dict[str, Any]) -> None:
    """The tool results the model read, and its last word."""
    for message in result["messages"]:
        if isinstance(message, ToolMessage):
            print(f"model reads ({message.name}, {message.status}): {message.content}")
    print(f"agent: {result['messages'][-1].content}")


async def main(db: Path, decision: str) -> None:
    registry = build_registry()
    async with Executor(registry, ledger=SQLiteLedger(str(db))) as executor:
        tools = langgraph_tools(registry, executor=executor)
        graph = create_agent(
            ScriptedChatModel(turns=script()),
            tools,
            checkpointer=InMemorySaver(),
            middleware=[InvalidToolCallsMiddleware(tools)],
        )
        config: Any = {"configurable": {"thread_id": "support-1"}}  # the thread is the run
        port = reviewer(decision)
        show(await turn(graph, {"messages": [HumanMessage("Refund order A1")]}, config, port))
        try:
            await turn(graph, {"messages": [HumanMessage("Refund it again")]}, config, port)
        except DuplicateEffect as refused:
            # The thread waits at next=('tools',); running it again replays this refusal.
            # The host answers the call as the tools node, and the agent goes on.
            print(f"host gets: {refused.kind}: {refused}")
            state = await graph.aget_state(config)
            print(f"thread waits at: {state.next}")
            answer = ToolMessage(
                "not refunded again: it was refunded already",
                tool_call_id="call_refund_2",
                name="refund",
                status="error",
            )
            await graph.aupdate_state(config, {"messages": [answer]}, as_node="tools")
            print(f"agent: {(await graph.ainvoke(None, config))['messages'][-1].content}")
        events = [e async for e in executor.ledger.read()]
        audit = replay(events, await executor.ledger.verify())
    for event in events:
        print(f"ledger: {event.type} {event.call_id}")
    print(f"audit: {len(audit.calls)} calls, problems: {audit.problems()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="the SQLite ledger (default: a temporary file)")
    parser.add_argument("--decision", default="approve", help="approve, deny or edit:<cents>")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(main(options.db or Path(scratch) / "ledger.db", options.decision))
