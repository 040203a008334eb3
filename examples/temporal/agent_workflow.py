"""The agent example's workflow: an OpenAI agent that looks an order up and refunds it.

The agent loop runs here, under Temporal's OpenAI plugin (each model call is an
activity); every tool call goes through the executor (``workflow_tools``: ``prepare``,
the ``ApprovalGate`` for the refund, ``run``). agent-adapter, the SDK and the tools are
imported passed through the sandbox: no executor code runs in the workflow.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, RunConfig, Runner
    from tools import registry

    from agent_adapter.integrations.temporal import ApprovalGate
    from agent_adapter.integrations.temporal_openai_agents import workflow_tools


@workflow.defn
class RefundClerk:
    """``{"order_id": ..., "approval_timeout_s"?: ...}`` -> the agent's answer and the
    outputs its tools gave."""

    def __init__(self) -> None:
        self.gate = ApprovalGate()

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        tools = workflow_tools(
            registry,
            gate=self.gate,
            approval_timeout=timedelta(seconds=request.get("approval_timeout_s", 3600)),
        )
        agent: Agent[Any] = Agent(
            name="refund clerk",
            instructions="Look the order up, then refund its amount.",
            model="clerk",  # the worker's model provider resolves it
            tools=tools,  # type: ignore[arg-type]
        )
        result = await Runner.run(
            agent,
            f"Refund order {request['order_id']}.",
            run_config=RunConfig(tracing_disabled=True),
        )
        outputs = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
        return {"answer": result.final_output, "tool_outputs": outputs}
