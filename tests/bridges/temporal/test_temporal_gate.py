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
from temporalio.exceptions import ApplicationError  # noqa: E402

from agent_adapter import digest  # noqa: E402
from agent_adapter.integrations.temporal import APPROVE_SIGNAL, APPROVE_UPDATE, PENDING_QUERY  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="session")

REFUND = {"order_id": "A1", "amount_cents": 500}
REFUND_DIGEST = digest(REFUND)


def _ids() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:12]
    return f"wf-{tag}", f"queue-{tag}"


def _rejection(error: WorkflowUpdateFailedError) -> str:
    cause = error.cause
    assert isinstance(cause, ApplicationError) and cause.type == "approval-rejected"
    return cause.message


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
        answer = {
            "call_id": "call_1",
            "approved": True,
            "reviewer": "alice",
            "digest": pending[0]["digest"],
        }
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
            {
                **base,
                "type": "approval.granted",
                "reviewer": "alice",
                "source": "context",
                "digest": REFUND_DIGEST,
            },
            {**base, "type": "effect.claimed", "key": "refund:A1", "digest": REFUND_DIGEST},
            {**base, "type": "call.started", "digest": REFUND_DIGEST, "effect_key": "refund:A1"},
            {**base, "type": "call.succeeded", "result": "refunded 500 on A1"},
        ],
        [],
        True,
    )


async def _run_with_answer(
    temporal_env: Any, tmp_path: Path, plan: dict[str, Any], answer: dict[str, Any] | None
) -> tuple[str, list[Any], list[Any], str]:
    """Run ``plan`` on an in-process worker; at the gate, send ``answer`` by Update (None:
    send nothing). Returns the workflow id, what the Query showed, the result and the
    effects."""
    client = temporal_env.client
    wf, queue = _ids()
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects.log"
    effects.touch()
    pending: list[Any] = []
    async with running_worker(client, queue, ledger, effects):
        handle = await client.start_workflow(AgentRun.run, plan, id=wf, task_queue=queue)
        if answer is not None:
            await waiting_at_gate(handle)
            pending = await handle.query(PENDING_QUERY)
            await handle.execute_update(APPROVE_UPDATE, answer)
        result = await result_of(handle)
    return wf, pending, result, effects.read_text()


async def test_deny_by_update_never_starts_the_call(temporal_env: Any, tmp_path: Path) -> None:
    """A denial by Update reaches the workflow as model-visible approval-denied; the ledger
    records who denied which digest, and nothing started."""
    plan = {"calls": [{"tool": "refund", "args": REFUND, "call_id": "call_1"}]}
    answer = {
        "call_id": "call_1",
        "approved": False,
        "reviewer": "bob",
        "digest": REFUND_DIGEST,
        "reason": "not this order",
    }
    wf, _, result, effects = await _run_with_answer(temporal_env, tmp_path, plan, answer)
    base = {"run_id": wf, "call_id": "call_1", "tool": "refund"}
    message = "refund was not approved: not this order"
    assert (result, effects) == (
        [{"error": {"kind": "approval-denied", "message": message}}],
        "",
    )
    assert await ledger_view(tmp_path / "ledger.db") == (
        [
            _requested(wf, "call_1", "refund", REFUND),
            {**base, "type": "call.validated", "digest": REFUND_DIGEST},
            {**base, "type": "approval.requested", "digest": REFUND_DIGEST},
            {
                **base,
                "type": "approval.denied",
                "reviewer": "bob",
                "source": "context",
                "digest": REFUND_DIGEST,
                "reason": "not this order",
            },
            {**base, "type": "call.denied", "reviewer": "bob", "reason": "not this order"},
        ],
        [],
        True,
    )


