"""The tools the Temporal tests call, their "payment provider" (a file), and the worker.

Shared by the tests (an in-process worker) and ``temporal_worker.py`` (a real worker
process the tests kill), so both run exactly the same registry on the same ledger.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from temporal_workflows import AgentRun
from temporalio.client import Client
from temporalio.worker import Worker

from agent_adapter import Executor, Registry
from agent_adapter.integrations.temporal import ToolActivities
from agent_adapter.ledger import SQLiteLedger


def build_registry(effects: Path) -> Registry:
    """``refund`` (approval, effect key), ``pay`` (effect key, no approval), ``lookup``,
    ``charge`` (a redacted card); each effect is one line appended to ``effects``."""
    registry = Registry()

    def happened(line: str) -> None:
        with effects.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    @registry.tool(confirm=True, effect="refund:{order_id}")
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order (integer minor units)."""
        happened(f"refund {order_id} {amount_cents}")
        return f"refunded {amount_cents} on {order_id}"

    @registry.tool(effect="pay:{order_id}")
    async def pay(order_id: str, amount_cents: int) -> dict[str, Any]:
        """Pay an order."""
        happened(f"pay {order_id} {amount_cents}")
        return {"paid": amount_cents, "order_id": order_id}

    @registry.tool(confirm=True, redact=("card",))
    async def charge(card: str, amount_cents: int) -> str:
        """Charge a card."""
        happened(f"charge {amount_cents}")
        return f"charged {amount_cents}"

    @registry.tool(targets=["openai_agents"])
    async def hidden() -> str:
        """Not exported to Temporal."""
        return "never"

    return registry


class CrashAfterCommit:
    """An ``after_tool`` hook that kills its own process once ``tool`` succeeded.

    ``after_tool`` runs after the outcome is durable in the ledger, so this is the worker
    that dies after the effect and before Temporal hears of it. ``marker`` is written
    first: the test knows the kill came from here.
    """

    def __init__(self, tool: str, marker: Path) -> None:
        self.tool = tool
        self.marker = marker

    def after_tool(self, call: Any, outcome: Any) -> None:
        if call.tool == self.tool and outcome.kind == "succeeded":
            self.marker.write_text(f"{call.ctx.run_id} {call.ctx.call_id}\n", encoding="utf-8")
            os.kill(os.getpid(), signal.SIGKILL)


@asynccontextmanager
async def running_worker(
    client: Client,
    task_queue: str,
    ledger: Path,
    effects: Path,
    *,
    hooks: tuple[Any, ...] = (),
    cached_workflows: int = 1000,
    workflow: type[Any] = AgentRun,
    registry: Callable[[Path], Registry] = build_registry,
) -> AsyncIterator[Executor]:
    """A worker for ``workflow`` (``AgentRun``) whose activities run on an executor opened
    on ``ledger`` with ``registry(effects)`` (``build_registry``)."""
    executor = await Executor.open(registry(effects), ledger=SQLiteLedger(str(ledger)), hooks=hooks)
    try:
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[workflow],
            activities=ToolActivities(executor).activities,
            max_cached_workflows=cached_workflows,
        )
        async with worker:
            yield executor
    finally:
        await executor.close()


_VOLATILE = {"seq", "ts", "prev", "hash", "duration_ms", "request_id", "outcome_seq"}
_HOLDER = ("holder", "pid", "host", "lease_until", "pid_start")


async def ledger_view(path: Path) -> tuple[list[dict[str, Any]], list[str], bool]:
    """The ledger's events without what varies per run (times, chain, random ids), its
    audit's problems, and whether its chain verifies."""
    import msgspec

    from agent_adapter.ledger import replay
    from agent_adapter.ledger._events import encode_event

    ledger = SQLiteLedger(str(path))
    try:
        events = [event async for event in ledger.read()]
        verified = (await ledger.verify()).ok
    finally:
        await ledger.close()
    view = []
    for event in events:
        data = {k: v for k, v in msgspec.json.decode(encode_event(event)).items()}
        if data["type"] == "effect.claimed":
            # The claim names its holder (the worker's executor, pid, host; they vary per
            # run) and a lease: checked here, then left out of the view.
            holder = {k: data.pop(k, 0) for k in _HOLDER}
            assert len(holder["holder"]) == 12 and holder["pid"] > 0 and holder["host"], holder
            assert holder["lease_until"] > data["ts"], holder
        data = {k: v for k, v in data.items() if k not in _VOLATILE}
        if "metadata" in data:
            data["metadata"] = {k: v for k, v in data["metadata"].items() if k != "workflow_run_id"}
        view.append(data)
    return view, [str(p) for p in replay(events).problems()], verified


#: Every wait on the server is bounded: a broken test fails instead of hanging the run.
TIMEOUT_S = 120.0


async def result_of(handle: Any) -> Any:
    """The workflow's result, waited for at most TIMEOUT_S."""
    return await asyncio.wait_for(handle.result(), TIMEOUT_S)


async def waiting_at_gate(handle: Any, prepared: int = 1) -> None:
    """``_waiting_at_gate``, bounded by TIMEOUT_S."""
    await asyncio.wait_for(_waiting_at_gate(handle, prepared), TIMEOUT_S)


async def _waiting_at_gate(handle: Any, prepared: int = 1) -> None:
    """Return once the workflow has taken ``prepared`` results of ``prepare`` and finished
    the workflow task after the last: it then waits at its gate. Gated on the history's
    own events (a long poll), not on time."""
    from agent_adapter.integrations.temporal import PREPARE

    scheduled: set[int] = set()
    completed = 0
    after_completion = False
    async for event in handle.fetch_history_events(wait_new_event=True):
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == PREPARE:
                scheduled.add(event.event_id)
        elif event.HasField("activity_task_completed_event_attributes"):
            if event.activity_task_completed_event_attributes.scheduled_event_id in scheduled:
                completed += 1
                after_completion = True
        elif event.HasField("workflow_task_completed_event_attributes") and after_completion:
            after_completion = False
            if completed == prepared:
                return
    raise AssertionError("the workflow closed before it waited at the gate")
