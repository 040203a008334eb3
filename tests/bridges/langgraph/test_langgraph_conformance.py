"""The bridge conformance kit, run on the LangGraph bridge through a real ``create_agent``."""

from __future__ import annotations

import pytest

from agent_adapter.testing import SCENARIOS, Scenario, run_scenario, scenarios_for
from agent_adapter.testing.langgraph import LangGraphDriver

pytestmark = pytest.mark.usefixtures("bounded")

DRIVER = LangGraphDriver()


@pytest.mark.parametrize("scenario", scenarios_for(DRIVER), ids=lambda s: s.name)
async def test_the_langgraph_bridge_conforms(scenario: Scenario) -> None:
    """Each shared scenario holds for the LangGraph bridge (see the scenario's ``proves``)."""
    await run_scenario(DRIVER, scenario)


def test_every_scenario_applies() -> None:
    """LangGraph's resume value carries an edit, so no scenario is left out."""
    assert [s.name for s in scenarios_for(DRIVER)] == [s.name for s in SCENARIOS]
