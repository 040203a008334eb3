"""An effect key in flight: another replica's call holds it while a workflow asks for it.

The engine refuses the workflow's call with ``effect-in-flight`` (that call id's one
outcome), and the bridge lets Temporal retry it under the next call id of the walk
``<call_id>``, ``<call_id>#2``, ...; once the holder has finished, the retry gets the
key's fate: ``duplicate-effect`` after a commit, a run after a ``ToolError`` (the key
freed). First the activity alone (``ActivityEnvironment``), then whole workflows on the
real dev server. Gated on ``asyncio.Event`` and on the ledger, never on time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from _helpers import timeline
from temporal_support import require

require()

from temporal_app import TIMEOUT_S, ledger_view, result_of, running_worker, waiting_at_gate  # noqa: E402
from temporal_workflows import AgentRun  # noqa: E402
from temporalio.api.enums.v1 import RetryState  # noqa: E402
from temporalio.exceptions import ApplicationError  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from agent_adapter import Executor, Registry, digest  # noqa: E402
from agent_adapter.errors import ToolError  # noqa: E402
from agent_adapter.integrations.temporal import (  # noqa: E402
    APPROVE_UPDATE,
    PENDING_QUERY,
    RUN,
    RunInput,
    ToolActivities,
    ToolResult,
)
from agent_adapter.ledger import CallAmbiguous, SQLiteLedger  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="session")

REFUND = {"order_id": "A1", "amount_cents": 500}
REFUND_DIGEST = digest(REFUND)


class Holder:
    """Replica A: an executor on the shared ledger whose ``refund`` (the same effect key
    as the workers') holds the key until ``release`` is set, then succeeds (a line in
    ``effects``) or, with ``fail``, raises ``ToolError`` (it did nothing: the key is
    freed)."""

    def __init__(self, effects: Path, *, fail: bool) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.registry = Registry()

        @self.registry.tool(effect="refund:{order_id}")
        async def refund(order_id: str, amount_cents: int) -> str:
            """Refund an order (the holder's replica)."""
            self.entered.set()
            await self.release.wait()
            if fail:
                raise ToolError("the provider refused: nothing refunded")
            with effects.open("a", encoding="utf-8") as out:
                out.write(f"refund {order_id} {amount_cents} by the holder\n")
            return f"refunded {amount_cents} on {order_id}"

    @asynccontextmanager
    async def holding(self, ledger: Path) -> AsyncIterator[asyncio.Task[Any]]:
        """The holder's call (run ``holder-run``, call ``h1``), its body entered: the key is
        in flight. Yields the call's task; on exit the body is released and awaited."""
        executor = await Executor.open(self.registry, ledger=SQLiteLedger(str(ledger)))
        task = asyncio.create_task(
            executor.call("refund", REFUND, run_id="holder-run", call_id="h1")
        )
        try:
            await asyncio.wait_for(self.entered.wait(), TIMEOUT_S)
            yield task
        finally:
            self.release.set()
            await asyncio.gather(task, return_exceptions=True)
            await executor.close()


def _worker_registry(ran: list[str]) -> Registry:
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order (the worker's replica)."""
        ran.append(order_id)
        return f"refunded {amount_cents} on {order_id}"

    @registry.tool
    async def lookup(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}"

    return registry


def _env(attempt: int) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id="wf-1", attempt=attempt)
    return env


async def _attempt(activities: ToolActivities, attempt: int, request: RunInput) -> Any:
    """One attempt of ``run``: its ``ToolResult``, or ``(kind, non_retryable,
    ledger_call_id)`` of the ``ApplicationError`` it raised."""
    try:
        return await _env(attempt).run(activities.run, request)
    except ApplicationError as exc:
        return exc.type, exc.non_retryable, exc.details[0].get("ledger_call_id")


@asynccontextmanager
async def _worker(path: Path, ran: list[str]) -> AsyncIterator[ToolActivities]:
    """A worker's ToolActivities on the shared ledger at ``path`` (its refunds go to ``ran``)."""
    worker = await Executor.open(_worker_registry(ran), ledger=SQLiteLedger(str(path)))
    try:
        yield ToolActivities(worker)
    finally:
        await worker.close()


async def _calls(path: Path, run_id: str) -> dict[str, list[str]]:
    """The event types of each call of ``run_id`` in the ledger, by call id."""
    ledger = SQLiteLedger(str(path))
    calls: dict[str, list[str]] = {}
    try:
        async for event in ledger.read(run_id=run_id):
            calls.setdefault(event.call_id, []).append(event.type)
    finally:
        await ledger.close()
    return calls


REFUSED = timeline("call.ambiguous")


async def test_the_retry_of_a_call_refused_in_flight_gets_the_holders_commit(
    tmp_path: Path,
) -> None:
    """While the holder runs, each attempt is refused in flight (retryable) under a new
    call id; after the holder's commit the next one is a duplicate (final), and a repeat
    of that attempt is answered from the ledger under the same id. The worker's body
    never ran."""
    ran: list[str] = []
    path = tmp_path / "ledger.db"
    holder = Holder(tmp_path / "effects.log", fail=False)
    request = RunInput(tool="refund", args=REFUND, call_id="c1")
    async with holder.holding(path) as held, _worker(path, ran) as activities:
        refused = [await _attempt(activities, attempt, request) for attempt in (1, 2)]
        holder.release.set()
        committed = await held
        duplicate = await _attempt(activities, 3, request)
        repeated = await _attempt(activities, 4, request)
    calls = await _calls(path, "wf-1")
    assert (refused, committed, duplicate, repeated, ran) == (
        [("effect-in-flight", False, "c1"), ("effect-in-flight", False, "c1#2")],
        "refunded 500 on A1",
        ("duplicate-effect", True, "c1#3"),
        ("duplicate-effect", True, "c1#3"),
        [],
    )
    assert calls == {
        "c1": REFUSED,
        "c1#2": REFUSED,
        "c1#3": ["call.requested", "call.validated", "call.duplicate", "call.replayed"],
    }


async def test_the_retry_of_a_call_refused_in_flight_runs_once_the_key_is_freed(
    tmp_path: Path,
) -> None:
    """The holder raises ToolError (it did nothing: the key is freed); the retry runs the
    refund, and a repeat of that attempt (a crash after the commit) is answered from the
    ledger: the body ran once. A first attempt under an id already refused in flight (a
    workflow that asks again) decides again (the refusal is not final: a new attempt of
    that id, refused in flight again while the holder runs), and the walk moves on."""
    ran: list[str] = []
    path = tmp_path / "ledger.db"
    holder = Holder(tmp_path / "effects.log", fail=True)
    request = RunInput(tool="refund", args=REFUND, call_id="c1")
    async with holder.holding(path) as held, _worker(path, ran) as activities:
        refused = [await _attempt(activities, 1, request) for _ in range(2)]
        holder.release.set()
        with pytest.raises(ToolError):
            await held
        done = await _attempt(activities, 2, request)
        repeated = await _attempt(activities, 3, request)
    value = ToolResult(value="refunded 500 on A1", ledger_call_id="c1#2")
    assert (refused, done, repeated, ran) == (
        [("effect-in-flight", False, "c1")] * 2,
        value,
        value,
        ["A1"],
    )
    assert await _calls(path, "wf-1") == {
        "c1": [*REFUSED, *REFUSED],
        "c1#2": [
            "call.requested",
            "call.validated",
            "effect.claimed",
            "call.started",
            "call.succeeded",
            "call.replayed",
        ],
    }


async def test_the_walk_steps_over_ids_the_workflow_uses_itself(tmp_path: Path) -> None:
    """A workflow whose own call ids look like the walk's (``c1#2``, ``c1#3``) keeps them
    apart: a suffixed id is a retry's only if its ``call.requested`` says so
    (``retry_of``), so neither call is ever answered with the other's outcome."""
    ran: list[str] = []
    path = tmp_path / "ledger.db"
    holder = Holder(tmp_path / "effects.log", fail=True)
    refund = RunInput(tool="refund", args=REFUND, call_id="c1")
    async with holder.holding(path) as held, _worker(path, ran) as activities:
        answers = [await _attempt(activities, 1, refund)]
        # The workflow's own call "c1#2", before c1's retry: it keeps its id.
        own = RunInput(tool="lookup", args={"order_id": "A1"}, call_id="c1#2")
        answers.append(await _attempt(activities, 1, own))
        answers.append(await _attempt(activities, 2, refund))  # steps over c1#2
        # The workflow's own "c1#3", after c1's retry took that id: it gets its own.
        later = RunInput(tool="lookup", args={"order_id": "A2"}, call_id="c1#3")
        answers.append(await _attempt(activities, 1, later))
        answers.append(await _attempt(activities, 2, later))  # a repeat: the same id
        holder.release.set()
        with pytest.raises(ToolError):
            await held
        answers.append(await _attempt(activities, 3, refund))
        answers.append(await _attempt(activities, 4, refund))  # a repeat: the same id
    lookup = timeline("call.succeeded")
    ran_refund = ["call.requested", "call.validated", "effect.claimed", *lookup[2:]]
    assert answers == [
        ("effect-in-flight", False, "c1"),
        ToolResult(value="order A1", ledger_call_id="c1#2"),
        ("effect-in-flight", False, "c1#3"),
        ToolResult(value="order A2", ledger_call_id="c1#3#2"),
        ToolResult(value="order A2", ledger_call_id="c1#3#2"),
        ToolResult(value="refunded 500 on A1", ledger_call_id="c1#4"),
        ToolResult(value="refunded 500 on A1", ledger_call_id="c1#4"),
    ]
    assert (ran, await _calls(path, "wf-1")) == (
        ["A1"],
        {
            "c1": REFUSED,
            "c1#2": lookup,
            "c1#3": REFUSED,
            "c1#3#2": [*lookup, "call.replayed"],
            "c1#4": [*ran_refund, "call.replayed"],
        },
    )


# --- whole workflows on the dev server ------------------------------------------------


async def _refused_in_flight(path: Path, run_id: str) -> str:
    """Return the call id of the first in-flight refusal recorded for ``run_id``, polling
    the ledger (at most TIMEOUT_S)."""

    async def poll() -> str:
        ledger = SQLiteLedger(str(path))
        seen = 0
        try:
            while True:
                async for event in ledger.read(after=seen, run_id=run_id):
                    seen = event.seq
                    if isinstance(event, CallAmbiguous) and event.in_flight:
                        return event.call_id
                await asyncio.sleep(0.05)  # a poll interval, not a synchronization
        finally:
            await ledger.close()

    return await asyncio.wait_for(poll(), TIMEOUT_S)


async def _run_against_holder(
    temporal_env: Any, tmp_path: Path, *, fail: bool
) -> tuple[str, Any, Any, str, Any]:
    """A workflow refunds A1 (approved by Update) while the holder holds its key; once an
    attempt was refused in flight, the holder is released. Returns the workflow id, the
    holder's outcome, the workflow's result, the effects and the history."""
    client = temporal_env.client
    tag = uuid.uuid4().hex[:12]
    wf, queue = f"wf-{tag}", f"queue-{tag}"
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects.log"
    effects.touch()
    plan = {
        "calls": [{"tool": "refund", "args": REFUND, "call_id": "call_1"}],
        "attempts": 200,
        "max_interval_s": 0.2,
    }
    holder = Holder(effects, fail=fail)
    async with holder.holding(ledger) as held:
        async with running_worker(client, queue, ledger, effects):
            handle = await client.start_workflow(AgentRun.run, plan, id=wf, task_queue=queue)
            await waiting_at_gate(handle)
            pending = await handle.query(PENDING_QUERY)
            answer = {"call_id": "call_1", "approved": True, "reviewer": "alice"}
            await handle.execute_update(APPROVE_UPDATE, {**answer, "digest": pending[0]["digest"]})
            assert await _refused_in_flight(ledger, wf) == "call_1"
            holder.release.set()
            try:
                outcome: Any = await held
            except ToolError as exc:
                outcome = exc
            result = await result_of(handle)
        history = await handle.fetch_history()
    return wf, outcome, result, effects.read_text(), history


def _by_call(view: list[dict[str, Any]], wf: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """The holder's events, and the workflow's calls (each a list of its events) in the
    order of the walk; each in-flight refusal's reason is checked and left out."""
    holder = [e for e in view if e["run_id"] == "holder-run"]
    calls: dict[str, list[dict[str, Any]]] = {}
    for event in view:
        if event["run_id"] == wf:
            if event["type"] == "call.ambiguous":
                reason = event.pop("reason")
                assert reason.startswith("effect refund:A1 is in flight: held by executor "), reason
                assert "for call h1 (run holder-run)" in reason, reason
                assert reason.endswith(
                    "retry later, once that call has finished (the same call id decides again)"
                ), reason
            calls.setdefault(event["call_id"], []).append(event)
    return holder, list(calls.values())


def _approved(wf: str, call_id: str, attempt: int) -> list[dict[str, Any]]:
    """The events every attempt of the workflow's refund starts with, under ``call_id``."""
    base = {"run_id": wf, "call_id": call_id, "tool": "refund"}
    metadata: dict[str, Any] = {"integration": "temporal", "activity_id": "2", "attempt": attempt}
    if call_id != "call_1":
        metadata["retry_of"] = "call_1"
    return [
        {**base, "type": "call.requested", "args": REFUND, "metadata": metadata},
        {**base, "type": "call.validated", "digest": REFUND_DIGEST},
        {**base, "type": "approval.requested", "digest": REFUND_DIGEST},
        {
            **base,
            "type": "approval.granted",
            "reviewer": "alice",
            "source": "context",
            "digest": REFUND_DIGEST,
        },
    ]


def _walk(wf: str, last: list[dict[str, Any]], n: int) -> list[list[dict[str, Any]]]:
    """What the ledger must hold for ``n`` attempts: ``call_1``, ``call_1#2``, ... each
    refused in flight, then the last attempt's events (``last``, without its ``base``)."""
    calls = []
    for k in range(1, n + 1):
        call_id = "call_1" if k == 1 else f"call_1#{k}"
        base = {"run_id": wf, "call_id": call_id, "tool": "refund"}
        tail = (
            [{**base, **e} for e in last]
            if k == n
            else [{**base, "type": "call.ambiguous", "key": "refund:A1", "in_flight": True}]
        )
        calls.append(_approved(wf, call_id, k) + tail)
    return calls


def _run_attempts(history: Any) -> tuple[list[int], list[int]]:
    """``run``'s attempt numbers (its started events) and retry states (its failed
    events); Temporal records only the attempt that finished the activity."""
    scheduled = {
        e.event_id
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == RUN
    }
    started, failed = [], []
    for e in history.events:
        if e.HasField("activity_task_started_event_attributes"):
            attrs = e.activity_task_started_event_attributes
            if attrs.scheduled_event_id in scheduled:
                started.append(attrs.attempt)
        elif e.HasField("activity_task_failed_event_attributes"):
            failure = e.activity_task_failed_event_attributes
            if failure.scheduled_event_id in scheduled:
                failed.append(failure.retry_state)
    return started, failed


HOLDER = [
    {"type": "call.requested", "args": REFUND},
    {"type": "call.validated", "digest": REFUND_DIGEST},
    {"type": "effect.claimed", "key": "refund:A1", "digest": REFUND_DIGEST},
    {"type": "call.started", "digest": REFUND_DIGEST, "effect_key": "refund:A1"},
]


def _holder(last: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"run_id": "holder-run", "call_id": "h1", "tool": "refund"}
    return [{**base, **e} for e in [*HOLDER, last]]


async def test_a_workflow_that_lost_the_race_to_a_committing_holder_ends_duplicate(
    temporal_env: Any, tmp_path: Path
) -> None:
    """The holder commits the refund: the workflow's attempts were refused in flight
    (retried by Temporal, each under its own call id) until one got ``duplicate-effect``,
    a final (non-retryable) answer naming the holder's call; the refund happened once."""
    wf, outcome, result, effects, history = await _run_against_holder(
        temporal_env, tmp_path, fail=False
    )
    view, problems, verified = await ledger_view(tmp_path / "ledger.db")
    holder, calls = _by_call(view, wf)
    n = len(calls)
    duplicate = {
        "type": "call.duplicate",
        "key": "refund:A1",
        "by_run_id": "holder-run",
        "by_call_id": "h1",
        "same_args": True,
    }
    assert n >= 2, calls
    assert (outcome, result, effects, problems, verified) == (
        "refunded 500 on A1",
        [{"refused": "duplicate-effect", "ledger_call_id": f"call_1#{n}"}],
        "refund A1 500 by the holder\n",
        [],
        True,
    )
    assert holder == _holder({"type": "call.succeeded", "result": "refunded 500 on A1"})
    assert calls == _walk(wf, [duplicate], n)
    # Temporal ran n attempts of ``run``; the last failed for good (non-retryable).
    assert _run_attempts(history) == ([n], [RetryState.RETRY_STATE_NON_RETRYABLE_FAILURE])


async def test_a_workflow_that_lost_the_race_to_a_failing_holder_runs_the_refund(
    temporal_env: Any, tmp_path: Path
) -> None:
    """The holder raises ToolError (it did nothing: the key is freed): a later attempt of
    the workflow's refund runs it, under its own call id, with the reviewer's approval,
    and the workflow returns its value; the refund happened exactly once."""
    wf, outcome, result, effects, history = await _run_against_holder(
        temporal_env, tmp_path, fail=True
    )
    view, problems, verified = await ledger_view(tmp_path / "ledger.db")
    holder, calls = _by_call(view, wf)
    n = len(calls)
    ran = [
        {"type": "effect.claimed", "key": "refund:A1", "digest": REFUND_DIGEST},
        {"type": "call.started", "digest": REFUND_DIGEST, "effect_key": "refund:A1"},
        {"type": "call.succeeded", "result": "refunded 500 on A1"},
    ]
    assert n >= 2, calls
    assert (str(outcome), result, effects, problems, verified) == (
        "the provider refused: nothing refunded",
        [{"value": "refunded 500 on A1", "ledger_call_id": f"call_1#{n}"}],
        "refund A1 500\n",
        [],
        True,
    )
    assert holder == _holder(
        {
            "type": "call.failed",
            "error_kind": "tool-error",
            "error": "the provider refused: nothing refunded",
        }
    )
    assert calls == _walk(wf, ran, n)
    assert _run_attempts(history) == ([n], [])
