"""The conformance kit's driver for the Temporal bridge: a real workflow on a real worker.

Each attempt is one execution of the ``KitCall`` workflow, whose run is one
``call_tool(...)``, on a worker whose activities are ``ToolActivities(executor)`` and on
the server of the ``temporalio.client.Client`` given (a dev server in tests). The person
answers through the ``ApprovalGate``'s Update with the digest its pending Query shows; a
call left to the executor is made with no gate at all, so the executor's own port
(the kit's ``DeferredApproval``) decides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.worker import Worker

from ..engine import Executor, new_id
from ..errors import MODEL_VISIBLE_KINDS
from ..integrations.temporal import (
    APPROVE_UPDATE,
    NAME,
    PENDING_QUERY,
    PREPARE,
    ToolActivities,
    error_kind,
)
from . import Approve, Attempt, Channel, Deny, Edit, Leave, Reply
from ._temporal_workflows import KitCall

__all__ = ["KitCall", "TemporalDriver", "answer_at_gate", "run_attempt", "settle"]


async def _at_gate(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the workflow got past ``prepare``: True once it has taken prepare's result
    and finished the workflow task after it (it then waits at the gate, or has already
    scheduled ``run``); False when it closed first. Gated on the history's own events (a
    long poll), never on time, so the gate's Query is asked exactly once."""
    scheduled: set[int] = set()
    prepared = False
    async for event in handle.fetch_history_events(wait_new_event=True):
        if event.HasField("activity_task_scheduled_event_attributes"):
            if event.activity_task_scheduled_event_attributes.activity_type.name == PREPARE:
                scheduled.add(event.event_id)
        elif event.HasField("activity_task_completed_event_attributes"):
            if event.activity_task_completed_event_attributes.scheduled_event_id in scheduled:
                prepared = True
        elif event.HasField("workflow_task_completed_event_attributes") and prepared:
            return True
    return False


def _answer(answer: Any, pending: dict[str, Any]) -> dict[str, Any]:
    """The gate's Update argument for ``answer``, bound to the digest the Query showed."""
    update: dict[str, Any] = {
        "call_id": pending["call_id"],
        "approved": isinstance(answer, Approve | Edit),
        "reviewer": "kit",
        "digest": pending["digest"],
    }
    if isinstance(answer, Edit):
        update["edits"] = dict(answer.args)
    elif isinstance(answer, Deny):
        update["reason"] = answer.reason
    elif not isinstance(answer, Approve):
        update["reason"] = "nobody answered"
    return update


async def answer_at_gate(handle: WorkflowHandle[Any, Any], answer: Any, call_id: str) -> int:
    """Once the workflow is past ``prepare``, answer ``call_id`` at its ``ApprovalGate`` by
    Update (bound to the digest the pending Query shows) if the gate waits for it; returns
    how many times the person was asked (0 or 1)."""
    if not await _at_gate(handle):
        return 0
    pending = await handle.query(PENDING_QUERY)
    mine = [p for p in pending if p["call_id"] == call_id]
    if not mine:
        return 0
    await handle.execute_update(APPROVE_UPDATE, _answer(answer, mine[0]))
    return 1


async def settle(
    handle: WorkflowHandle[Any, Any],
    answer: Any,
    call_id: str,
    *,
    gated: bool,
    kind_of: Callable[[WorkflowFailureError], str | None],
    reply: Callable[[Any, int], Reply],
) -> Reply:
    """What the workflow gave back: ``reply(result, asked)``, or the host kind
    ``kind_of`` finds in its failure (re-raised when none); on the way, the gate answered
    if it asks (``gated``)."""
    asked = await answer_at_gate(handle, answer, call_id) if gated else 0
    try:
        result = await handle.result()
    except WorkflowFailureError as exc:
        kind = kind_of(exc)
        if kind is None:
            raise
        return Reply(kind=kind, channel="host", asked=asked)
    return reply(result, asked)


