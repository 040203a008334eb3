"""The workflow the agent tests run: an OpenAI agent whose tools go through the executor.

Re-imported by Temporal's sandbox: agent-adapter, the SDK and the tests' registry module
are passed through.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from agents import Agent, RunConfig, Runner
    from agents_tools import SCHEMAS

    from agent_adapter.integrations.temporal import ApprovalGate
    from agent_adapter.integrations.temporal_openai_agents import workflow_tools

_CONFIG = RunConfig(tracing_disabled=True)


@workflow.defn(name="ShopAgent")
class ShopAgent:
    """``{"prompts": [...], "approval_timeout_s"?, "start_to_close_s"?}``: one agent run per
    prompt, in order; returns each run's tool outputs and final output."""

    def __init__(self) -> None:
        self.gate = ApprovalGate()

    @workflow.run
    async def run(self, plan: dict[str, Any]) -> list[dict[str, Any]]:
        timeout = plan.get("approval_timeout_s")
        tools = workflow_tools(
            SCHEMAS,
            gate=self.gate,
            start_to_close_timeout=timedelta(seconds=plan.get("start_to_close_s", 30)),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
            approval_timeout=None if timeout is None else timedelta(seconds=timeout),
        )
        agent: Agent[Any] = Agent(
            name="clerk", instructions="Help the shop.", model="planned", tools=tools
        )
        runs = []
        for prompt in plan["prompts"]:
            result = await Runner.run(agent, prompt, run_config=_CONFIG)
            outputs = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
            runs.append({"outputs": outputs, "final": result.final_output})
        return runs
