"""Shared pieces of the pydantic-ai bridge tests: a support registry, agents, the ledger."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.tools import DeferredToolRequests

from agent_adapter import Executor, Registry
from agent_adapter.errors import ToolError
from agent_adapter.integrations.pydantic_ai import NAME, ExecutorToolset
from agent_adapter.ledger import Ledger
from agent_adapter.testing.pydantic_ai import ScriptedModel, tool_call

REFUND = {"order_id": "A1", "amount_cents": 500}

__all__ = [
    "REFUND",
    "Support",
    "agent_for",
    "events",
    "round_trip",
    "ScriptedModel",
    "tags",
    "tool_call",
]


class Support:
    """A registry exported to pydantic-ai, and what each body did (in call order)."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.ran: list[tuple[str, dict[str, Any]]] = []
        ran = self.ran

        @self.registry.tool(confirm=True, effect="refund:{order_id}", targets=[NAME])
        async def refund(order_id: str, amount_cents: int) -> str:
            """Refund an order (integer cents)."""
            ran.append(("refund", {"order_id": order_id, "amount_cents": amount_cents}))
            return f"refunded {amount_cents} on {order_id}"

        @self.registry.tool(targets=[NAME])
        async def lookup(order_id: str) -> dict[str, Any]:
            """Look an order up."""
            ran.append(("lookup", {"order_id": order_id}))
            return {"order_id": order_id, "status": "shipped"}

        @self.registry.tool(targets=[NAME])
        async def cancel(order_id: str) -> str:
            """Cancel an order; refuses on purpose."""
            raise ToolError(f"order {order_id} has shipped")

        @self.registry.tool(targets=["openai_agents"])
        async def elsewhere() -> str:
            """Exported to another bridge only."""
            return "no"


def agent_for(
    model: ScriptedModel, toolset: ExecutorToolset
) -> Agent[None, str | DeferredToolRequests]:
    """An agent over ``toolset`` whose run may end with deferred requests."""
    return Agent(model.model, toolsets=[toolset], output_type=[str, DeferredToolRequests])


def round_trip(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The history through JSON, as a service stores it between two processes."""
    return ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))


async def events(ledger: Ledger) -> list[Any]:
    """Every event of the ledger, in order."""
    return [e async for e in ledger.read()]


async def tags(ledger: Ledger, executor: Executor | None = None) -> list[tuple[str, str]]:
    """(type, call_id) of every event."""
    return [(e.type, e.call_id) for e in await events(ledger)]