async def test_edit_by_update_runs_only_the_edited_arguments(
    temporal_env: Any, tmp_path: Path
) -> None:
    """An approval with edits runs the edited arguments only; the grant names their digest."""
    plan = {"calls": [{"tool": "refund", "args": REFUND, "call_id": "call_1"}]}
    edited = {"order_id": "A1", "amount_cents": 300}
    answer = {
        "call_id": "call_1",
        "approved": True,
        "reviewer": "alice",
        "digest": REFUND_DIGEST,
        "edits": edited,
    }
    wf, _, result, effects = await _run_with_answer(temporal_env, tmp_path, plan, answer)
    base = {"run_id": wf, "call_id": "call_1", "tool": "refund"}
    edited_digest = digest(edited)
    assert (result, effects) == ([{"value": "refunded 300 on A1"}], "refund A1 300\n")
    assert await ledger_view(tmp_path / "ledger.db") == (
        [
            _requested(wf, "call_1", "refund", REFUND),
            {**base, "type": "call.validated", "digest": REFUND_DIGEST},
            {**base, "type": "approval.requested", "digest": REFUND_DIGEST},
            {
                **base,
                "type": "approval.granted",
                "reviewer": "alice",
                "source": "context",
                "digest": edited_digest,
                "edited": True,
            },
            {**base, "type": "effect.claimed", "key": "refund:A1", "digest": edited_digest},
            {**base, "type": "call.started", "digest": edited_digest, "effect_key": "refund:A1"},
            {**base, "type": "call.succeeded", "result": "refunded 300 on A1"},
        ],
        [],
        True,
    )


async def test_no_answer_within_the_approval_timeout_denies(
    temporal_env: Any, tmp_path: Path
) -> None:
    """Past ``approval_timeout`` (a durable timer) the call is denied with reason "timeout",
    recorded as a context decision with no reviewer."""
    plan = {
        "calls": [{"tool": "refund", "args": REFUND, "call_id": "call_1"}],
        "approval_timeout_s": 1,
    }
    wf, _, result, effects = await _run_with_answer(temporal_env, tmp_path, plan, None)
    base = {"run_id": wf, "call_id": "call_1", "tool": "refund"}
    assert (result, effects) == (
        [{"error": {"kind": "approval-denied", "message": "refund was not approved: timeout"}}],
        "",
    )
    assert await ledger_view(tmp_path / "ledger.db") == (
        [
            _requested(wf, "call_1", "refund", REFUND),
            {**base, "type": "call.validated", "digest": REFUND_DIGEST},
            {**base, "type": "approval.requested", "digest": REFUND_DIGEST},
            {
                **base,
                "type": "approval.denied",
                "source": "context",
                "digest": REFUND_DIGEST,
                "reason": "timeout",
            },
            {**base, "type": "call.denied", "reason": "timeout"},
        ],
        [],
        True,
    )


async def test_the_validator_rejects_wrong_answers_and_records_nothing(
    temporal_env: Any, tmp_path: Path
) -> None:
    """An Update with another digest, for a call that is not pending, or malformed, is
    rejected with a message saying why; the one right answer afterwards is the only
    approval the ledger holds, and a second answer for the same call is rejected too."""
    client = temporal_env.client
    wf, queue = _ids()
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects.log"
    plan = {"calls": [{"tool": "refund", "args": REFUND, "call_id": "call_1"}]}
    good = {"call_id": "call_1", "approved": True, "reviewer": "alice", "digest": REFUND_DIGEST}
    wrong = [
        {**good, "digest": digest({"order_id": "A1", "amount_cents": 50_000})},
        {**good, "call_id": "call_9"},
        {**good, "approved": "yes"},
        {**good, "amount_cents": 1},
        ["call_1", True],
    ]
    messages = []
    async with running_worker(client, queue, ledger, effects):
        handle = await client.start_workflow(AgentRun.run, plan, id=wf, task_queue=queue)
        await waiting_at_gate(handle)
        for answer in wrong:
            with pytest.raises(WorkflowUpdateFailedError) as failed:
                await handle.execute_update(APPROVE_UPDATE, answer)
            messages.append(_rejection(failed.value))
        await handle.execute_update(APPROVE_UPDATE, good)
        with pytest.raises(WorkflowUpdateFailedError) as again:
            await handle.execute_update(APPROVE_UPDATE, good)
        messages.append(_rejection(again.value))
        result = await result_of(handle)
    assert messages == [
        "the digest does not match call 'call_1': it waits for approval of arguments with "
        f"digest {REFUND_DIGEST}",
        "call 'call_9' is not waiting for approval",
        "the approval's approved must be bool",
        "unknown field(s) in the approval: amount_cents",
        "an approval is an object with call_id, approved, reviewer, digest; got list",
        "call 'call_1' is not waiting for approval",
    ]
    events, problems, verified = await ledger_view(ledger)
    granted = [e for e in events if e["type"].startswith("approval.")]
    assert (result, effects.read_text(), problems, verified) == (
        [{"value": "refunded 500 on A1"}],
        "refund A1 500\n",
        [],
        True,
    )
    assert granted == [
        {
            "type": "approval.requested",
            "run_id": wf,
            "call_id": "call_1",
            "tool": "refund",
            "digest": REFUND_DIGEST,
        },
        {
            "type": "approval.granted",
            "run_id": wf,
            "call_id": "call_1",
            "tool": "refund",
            "reviewer": "alice",
            "source": "context",
            "digest": REFUND_DIGEST,
        },
    ]


