"""The OpenTelemetry hook under the OpenAI Agents SDK: a tool call the SDK makes is a span
of the host's trace, named by the SDK's call id."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Runner
from openai_agents_helpers import CONFIG, assistant_message, function_call, make_agent

pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK is a dev dependency")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from agent_adapter import Executor, Registry
from agent_adapter.hooks import OpenTelemetryHook
from agent_adapter.integrations.openai_agents import function_tools
from agent_adapter.ledger import MemoryLedger


async def test_a_tool_call_through_runner_run_nests_in_the_host_span() -> None:
    """Runner.run inside the host's span: each tool call the scripted model makes is an
    `execute_tool lookup` span whose parent is the host's span, with the SDK's call id."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = Registry()

    @registry.tool
    async def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return {"order_id": order_id, "status": "paid"}

    executor = Executor(registry, ledger=MemoryLedger(), hooks=[OpenTelemetryHook(provider)])
    agent, _ = make_agent(
        function_tools(registry, executor=executor),
        [
            function_call("lookup", {"order_id": "A1"}, call_id="c1"),
            function_call("lookup", {"order_id": "A2"}, call_id="c2"),
        ],
        [assistant_message("done")],
    )
    with provider.get_tracer("host").start_as_current_span("support turn") as host:
        result = await Runner.run(agent, "Where are A1 and A2?", run_config=CONFIG)
    assert result.final_output == "done"
    spans = {s.name: s for s in exporter.get_finished_spans() if s.name == "support turn"}
    tools = sorted(
        (s for s in exporter.get_finished_spans() if s.name != "support turn"),
        key=lambda s: str((s.attributes or {}).get("gen_ai.tool.call.id")),
    )
    context = host.get_span_context()
    assert list(spans) == ["support turn"]
    assert [
        (
            s.name,
            (s.attributes or {}).get("gen_ai.tool.call.id"),
            (s.attributes or {}).get("agent_adapter.outcome"),
            s.parent is not None and (s.parent.trace_id, s.parent.span_id),
        )
        for s in tools
    ] == [
        ("execute_tool lookup", "c1", "succeeded", (context.trace_id, context.span_id)),
        ("execute_tool lookup", "c2", "succeeded", (context.trace_id, context.span_id)),
    ]