def _reply(result: Any, asked: int) -> Reply:
    """``call_tool``'s ``ToolResult``: its error's kind (channel ``"model"``) or value."""
    if result.get("error") is not None:
        return Reply(kind=result["error"].get("kind"), channel="model", asked=asked)
    return Reply(value=result["value"], asked=asked)


async def run_attempt(
    client: Client,
    executor: Executor,
    workflow: type[Any],
    plan: Any,
    *,
    workflow_id: str,
    queue: str,
    timeout_s: float,
    outcome: Callable[[WorkflowHandle[Any, Any]], Awaitable[Reply]],
) -> Reply:
    """One attempt of a driver: ``workflow.run(plan)`` as ``workflow_id`` on a worker of
    its own on ``queue`` (``workflow`` and ``ToolActivities(executor).activities``), and
    what ``outcome(handle)`` makes of it within ``timeout_s``; past that, the execution is
    terminated and ``TimeoutError`` raised."""
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[workflow],
        activities=ToolActivities(executor).activities,
    )
    async with worker:
        handle = await client.start_workflow(workflow.run, plan, id=workflow_id, task_queue=queue)
        try:
            async with asyncio.timeout(timeout_s):
                return await outcome(handle)
        except TimeoutError:
            # Closed, so that a later attempt may start under the same workflow id.
            await handle.terminate("the conformance driver stopped waiting")
            raise


class TemporalDriver:
    """Drives the Temporal bridge through a workflow execution per attempt.

    ``client`` is connected to a Temporal server (``WorkflowEnvironment.client`` of a
    dev server in tests). Every attempt starts a worker of its own (a fresh task queue,
    ``KitCall`` and ``ToolActivities(executor).activities``), since the kit builds a
    fresh executor per scenario, and stops it once the workflow has closed.

    The bridge's table: model-visible kinds come back as ``ToolResult.error`` (channel
    ``"model"``); the others fail the workflow with the ``run`` activity's
    ``ApplicationError``, whose type is the kind (channel ``"host"``). ``run_id`` is the
    workflow id and ``call_id`` the id given to ``call_tool``; a repeat under the same
    ids is a second execution of the same workflow id after the first has closed.

    The person's answer is the gate's Update, bound to the digest its Query shows
    (``asked`` is 1 when the Query showed the call); ``Leave()`` runs the workflow with
    no gate, so the executor's own port decides; an attempt with no answer has a gate
    that should never be asked, and is denied ("nobody answered") if it is.
    ``timeout_s`` bounds each attempt, so a bridge that hangs fails the scenario
    (``TimeoutError``) instead of the run.
    """

    name = NAME
    supports_edit = True

    def __init__(self, client: Client, *, timeout_s: float = 60.0) -> None:
        self.client = client
        self.timeout_s = timeout_s

    def channel(self, kind: str) -> Channel:
        """Model-visible kinds are the tool's result; the rest fail the workflow."""
        return "model" if kind in MODEL_VISIBLE_KINDS else "host"

    async def call(self, executor: Executor, attempt: Attempt) -> Reply:
        """One ``KitCall`` execution; the gate answered as ``attempt.answer`` says."""
        # (DESIGN's bridge contract names engine.new_id; it is not public yet.)
        workflow_id = attempt.run_id or new_id("run")
        call_id = attempt.call_id or new_id("call")
        # Leave: nobody will answer, so no gate: the executor's own port decides.
        gated = not isinstance(attempt.answer, Leave)
        plan = {"tool": attempt.tool, "args": attempt.args, "call_id": call_id, "gate": gated}
        # A task queue per attempt: only this attempt's worker (and executor) serves it.
        queue = f"agent-adapter-kit-{new_id('queue')}"
        return await run_attempt(
            self.client,
            executor,
            KitCall,
            plan,
            workflow_id=workflow_id,
            queue=queue,
            timeout_s=self.timeout_s,
            outcome=lambda handle: settle(
                handle,
                attempt.answer,
                call_id,
                gated=gated,
                kind_of=lambda exc: error_kind(exc.cause),
                reply=_reply,
            ),
        )
