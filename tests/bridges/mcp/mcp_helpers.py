"""Helpers for the MCP gateway tests: a registry, elicitation answers, ledger views."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types

from agent_adapter import Registry
from agent_adapter.ledger import Event, replay

__all__ = [
    "Answers",
    "accept",
    "build_registry",
    "by_call",
    "call_ids",
    "checked_audit",
    "events_of",
    "ours",
]


class Answers:
    """An elicitation callback that answers from a list and records what it was asked."""

    def __init__(self, *answers: types.ElicitResult) -> None:
        self.answers = list(answers)
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(self, ctx: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params)
        return self.answers.pop(0)


def accept(approve: bool = True, **extra: Any) -> types.ElicitResult:
    """An accept answer with ``approve`` (and any other content)."""
    return types.ElicitResult(action="accept", content={"approve": approve, **extra})


def build_registry() -> tuple[Registry, list[dict[str, Any]]]:
    """``refund`` (confirm, effect key), ``lookup`` (read-only) and ``fail`` (ToolError)."""
    registry = Registry()
    ran: list[dict[str, Any]] = []

    @registry.tool(confirm=True, effect="refund:{order_id}")
    async def refund(order_id: str, amount_cents: int) -> dict[str, Any]:
        """Refund an order (integer cents)."""
        ran.append({"order_id": order_id, "amount_cents": amount_cents})
        return {"refunded": amount_cents, "order_id": order_id}

    @registry.tool(readonly=True)
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}: shipped"

    @registry.tool(targets=["openai_agents"])
    def hidden() -> str:
        """Not exported to MCP."""
        return "no"

    return registry, ran


def ours(meta: dict[str, Any] | None) -> dict[str, Any]:
    """The gateway's own ``_meta`` keys (the SDK adds its own, such as serverInfo)."""
    return {k: v for k, v in (meta or {}).items() if k.startswith("io.agent-adapter/")}


async def events_of(ledger: Any) -> list[Event]:
    """Every event, in order."""
    return [e async for e in ledger.read()]


async def by_call(ledger: Any) -> dict[str, list[str]]:
    """The event types of each call id, in ledger order (call ids in first-seen order)."""
    out: dict[str, list[str]] = {}
    for event in await events_of(ledger):
        if event.call_id:
            out.setdefault(event.call_id, []).append(event.type)
    return out


async def call_ids(ledger: Any) -> list[str]:
    """The call ids in the ledger, in first-seen order."""
    return list(await by_call(ledger))


async def checked_audit(ledger: Any) -> Any:
    """The audit of the whole ledger, asserted free of problems."""
    audit = replay(await events_of(ledger), await ledger.verify())
    assert audit.problems() == []
    return audit


Callback = Callable[[Any, Any], Awaitable[types.ElicitResult]]
