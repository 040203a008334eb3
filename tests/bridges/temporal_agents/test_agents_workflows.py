"""OpenAI agents in Temporal workflows, every tool call through the executor, on the real
dev server: workers SIGKILLed while a call waits for approval and right after a commit,
the Replayer with the plugin, one payment for one effect key across workflows, a denial,
an edit, an approval timeout and a reused call id.

Gated on what the processes print, on their exit and on the history's own events, never
on time (the approval timeout is a durable timer of one second).
"""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporal_support import require

require()

from agents_app import MODEL_ACTIVITY, replay, running_agent_worker, scheduled  # noqa: E402
from agents_workflows import ShopAgent  # noqa: E402
from temporal_app import ledger_view, result_of, waiting_at_gate  # noqa: E402
from temporalio.client import WorkflowFailureError  # noqa: E402
from test_temporal_crash import WorkerProcess, _attempts  # noqa: E402

from agent_adapter import digest  # noqa: E402
from agent_adapter.integrations.temporal import APPROVE_UPDATE, PENDING_QUERY, RUN  # noqa: E402
from agent_adapter.integrations.temporal_openai_agents import error_kind  # noqa: E402
from agent_adapter.testing.temporal_openai_agents import agent_client, planned_prompt  # noqa: E402

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.usefixtures("bounded")]

PAY = {"order_id": "B2", "amount_cents": 700}
REFUND = {"order_id": "A1", "amount_cents": 500}
#: The payment's value as the model is shown it (compact JSON, as the bridge encodes it).
PAID = '{"paid":700,"order_id":"B2"}'


class AgentWorker(WorkerProcess):
    """``agents_worker.py`` as a child process."""

    script = Path(__file__).with_name("agents_worker.py")


def _ids() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:12]
    return f"agent-{tag}", f"agent-queue-{tag}"


def _prompt(tool: str, args: dict[str, Any], call_id: str = "call_1") -> str:
    return planned_prompt([[{"tool": tool, "args": args, "call_id": call_id}]])


