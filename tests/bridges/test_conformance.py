"""The bridge conformance kit, run on the OpenAI Agents and MCP bridges through their real
frameworks (the Temporal bridge's run needs a dev server: temporal/test_temporal_conformance.py)."""

from __future__ import annotations

import pytest

from agent_adapter.testing import (
    SCENARIOS,
    Attempt,
    ConformanceFailure,
    Reply,
    Scenario,
    run_scenario,
    scenarios_for,
)
from agent_adapter.testing.mcp import MCPDriver
from agent_adapter.testing.openai_agents import OpenAIAgentsDriver

pytestmark = pytest.mark.usefixtures("bounded")

DRIVERS = {
    "openai_agents": OpenAIAgentsDriver(),
    "mcp-legacy": MCPDriver("legacy"),
    "mcp-2026-07-28": MCPDriver("2026-07-28"),
}
CASES = [
    pytest.param(driver, scenario, id=f"{name}-{scenario.name}")
    for name, driver in DRIVERS.items()
    for scenario in scenarios_for(driver)
]


@pytest.mark.parametrize(("driver", "scenario"), CASES)
async def test_the_bridge_conforms(driver: object, scenario: Scenario) -> None:
    """Each shared scenario holds for each bridge (see the scenario's ``proves``)."""
    await run_scenario(driver, scenario)  # type: ignore[arg-type]


def test_only_the_edit_scenario_depends_on_the_bridge() -> None:
    """Every scenario runs on every bridge except the edit one where edits cannot travel."""
    assert [s.name for s in scenarios_for(DRIVERS["openai_agents"])] == [s.name for s in SCENARIOS]
    assert [s.name for s in SCENARIOS if s not in scenarios_for(MCPDriver())] == ["edited"]


class RunsTwice(OpenAIAgentsDriver):
    """A broken bridge: a repeat under the same ids reaches the executor as a new call."""

    async def call(self, executor, attempt: Attempt) -> Reply:  # type: ignore[no-untyped-def]
        if attempt.call_id:
            attempt = Attempt(attempt.tool, attempt.args, attempt.answer, attempt.run_id, None)
        return await super().call(executor, attempt)


class RaisesEverything(MCPDriver):
    """A broken bridge: it claims refusals go to the model, not as results."""

    def channel(self, kind: str):  # type: ignore[no-untyped-def]
        return "model"


async def test_the_kit_catches_a_bridge_that_runs_a_repeat_twice() -> None:
    """The kit fails a bridge that loses the call id (the body would run twice)."""
    (repeated,) = [s for s in SCENARIOS if s.name == "repeated"]
    with pytest.raises(ConformanceFailure) as caught:
        await run_scenario(RunsTwice(), repeated)
    assert str(caught.value).startswith("repeated: ")


async def test_the_kit_catches_a_refusal_sent_elsewhere_than_the_table_says() -> None:
    """The kit fails a bridge whose refusals do not go where its table says."""
    (denied,) = [s for s in SCENARIOS if s.name == "denied"]
    with pytest.raises(ConformanceFailure) as caught:
        await run_scenario(RaisesEverything(), denied)
    assert str(caught.value) == (
        "denied: where approval-denied went: got 'result', expected 'model'"
    )
