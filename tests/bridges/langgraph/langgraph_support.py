"""Helpers for the LangGraph bridge's tests: a support registry, agents, ledger views."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from agent_adapter import Executor, Registry
from agent_adapter.errors import ToolError
from agent_adapter.integrations.langgraph import NAME, langgraph_tools
from agent_adapter.testing.langgraph import ScriptedChatModel

REFUND = {"order_id": "A1", "amount_cents": 500}


class Support:
    """A registry with a lookup and a confirm refund, and the list the bodies append to."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.ran: list[tuple[str, dict[str, Any]]] = []
        ran = self.ran

        @self.registry.tool(targets=[NAME])
        async def lookup(order_id: str) -> dict[str, Any]:
            """Look an order up."""
            ran.append(("lookup", {"order_id": order_id}))
            return {"order_id": order_id, "status": "shipped"}

        @self.registry.tool(confirm=True, effect="refund:{order_id}", targets=[NAME])
        async def refund(order_id: str, amount_cents: int) -> str:
            """Refund an order (integer cents)."""
            ran.append(("refund", {"order_id": order_id, "amount_cents": amount_cents}))
            return f"refunded {amount_cents} on {order_id}"

        @self.registry.tool(targets=[NAME])
        async def cancel(order_id: str) -> str:
            """Cancel an order; it always refuses, on purpose."""
            raise ToolError(f"order {order_id} has shipped")


def calls(*calls: tuple[str, dict[str, Any], str], message_id: str | None = None) -> AIMessage:
    """An AIMessage making ``calls`` (name, args, tool call id), all in one message."""
    made = [{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in calls]
    return AIMessage(content="", tool_calls=made, id=message_id)


def agent(
    executor: Executor,
    registry: Registry,
    turns: list[AIMessage],
    *,
    checkpointer: Any = None,
    **options: Any,
) -> tuple[Any, ScriptedChatModel]:
    """A ``create_agent`` graph over the registry's tools, with a scripted model."""
    model = ScriptedChatModel(turns=turns)
    tools = langgraph_tools(
        registry, executor=executor, call_ids=options.pop("call_ids", "tool_call")
    )
    graph = create_agent(
        model,
        tools,
        checkpointer=checkpointer if checkpointer is not None else InMemorySaver(),
        **options,
    )
    return graph, model


def thread(thread_id: str) -> dict[str, Any]:
    """The config of a thread."""
    return {"configurable": {"thread_id": thread_id}}


def ask(text: str = "help") -> dict[str, Any]:
    """A graph input: one human message."""
    return {"messages": [HumanMessage(text)]}


async def types(executor: Executor) -> list[tuple[str, str]]:
    """(type, call_id) of every event in the executor's ledger."""
    return [(e.type, e.call_id) async for e in executor.ledger.read()]


def answer(interrupt: Any, *, approved: bool = True, **more: Any) -> dict[str, Any]:
    """The resume value for one of the bridge's interrupts (bound to the digest, the call
    and the tool shown)."""
    shown = interrupt.value
    bound = {"digest": shown["digest"], "call_id": shown["call_id"], "tool": shown["tool"]}
    return {"approved": approved, "reviewer": "alice", **bound, **more}
