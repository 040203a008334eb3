"""Approvals through ``ApprovalGate`` on a real dev server: approve, deny, edit, timeout,
and the answers the gate refuses; the ledger records each as a non-Temporal run would."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from temporal_support import require

require()

from temporal_app import ledger_view, result_of, running_worker, waiting_at_gate  # noqa: E402
from temporal_workflows import AgentRun  # noqa: E402
from temporalio.client import WorkflowUpdateFailedError  # noqa: E402

from agent_adapter import digest  # noqa: E402
from agent_adapter.integrations.temporal import APPROVE_SIGNAL, APPROVE_UPDATE, PENDING_QUERY  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="session")

REFUND = {"order_id": "A1", "amount_cents": 500}
REFUND_DIGEST = digest(REFUND)


def _ids() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:12]
    return f"wf-{tag}", f"queue-{tag}"


def _requested(wf: str, call_id: str, tool: str, args: Any) -> dict[str, Any]:
    return {
        "type": "call.requested",
        "run_id": wf,
        "call_id": call_id,
        "tool": tool,
        "args": args,
        "metadata": {"integration": "temporal", "activity_id": "2", "attempt": 1},
    }


async def test_approve_by_update_runs_once_with_the_approved_digest(
    temporal_env: Any, tmp_path: Path
) -> None:
    """An Update approving the pending call's digest runs it once; the ledger shows a
    context approval by the reviewer for that digest, and the audit is clean."""
    client = temporal_env.client
    wf, queue = _ids()
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects.log"
    plan = {"calls": [{"tool": "refund", "args": REFUND, "call_id": "call_1"}]}
    async with running_worker(client, queue, ledger, effects):
        handle = await client.start_workflow(AgentRun.run, plan, id=wf, task_queue=queue)
        await waiting_at_gate(handle)
        pending = await handle.query(PENDING_QUERY)
        answer = {"call_id": "call_1", "approved": True, "reviewer": "alice",
                  "digest": pending[0]["digest"]}
        accepted = await handle.execute_update(APPROVE_UPDATE, answer)
        result = await result_of(handle)
    base = {"run_id": wf, "call_id": "call_1", "tool": "refund"}
    assert (pending, accepted, result, effects.read_text()) == (
        [{"call_id": "call_1", "tool": "refund", "digest": REFUND_DIGEST, "args": REFUND}],
        "approved",
        [{"value": "refunded 500 on A1"}],
        "refund A1 500\n",
    )
    assert await ledger_view(ledger) == (
        [
            _requested(wf, "call_1", "refund", REFUND),
            {**base, "type": "call.validated", "digest": REFUND_DIGEST},
            {**base, "type": "approval.requested", "digest": REFUND_DIGEST},
            {**base, "type": "approval.granted", "reviewer": "alice", "source": "context",
             "digest": REFUND_DIGEST},
            {**base, "type": "effect.claimed", "key": "refund:A1", "digest": REFUND_DIGEST},
            {**base, "type": "call.started", "digest": REFUND_DIGEST, "effect_key": "refund:A1"},
            {**base, "type": "call.succeeded", "result": "refunded 500 on A1"},
        ],
        [],
        True,
    )
