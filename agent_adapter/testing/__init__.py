"""Test helpers users can import: the bridge conformance kit.

Every bridge's tests run the same scenarios through a *driver* that makes one tool call
through the real framework; the kit checks the ledger (DESIGN.md, "Bridge conformance
kit"). The drivers of the bundled bridges are in ``agent_adapter.testing.openai_agents``,
``agent_adapter.testing.mcp``, ``agent_adapter.testing.temporal`` (a workflow execution
per call, on a worker of its own, against the server of a ``temporalio`` client) and
``agent_adapter.testing.langgraph`` (a ``create_agent`` graph per call, with its
``ScriptedChatModel``); each imports its framework, this module imports none.

A third bridge writes a ``BridgeDriver`` and runs::

    @pytest.mark.parametrize("scenario", scenarios_for(MyDriver()), ids=lambda s: s.name)
    async def test_conformance(scenario):
        await run_scenario(MyDriver(), scenario)
"""

from ._kit import (
    SCENARIOS,
    Approve,
    Attempt,
    BridgeDriver,
    Channel,
    ConformanceFailure,
    Deny,
    Edit,
    Leave,
    Reply,
    Scenario,
    Tools,
    decision_of,
    run_scenario,
    scenarios_for,
)

__all__ = [
    "Approve",
    "Attempt",
    "BridgeDriver",
    "Channel",
    "ConformanceFailure",
    "Deny",
    "Edit",
    "Leave",
    "Reply",
    "SCENARIOS",
    "Scenario",
    "Tools",
    "decision_of",
    "run_scenario",
    "scenarios_for",
]
