"""The example's workflow: a scripted agent that looks an order up and refunds it.

The refund waits at the ``ApprovalGate`` (an Update from ``reviewer.py``); past the
approval timeout it is denied. agent-adapter is imported passed through the sandbox:
its executor never runs in workflow code, only in the worker's activities.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agent_adapter.integrations.temporal import ApprovalGate, call_tool, error_kind


@workflow.defn
class RefundAgent:
    """``{"order_id": ..., "approval_timeout_s"?: ...}`` -> what each tool call gave."""

    def __init__(self) -> None:
        self.gate = ApprovalGate()

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        order_id = request["order_id"]
        order = await call_tool("lookup_order", {"order_id": order_id}, call_id="lookup-1")
        if not order.ok:
            return {"order": order.error}
        args = {"order_id": order_id, "amount_cents": order.value["amount_cents"]}
        try:
            refund = await call_tool(
                "refund",
                args,
                call_id="refund-1",
                gate=self.gate,
                approval_timeout=timedelta(seconds=request.get("approval_timeout_s", 3600)),
            )
        except ActivityError as exc:  # duplicate-effect, ambiguous-effect, tool-failed, ...
            return {"order": order.value, "refund": {"refused": error_kind(exc)}}
        return {"order": order.value, "refund": refund.value if refund.ok else refund.error}
