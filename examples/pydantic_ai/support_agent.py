"""A support agent on pydantic-ai whose every tool call runs through agent-adapter; no network.

pydantic-ai's ``FunctionModel`` plays the LLM: it looks an order up (a cached read tool),
then asks to refund it (``confirm=True``, effect key ``refund:{order_id}``). The run
pauses with ``DeferredToolRequests``; a reviewer (here a rule: refunds under 100.00 are
approved, or ``--deny``) answers through ``ExecutorToolset.resolve_deferred``, and the run
resumes from its message history. A second conversation asks for the same refund: it is
approved, and the executor refuses it anyway (``DuplicateEffect``, raised to the host).
The audit of the SQLite ledger is printed last.

Run: ``python examples/pydantic_ai/support_agent.py [--db FILE] [--deny]``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from agent_adapter import ApprovalRequest, CallbackApproval, Decision, Executor, Registry
from agent_adapter.errors import AdapterError
from agent_adapter.integrations.pydantic_ai import META_KEY, NAME, ExecutorToolset
from agent_adapter.ledger import SQLiteLedger, replay


def build_registry() -> Registry:
    """The support tools, exported to pydantic-ai (import the bridge first: it registers
    the ``pydantic_ai`` target name)."""
    registry = Registry()

    @registry.tool(targets=[NAME], cache=60, readonly=True)
    async def lookup_order(order_id: str) -> dict[str, Any]:
        """Look an order up: its status and amount (integer cents)."""
        return {"order_id": order_id, "status": "delivered", "amount_cents": 500}

    @registry.tool(targets=[NAME], confirm=True, effect="refund:{order_id}")
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order. Amounts are integer minor units."""
        return f"refunded {amount_cents} on {order_id}"

    return registry


def support_model() -> FunctionModel:
    """The scripted LLM: look up, then refund what the lookup said, then answer."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            part
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        if not returns:
            args = msgspec.json.encode({"order_id": "A1"}).decode()
            return ModelResponse(parts=[ToolCallPart("lookup_order", args, tool_call_id="t1")])
        last = returns[-1]
        if last.tool_name == "lookup_order":
            order = last.content
            refund = {"order_id": order["order_id"], "amount_cents": order["amount_cents"]}
            args = msgspec.json.encode(refund).decode()
            return ModelResponse(parts=[ToolCallPart("refund", args, tool_call_id="t2")])
        if last.outcome == "success":
            return ModelResponse(parts=[TextPart(f"Done: {last.content}.")])
        return ModelResponse(parts=[TextPart(f"Sorry, I could not refund: {last.content}")])

    return FunctionModel(respond)


def reviewer(deny: bool) -> CallbackApproval:
    """The person (a rule here): refunds under 10_000 cents, unless told to deny."""

    def review(request: ApprovalRequest) -> Decision:
        print(f"review: {request.tool} {request.args} (run {request.run_id})")
        approved = not deny and request.args["amount_cents"] < 10_000
        reason = "" if approved else "refunds need a manager"
        return Decision(approved=approved, reviewer="alice", reason=reason)

    return CallbackApproval(review)


async def converse(agent: Agent[None, Any], toolset: ExecutorToolset, port: Any, conv: str) -> str:
    """One conversation: run, answer each pause through the port, resume until done."""
    result = await agent.run("Please refund order A1.", conversation_id=conv)
    while isinstance(result.output, DeferredToolRequests):
        for part in result.output.approvals:
            shown = result.output.metadata[part.tool_call_id][META_KEY]
            print(f"paused: {part.tool_name} digest {shown['digest'][:12]}")
        review = await toolset.resolve_deferred(result.output, port)
        result = await agent.run(
            message_history=result.all_messages(), deferred_tool_results=review.results
        )
    return str(result.output)


async def main(db: Path, deny: bool) -> None:
    registry = build_registry()
    ledger = SQLiteLedger(db)
    async with await Executor.open(registry, ledger=ledger) as executor:
        toolset = ExecutorToolset(registry, executor=executor)
        agent = Agent(support_model(), toolsets=[toolset], output_type=[str, DeferredToolRequests])
        print(await converse(agent, toolset, reviewer(deny), "support-1"))
        try:
            print(await converse(agent, toolset, reviewer(deny), "support-2"))
        except AdapterError as exc:  # the host's kinds come out of agent.run as themselves
            print(f"refused: {exc.kind}")
        audit = replay([e async for e in ledger.read()], await ledger.verify())
        for record in audit.calls.values():
            print(f"{record.run_id} {record.tool} {record.outcome}")
        print(f"problems: {audit.problems()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="the ledger file (default: a new temp file)")
    parser.add_argument("--deny", action="store_true", help="the reviewer denies the refund")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(options.db or Path(tmp) / "ledger.db", options.deny))
