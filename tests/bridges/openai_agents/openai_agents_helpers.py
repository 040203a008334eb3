"""Helpers for the OpenAI Agents bridge tests: a scripted agent, model outputs, ledger views."""

from __future__ import annotations

from typing import Any

from agents import Agent, RunConfig
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_adapter.ledger import Event, MemoryLedger, replay

__all__ = [
    "CONFIG",
    "approvals_that_ran",
    "assistant_message",
    "call_events",
    "call_types",
    "function_call",
    "make_agent",
    "outputs",
]

CONFIG = RunConfig(tracing_disabled=True)


def make_agent(
    tools: list[Any], *steps: Any, name: str = "support"
) -> tuple[Agent[Any], ScriptedModel]:
    """An agent over ``tools`` whose model plays ``steps`` (one list of output items per turn)."""
    model = ScriptedModel(list(steps))
    return Agent(name=name, instructions="Help.", tools=tools, model=model), model


def outputs(model: ScriptedModel) -> dict[str, str]:
    """The ``function_call_output`` items the model received last, by call id."""
    last = model.last_call
    assert last is not None
    return {
        item["call_id"]: item["output"]
        for item in last.input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


async def call_events(ledger: MemoryLedger, call_id: str) -> list[Event]:
    """Every ledger event of one call id (any run), in order."""
    return [e async for e in ledger.read() if e.call_id == call_id]


async def call_types(ledger: MemoryLedger, call_id: str) -> list[str]:
    """The event type sequence of one call id."""
    return [e.type for e in await call_events(ledger, call_id)]


async def approvals_that_ran(ledger: MemoryLedger) -> dict[str, tuple[str, str, bool]]:
    """For each call whose body ran: (source, reviewer, approved digest == digest that ran).

    Also checks that the audit of the whole ledger finds no problem (no call ran with a
    digest no approval covered, no missing outcome, an intact chain).
    """
    events = [e async for e in ledger.read()]
    audit = replay(events, await ledger.verify())
    assert audit.problems() == []
    ran: dict[str, tuple[str, str, bool]] = {}
    for record in audit.calls.values():
        if record.started and record.approvals:
            last = record.approvals[-1]
            assert last.approved
            ran[record.call_id] = (last.source, last.reviewer, last.digest == record.ran_digest)
    return ran