def _files(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "ledger.db", tmp_path / "effects.log"


def _effects(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def _answer(handle: Any, call_id: str, args: dict[str, Any], **fields: Any) -> None:
    await waiting_at_gate(handle)
    answer = {"call_id": call_id, "reviewer": "alice", "digest": digest(args), **fields}
    await handle.execute_update(APPROVE_UPDATE, answer)


async def test_a_worker_killed_while_a_call_waits_for_approval_loses_nothing(
    temporal_env: Any, tmp_path: Path
) -> None:
    """The worker holding the agent's workflow at the gate is SIGKILLed; a new worker
    rebuilds the agent run and the pending refund by replay (the model is not called
    again), an Update approves it, the refund runs once, and the run finishes."""
    client = agent_client(temporal_env.client)
    address = client.service_client.config.target_host
    wf, queue = _ids()
    ledger, effects = _files(tmp_path)
    first = await AgentWorker.start(tmp_path, address, queue, str(ledger), str(effects))
    handle = await client.start_workflow(
        ShopAgent.run, {"prompts": [_prompt("refund", REFUND)]}, id=wf, task_queue=queue
    )
    await waiting_at_gate(handle)
    assert await first.kill() == -signal.SIGKILL
    async with running_agent_worker(client, queue, ledger, effects):
        pending = await handle.query(PENDING_QUERY)
        await _answer(handle, "call_1", REFUND, approved=True)
        result = await result_of(handle)
    history = await handle.fetch_history()
    events, problems, verified = await ledger_view(ledger)
    assert (pending, result, _effects(effects), problems, verified) == (
        [{"call_id": "call_1", "tool": "refund", "digest": digest(REFUND), "args": REFUND}],
        [{"outputs": ["refunded 500 on A1"], "final": "done"}],
        "refund A1 500\n",
        [],
        True,
    )
    # Two model turns (the call, then the answer), each one activity, never called again.
    assert (scheduled(history, MODEL_ACTIVITY), [e["type"] for e in events]) == (
        2,
        [
            "call.requested",
            "call.validated",
            "approval.requested",
            "approval.granted",
            "effect.claimed",
            "call.started",
            "call.succeeded",
        ],
    )
    assert {(e["run_id"], e["call_id"]) for e in events} == {(wf, "call_1")}
    await replay(history)


async def test_a_worker_killed_right_after_the_commit_is_answered_from_the_ledger(
    temporal_env: Any, tmp_path: Path
) -> None:
    """The worker dies (SIGKILL) right after the payment's outcome is durable; Temporal
    retries ``run`` on another worker, which answers from the ledger (``call.replayed``):
    one payment, the agent gets the first result, and the history replays."""
    client = agent_client(temporal_env.client)
    address = client.service_client.config.target_host
    wf, queue = _ids()
    ledger, effects = _files(tmp_path)
    marker = tmp_path / "died"
    doomed = await AgentWorker.start(
        tmp_path, address, queue, str(ledger), str(effects), "pay", str(marker)
    )
    plan = {"prompts": [_prompt("pay", PAY)], "start_to_close_s": 5}
    handle = await client.start_workflow(ShopAgent.run, plan, id=wf, task_queue=queue)
    assert (await doomed.exited(), marker.read_text()) == (-signal.SIGKILL, f"{wf} call_1\n")
    async with running_agent_worker(client, queue, ledger, effects):
        result = await result_of(handle)
    history = await handle.fetch_history()
    events, problems, verified = await ledger_view(ledger)
    assert (result, _effects(effects), _attempts(history, RUN), problems, verified) == (
        [{"outputs": [PAID], "final": "done"}],
        "pay B2 700\n",
        [2],
        [],
        True,
    )
    assert [e["type"] for e in events][-2:] == ["call.succeeded", "call.replayed"]
    assert scheduled(history, MODEL_ACTIVITY) == 2
    await replay(history)


async def test_the_same_effect_key_in_two_workflows_pays_once(
    temporal_env: Any, tmp_path: Path
) -> None:
    """A second workflow's agent pays the same order: the executor refuses it as a
    duplicate effect, which fails that workflow (non-retryable, through the plugin's
    AgentsWorkflowError); ``error_kind`` finds the kind in the client's error."""
    client = agent_client(temporal_env.client)
    ledger, effects = _files(tmp_path)
    first, queue = _ids()
    second = f"{first}-again"
    plan = {"prompts": [_prompt("pay", PAY)]}
    async with running_agent_worker(client, queue, ledger, effects):
        paid = await result_of(
            await client.start_workflow(ShopAgent.run, plan, id=first, task_queue=queue)
        )
        handle = await client.start_workflow(ShopAgent.run, plan, id=second, task_queue=queue)
        with pytest.raises(WorkflowFailureError) as failed:
            await result_of(handle)
    events, problems, _ = await ledger_view(ledger)
    assert (paid[0]["outputs"], _effects(effects), error_kind(failed.value), problems) == (
        [PAID],
        "pay B2 700\n",
        "duplicate-effect",
        [],
    )
    assert [e["type"] for e in events if e["run_id"] == second][-1] == "call.duplicate"
    await replay(await handle.fetch_history())


@pytest.mark.parametrize(
    ("answer", "output", "made"),
    [
        (
            {"approved": False, "reason": "not this one"},
            {
                "error": {
                    "kind": "approval-denied",
                    "message": "refund was not approved: not this one",
                }
            },
            "",
        ),
        (
            {"approved": True, "edits": {"order_id": "A1", "amount_cents": 300}},
            "refunded 300 on A1",
            "refund A1 300\n",
        ),
    ],
    ids=["deny", "edit"],
)
async def test_the_reviewers_answer_reaches_the_model(
    temporal_env: Any, tmp_path: Path, answer: dict[str, Any], output: Any, made: str
) -> None:
    """A denial is the tool's output (the refund never starts) and the run goes on; an
    edit runs the edited arguments, validated again by the executor."""
    client = agent_client(temporal_env.client)
    wf, queue = _ids()
    ledger, effects = _files(tmp_path)
    async with running_agent_worker(client, queue, ledger, effects):
        handle = await client.start_workflow(
            ShopAgent.run, {"prompts": [_prompt("refund", REFUND)]}, id=wf, task_queue=queue
        )
        await _answer(handle, "call_1", REFUND, **answer)
        result = await result_of(handle)
    _, problems, verified = await ledger_view(ledger)
    shown = output if isinstance(output, str) else json.loads(result[0]["outputs"][0])
    assert (shown, result[0]["final"], _effects(effects), problems, verified) == (
        output,
        "done",
        made,
        [],
        True,
    )


async def test_an_approval_nobody_gives_in_time_is_a_denial(
    temporal_env: Any, tmp_path: Path
) -> None:
    """Past ``approval_timeout`` (a durable timer) the call is denied with reason
    "timeout"; the model is told, and the refund never runs."""
    client = agent_client(temporal_env.client)
    wf, queue = _ids()
    ledger, effects = _files(tmp_path)
    plan = {"prompts": [_prompt("refund", REFUND)], "approval_timeout_s": 1}
    async with running_agent_worker(client, queue, ledger, effects):
        handle = await client.start_workflow(ShopAgent.run, plan, id=wf, task_queue=queue)
        result = await result_of(handle)
    events, problems, _ = await ledger_view(ledger)
    denied = [e for e in events if e["type"] == "approval.denied"]
    assert (json.loads(result[0]["outputs"][0])["error"]["kind"], _effects(effects)) == (
        "approval-denied",
        "",
    )
    # (omit_defaults: the empty reviewer of a timeout is not written)
    assert ([(e.get("reviewer", ""), e["reason"]) for e in denied], problems) == (
        [("", "timeout")],
        [],
    )


async def test_a_call_id_reused_for_another_call_is_refused(
    temporal_env: Any, tmp_path: Path
) -> None:
    """Two agent runs in one workflow whose model gives both calls the id "call" (as
    Temporal's ResponseBuilders.tool_call does): the same call again is answered from the
    ledger (one payment); another call under that id is refused (tool-usage) before it
    is prepared, never answered with the first call's result."""
    client = agent_client(temporal_env.client)
    wf, queue = _ids()
    ledger, effects = _files(tmp_path)
    same = _prompt("pay", PAY, "call")
    third = _prompt("pay", {"order_id": "C3", "amount_cents": 100}, "call")
    other = _prompt("pay", {"order_id": "D4", "amount_cents": 200}, "call")
    async with running_agent_worker(client, queue, ledger, effects):
        repeated = await result_of(
            await client.start_workflow(
                ShopAgent.run, {"prompts": [same, same]}, id=wf, task_queue=queue
            )
        )
        handle = await client.start_workflow(
            ShopAgent.run, {"prompts": [third, other]}, id=f"{wf}-other", task_queue=queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await result_of(handle)
    events, problems, _ = await ledger_view(ledger)
    assert ([r["outputs"] for r in repeated], _effects(effects), problems) == (
        [[PAID], [PAID]],
        "pay B2 700\npay C3 100\n",
        [],
    )
    assert error_kind(failed.value) == "tool-usage"
    # The repeat was answered from the ledger; the refused call reached no activity. (The
    # ledger records the model's arguments as the text it sent, as the OpenAI bridge does.)
    assert [e["type"] for e in events if e["run_id"] == wf][-1] == "call.replayed"
    requested = [json.loads(e["args"]) for e in events if e["type"] == "call.requested"]
    assert [a["order_id"] for a in requested] == ["B2", "C3"]
    await replay(await handle.fetch_history())


async def test_a_tool_whose_parameter_has_a_default_is_built_in_the_sandbox(
    temporal_env: Any, tmp_path: Path
) -> None:
    """``note`` (``urgent: bool = False``) imports jsonschema for its schema; built in the
    workflow, that import is passed through the sandbox and the call runs."""
    client = agent_client(temporal_env.client)
    wf, queue = _ids()
    ledger, effects = _files(tmp_path)
    async with running_agent_worker(client, queue, ledger, effects):
        result = await result_of(
            await client.start_workflow(
                ShopAgent.run,
                {"prompts": [_prompt("note", {"text": "restock"})]},
                id=wf,
                task_queue=queue,
            )
        )
    assert result == [{"outputs": ["noted: restock"], "final": "done"}]