async def test_a_signal_approves_and_a_mismatching_signal_is_ignored(
    temporal_env: Any, tmp_path: Path
) -> None:
    """Signals need no live validator: one with another digest is ignored (logged), the
    matching one approves; the Query shows the pending call with its redacted arguments."""
    client = temporal_env.client
    wf, queue = _ids()
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects.log"
    args = {"card": "4111111111111111", "amount_cents": 900}
    plan = {"calls": [{"tool": "charge", "args": args, "call_id": "call_1"}]}
    async with running_worker(client, queue, ledger, effects):
        handle = await client.start_workflow(AgentRun.run, plan, id=wf, task_queue=queue)
        await waiting_at_gate(handle)
        pending = await handle.query(PENDING_QUERY)
        answer = {
            "call_id": "call_1",
            "approved": True,
            "reviewer": "carol",
            "digest": digest(args),
        }
        await handle.signal(APPROVE_SIGNAL, {**answer, "digest": REFUND_DIGEST})
        await handle.signal(APPROVE_SIGNAL, answer)
        result = await result_of(handle)
    events, problems, verified = await ledger_view(ledger)
    assert (pending, result, effects.read_text(), problems, verified) == (
        [
            {
                "call_id": "call_1",
                "tool": "charge",
                "digest": digest(args),
                "args": {"card": "[redacted]", "amount_cents": 900},
            }
        ],
        [{"value": "charged 900"}],
        "charge 900\n",
        [],
        True,
    )
    assert [e for e in events if e["type"] == "approval.granted"] == [
        {
            "type": "approval.granted",
            "run_id": wf,
            "call_id": "call_1",
            "tool": "charge",
            "reviewer": "carol",
            "source": "context",
            "digest": digest(args),
        }
    ]
    assert "4111111111111111" not in repr(events)


async def test_invalid_arguments_are_never_asked_and_recorded_as_invalid(
    temporal_env: Any, tmp_path: Path
) -> None:
    """Arguments that do not validate skip the gate and come back as tool-args-invalid,
    recorded by ``run`` as ``call.invalid``; the workflow goes on with its next call."""
    plan = {
        "calls": [
            {"tool": "refund", "args": {"order_id": "A1", "amount_cents": "500"}, "call_id": "c1"},
            {"tool": "pay", "args": {"order_id": "B2", "amount_cents": 7}, "call_id": "c2"},
        ]
    }
    wf, _, result, effects = await _run_with_answer(temporal_env, tmp_path, plan, None)
    events, problems, verified = await ledger_view(tmp_path / "ledger.db")
    message = "invalid arguments for refund: Expected `int`, got `str` - at `$.amount_cents`"
    assert (result, effects, problems, verified) == (
        [
            {"error": {"kind": "tool-args-invalid", "message": message}},
            {"value": {"paid": 7, "order_id": "B2"}},
        ],
        "pay B2 7\n",
        [],
        True,
    )
    # No approval.* event: the gate was never asked.
    assert [e for e in events if e["call_id"] == "c1"] == [
        _requested(wf, "c1", "refund", {"order_id": "A1", "amount_cents": "500"}),
        {"type": "call.invalid", "run_id": wf, "call_id": "c1", "tool": "refund", "error": message},
    ]


async def test_without_a_gate_the_executors_port_decides(temporal_env: Any, tmp_path: Path) -> None:
    """``call_tool(gate=None)``: no decision is carried, and the worker's executor (no
    port here) denies, as it would outside Temporal."""
    plan = {"calls": [{"tool": "refund", "args": REFUND, "call_id": "c1"}], "gate": False}
    _, _, result, effects = await _run_with_answer(temporal_env, tmp_path, plan, None)
    message = "refund was not approved: no approval port and no decision in the call context"
    assert (result, effects) == ([{"error": {"kind": "approval-denied", "message": message}}], "")


