"""The workflow the Temporal tests run: a scripted agent's tool calls through the gate.

Re-imported by Temporal's sandbox: agent-adapter is passed through, never re-imported.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from agent_adapter.integrations.temporal import ApprovalGate, call_tool, error_kind


@workflow.defn(name="AgentRun")
class AgentRun:
    """Runs ``plan["calls"]`` (``{"tool", "args", "call_id"}`` each) in order.

    Each result is ``{"value": ...}``, ``{"error": {...}}`` (model-visible) or
    ``{"refused": kind}`` (an ``ActivityError`` the workflow caught), plus
    ``"ledger_call_id"`` when the ledger answered under another id than the step's (the
    attempts before were refused in flight). ``attempts`` and ``max_interval_s`` shape the
    retry policy of both activities.
    """

    def __init__(self) -> None:
        self.gate = ApprovalGate()

    @workflow.run
    async def run(self, plan: dict[str, Any]) -> list[dict[str, Any]]:
        timeout = plan.get("approval_timeout_s")
        max_interval = plan.get("max_interval_s")
        results: list[dict[str, Any]] = []
        for step in plan["calls"]:
            try:
                result = await call_tool(
                    step["tool"],
                    step["args"],
                    call_id=step["call_id"],
                    gate=self.gate if plan.get("gate", True) else None,
                    start_to_close_timeout=timedelta(seconds=plan.get("start_to_close_s", 30)),
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(milliseconds=100),
                        maximum_attempts=plan.get("attempts", 5),
                        maximum_interval=None
                        if max_interval is None
                        else timedelta(seconds=max_interval),
                    ),
                    approval_timeout=None if timeout is None else timedelta(seconds=timeout),
                )
            except ActivityError as exc:
                refused: dict[str, Any] = {"refused": error_kind(exc)}
                cause = exc.cause
                details = cause.details if isinstance(cause, ApplicationError) else ()
                answered = details[0].get("ledger_call_id") if details else None
                if answered and answered != step["call_id"]:
                    refused["ledger_call_id"] = answered
                results.append(refused)
                continue
            answer = {"value": result.value} if result.ok else {"error": result.error}
            if result.ledger_call_id != step["call_id"]:
                answer["ledger_call_id"] = result.ledger_call_id
            results.append(answer)
        return results
