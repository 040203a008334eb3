"""The workflow the agent conformance driver runs: an OpenAI agent whose tools are
``workflow_tools``, under Temporal's plugin.

Re-imported by Temporal's sandbox for every run; agent-adapter and the SDK are passed
through (the plugin passes ``agents`` and ``openai`` through itself).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from agents import Agent, RunConfig, Runner

    from ..integrations.temporal import ApprovalGate
    from ..integrations.temporal_openai_agents import workflow_tools
    from ._agent_registries import KIT_REGISTRIES

__all__ = ["KitAgent"]

_CONFIG = RunConfig(tracing_disabled=True)
_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3)


@workflow.defn(name="agent_adapter.testing.KitAgent")
class KitAgent:
    """``{"prompt", "gate": bool}`` -> the tool outputs the model received, in order."""

    @workflow.run
    async def run(self, plan: dict[str, Any]) -> list[Any]:
        gate = ApprovalGate() if plan["gate"] else None
        tools = workflow_tools(
            KIT_REGISTRIES[workflow.info().task_queue],
            gate=gate,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=_RETRY,
        )
        agent: Agent[Any] = Agent(
            name="kit",
            instructions="Help.",
            model="agent-adapter-planned",
            tools=tools,  # type: ignore[arg-type]
        )
        result = await Runner.run(agent, plan["prompt"], run_config=_CONFIG)
        return [item.output for item in result.new_items if item.type == "tool_call_output_item"]
