"""Workers that die: real worker processes killed with SIGKILL, on the real dev server.

Gated on what the processes print and on their exit, never on time. The workflow still
completes, each effect happened once (the "payment provider" file has one line), and
the ledger audits clean; a ``Replayer`` then replays the recorded history.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporal_support import require

require()

from temporal_app import TIMEOUT_S, ledger_view, result_of, running_worker, waiting_at_gate  # noqa: E402
from temporal_workflows import AgentRun  # noqa: E402
from temporalio import workflow  # noqa: E402
from temporalio.client import WorkflowHistory  # noqa: E402
from temporalio.worker import Replayer  # noqa: E402

from agent_adapter import digest  # noqa: E402
from agent_adapter.integrations.temporal import APPROVE_UPDATE, PENDING_QUERY, RUN  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="session")

WORKER = Path(__file__).with_name("temporal_worker.py")
PAY = {"order_id": "B2", "amount_cents": 700}
REFUND = {"order_id": "A1", "amount_cents": 500}


class WorkerProcess:
    """``script`` (``temporal_worker.py``) as a child process; ``ready`` waits for its
    first line."""

    script = WORKER

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, tmp_path: Path, *args: str) -> WorkerProcess:
        log = (tmp_path / f"worker-{uuid.uuid4().hex[:6]}.err").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(cls.script), *args, stdout=asyncio.subprocess.PIPE, stderr=log
        )
        log.close()
        self = cls(proc)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT_S)
        assert line == b"ready\n", line
        return self

    async def exited(self) -> int:
        return await asyncio.wait_for(self.proc.wait(), TIMEOUT_S)

    async def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        return await self.exited()


def _attempts(history: WorkflowHistory, activity: str) -> list[int]:
    """The attempt numbers of ``activity``'s started events, in history order (Temporal
    writes one per activity: that of the attempt that finished it)."""
    names = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    return [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
        and names[e.activity_task_started_event_attributes.scheduled_event_id] == activity
    ]


def _ids() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:12]
    return f"wf-{tag}", f"queue-{tag}"


async def test_a_worker_killed_after_the_commit_is_answered_from_the_ledger(
    temporal_env: Any, tmp_path: Path
) -> None:
    """The worker dies (SIGKILL) right after the outcome is durable, before Temporal hears;
    Temporal retries ``run`` on another worker, which answers from the ledger
    (``call.replayed``): the body ran once and the workflow gets the first result."""
    client = temporal_env.client
    address = client.service_client.config.target_host
    wf, queue = _ids()
    ledger, effects, marker = tmp_path / "ledger.db", tmp_path / "effects.log", tmp_path / "died"
    plan = {"calls": [{"tool": "pay", "args": PAY, "call_id": "call_1"}], "start_to_close_s": 5}
    doomed = await WorkerProcess.start(
        tmp_path, address, queue, str(ledger), str(effects), "pay", str(marker)
    )
    handle = await client.start_workflow(AgentRun.run, plan, id=wf, task_queue=queue)
    exit_code = await doomed.exited()
    assert (exit_code, marker.read_text(), effects.read_text()) == (
        -signal.SIGKILL,
        f"{wf} call_1\n",
        "pay B2 700\n",
    )
    async with running_worker(client, queue, ledger, effects):
        result = await result_of(handle)
    history = await handle.fetch_history()
    base = {"run_id": wf, "call_id": "call_1", "tool": "pay"}
    pay_digest = digest(PAY)
    assert (result, effects.read_text(), _attempts(history, RUN)) == (
        [{"value": {"paid": 700, "order_id": "B2"}}],
        "pay B2 700\n",
        [2],  # (history keeps only the attempt that completed: the retry)
    )
    assert await ledger_view(ledger) == (
        [
            {
                **base,
                "type": "call.requested",
                "args": PAY,
                "metadata": {"integration": "temporal", "activity_id": "2", "attempt": 1},
            },
            {**base, "type": "call.validated", "digest": pay_digest},
            {**base, "type": "effect.claimed", "key": "pay:B2", "digest": pay_digest},
            {**base, "type": "call.started", "digest": pay_digest, "effect_key": "pay:B2"},
            {**base, "type": "call.succeeded", "result": {"paid": 700, "order_id": "B2"}},
            {**base, "type": "call.replayed", "digest": pay_digest},
        ],
        [],
        True,
    )
    # The recorded history, with its timeout and retry, replays deterministically.
    await Replayer(workflows=[AgentRun]).replay_workflow(history)


async def test_a_worker_killed_with_an_approval_pending_loses_nothing(
    temporal_env: Any, tmp_path: Path
) -> None:
    """The worker holding a workflow that waits at its gate is SIGKILLed; a new worker
    rebuilds the pending call by replay, an Update approves it, and it runs once."""
    client = temporal_env.client
    address = client.service_client.config.target_host
    wf, queue = _ids()
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects.log"
    plan = {"calls": [{"tool": "refund", "args": REFUND, "call_id": "call_1"}]}
    first = await WorkerProcess.start(tmp_path, address, queue, str(ledger), str(effects))
    handle = await client.start_workflow(AgentRun.run, plan, id=wf, task_queue=queue)
    await waiting_at_gate(handle)
    assert await first.kill() == -signal.SIGKILL
    async with running_worker(client, queue, ledger, effects):
        pending = await handle.query(PENDING_QUERY)
        answer = {
            "call_id": "call_1",
            "approved": True,
            "reviewer": "alice",
            "digest": digest(REFUND),
        }
        await handle.execute_update(APPROVE_UPDATE, answer)
        result = await result_of(handle)
    events, problems, verified = await ledger_view(ledger)
    assert (pending, result, effects.read_text(), problems, verified) == (
        [{"call_id": "call_1", "tool": "refund", "digest": digest(REFUND), "args": REFUND}],
        [{"value": "refunded 500 on A1"}],
        "refund A1 500\n",
        [],
        True,
    )
    base = {"run_id": wf, "call_id": "call_1", "tool": "refund"}
    refund_digest = digest(REFUND)
    assert events == [
        {
            **base,
            "type": "call.requested",
            "args": REFUND,
            "metadata": {"integration": "temporal", "activity_id": "2", "attempt": 1},
        },
        {**base, "type": "call.validated", "digest": refund_digest},
        {**base, "type": "approval.requested", "digest": refund_digest},
        {
            **base,
            "type": "approval.granted",
            "reviewer": "alice",
            "source": "context",
            "digest": refund_digest,
        },
        {**base, "type": "effect.claimed", "key": "refund:A1", "digest": refund_digest},
        {**base, "type": "call.started", "digest": refund_digest, "effect_key": "refund:A1"},
        {**base, "type": "call.succeeded", "result": "refunded 500 on A1"},
    ]
    await Replayer(workflows=[AgentRun]).replay_workflow(await handle.fetch_history())


@workflow.defn(name="AgentRun")
class ChangedAgentRun:
    """``AgentRun`` after an incompatible change: it runs ``run`` without ``prepare``."""

    @workflow.run
    async def run(self, plan: dict[str, Any]) -> list[dict[str, Any]]:
        from datetime import timedelta

        with workflow.unsafe.imports_passed_through():
            from agent_adapter.integrations.temporal import RunInput

        step = plan["calls"][0]
        await workflow.execute_activity(
            RUN,
            RunInput(tool=step["tool"], args=step["args"], call_id=step["call_id"]),
            start_to_close_timeout=timedelta(seconds=5),
        )
        return []


async def test_the_replayer_catches_a_workflow_change_over_a_recorded_history(
    temporal_env: Any, tmp_path: Path
) -> None:
    """The determinism check has teeth: the same history that replays under ``AgentRun``
    fails under a changed workflow of the same name."""
    client = temporal_env.client
    wf, queue = _ids()
    plan = {"calls": [{"tool": "pay", "args": PAY, "call_id": "call_1"}]}
    async with running_worker(client, queue, tmp_path / "ledger.db", tmp_path / "effects.log"):
        handle = await client.start_workflow(AgentRun.run, plan, id=wf, task_queue=queue)
        await result_of(handle)
    history = await handle.fetch_history()
    await Replayer(workflows=[AgentRun]).replay_workflow(history)
    with pytest.raises(workflow.NondeterminismError):
        await Replayer(workflows=[ChangedAgentRun]).replay_workflow(history)