async def test_a_tool_not_exported_to_temporal_is_a_non_retryable_usage_error(
    temporal_env: Any, tmp_path: Path
) -> None:
    """A tool outside the registry, or one whose targets leave Temporal out, fails the
    activity once (tool-usage, never retried) and nothing is recorded."""
    plan = {
        "calls": [
            {"tool": "hidden", "args": {}, "call_id": "c1"},
            {"tool": "nope", "args": {}, "call_id": "c2"},
        ]
    }
    _, _, result, _ = await _run_with_answer(temporal_env, tmp_path, plan, None)
    assert result == [{"refused": "tool-usage"}, {"refused": "tool-usage"}]
    assert await ledger_view(tmp_path / "ledger.db") == ([], [], True)


async def test_the_same_effect_key_in_two_workflows_is_one_effect_and_a_non_retryable_refusal(
    temporal_env: Any, tmp_path: Path
) -> None:
    """A second workflow paying the same order is refused with duplicate-effect: the
    activity fails once, non-retryable (a retry policy of 5 attempts is not used), and
    the payment happened once."""
    client = temporal_env.client
    queue = _ids()[1]
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects.log"
    plan = {
        "calls": [{"tool": "pay", "args": {"order_id": "B2", "amount_cents": 7}, "call_id": "c1"}]
    }
    async with running_worker(client, queue, ledger, effects):
        first = await client.start_workflow(AgentRun.run, plan, id=_ids()[0], task_queue=queue)
        paid = await result_of(first)
        second = await client.start_workflow(AgentRun.run, plan, id=_ids()[0], task_queue=queue)
        refused = await result_of(second)
    history = await second.fetch_history()
    failures = [
        e.activity_task_failed_event_attributes.failure
        for e in history.events
        if e.HasField("activity_task_failed_event_attributes")
    ]
    started = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    info = [
        (f.application_failure_info.type, f.application_failure_info.non_retryable)
        for f in failures
    ]
    events, problems, verified = await ledger_view(ledger)
    assert (paid, refused, effects.read_text(), info, started, problems, verified) == (
        [{"value": {"paid": 7, "order_id": "B2"}}],
        [{"refused": "duplicate-effect"}],
        "pay B2 7\n",
        [("duplicate-effect", True)],
        [1, 1],  # prepare, then run: each started once
        [],
        True,
    )
    assert [e for e in events if e["run_id"] == second.id][-1] == {
        "type": "call.duplicate",
        "run_id": second.id,
        "call_id": "c1",
        "tool": "pay",
        "key": "pay:B2",
        "by_run_id": first.id,
        "by_call_id": "c1",
        "same_args": True,
    }


async def test_an_answer_is_used_once_and_a_repeated_call_is_answered_from_the_ledger(
    temporal_env: Any, tmp_path: Path
) -> None:
    """A workflow that asks the same call again waits for a new answer (the first one is
    spent), and the executor answers the repeat from the ledger: the refund ran once."""
    client = temporal_env.client
    wf, queue = _ids()
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects.log"
    step = {"tool": "refund", "args": REFUND, "call_id": "call_1"}
    answer = {"call_id": "call_1", "approved": True, "reviewer": "alice", "digest": REFUND_DIGEST}
    async with running_worker(client, queue, ledger, effects):
        handle = await client.start_workflow(
            AgentRun.run, {"calls": [step, step]}, id=wf, task_queue=queue
        )
        await waiting_at_gate(handle)
        await handle.execute_update(APPROVE_UPDATE, answer)
        await waiting_at_gate(handle, prepared=2)
        asked_again = await handle.query(PENDING_QUERY)
        await handle.execute_update(APPROVE_UPDATE, {**answer, "reviewer": "bob"})
        result = await result_of(handle)
    events, problems, verified = await ledger_view(ledger)
    assert (asked_again, result, effects.read_text(), problems, verified) == (
        [{"call_id": "call_1", "tool": "refund", "digest": REFUND_DIGEST, "args": REFUND}],
        [{"value": "refunded 500 on A1"}, {"value": "refunded 500 on A1"}],
        "refund A1 500\n",
        [],
        True,
    )
    assert events[-1] == {
        "type": "call.replayed",
        "run_id": wf,
        "call_id": "call_1",
        "tool": "refund",
        "digest": REFUND_DIGEST,
    }
