"""The workflow the Temporal conformance driver runs: one ``call_tool``, through the gate.

Re-imported by Temporal's sandbox for every run, so it imports only Temporal's workflow
API and the stdlib here; agent-adapter's workflow side is passed through the sandbox
(it is sandbox-safe and holds no executor code).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from agent_adapter.integrations.temporal import ApprovalGate, call_tool

__all__ = ["KitCall"]

#: Bounded retries: a driver bug that fails an activity ends the scenario instead of
#: retrying forever. The bridge's refusals are non-retryable whatever this says.
_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3)


@workflow.defn(name="agent_adapter.testing.KitCall")
class KitCall:
    """``{"tool", "args", "call_id", "gate": bool}`` -> ``{"value"}`` or ``{"error"}``.

    The gate is built only when the plan asks for one (somebody is there to answer);
    without it the executor's own port decides. A kind the model is not shown is not
    caught: ``call_tool``'s ``ActivityError`` fails the workflow, which is how the host
    (the workflow's starter) hears of it.
    """

    @workflow.run
    async def run(self, plan: dict[str, Any]) -> dict[str, Any]:
        gate = ApprovalGate() if plan["gate"] else None
        result = await call_tool(
            plan["tool"],
            plan["args"],
            call_id=plan["call_id"],
            gate=gate,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=_RETRY,
        )
        return {"value": result.value} if result.ok else {"error": result.error}
