"""The bridge conformance kit, run on OpenAI agents in Temporal workflows (real dev server)."""

from __future__ import annotations

from typing import Any

import pytest
from temporal_support import require

require()

from agent_adapter.testing import SCENARIOS, Scenario, run_scenario, scenarios_for  # noqa: E402
from agent_adapter.testing.temporal_openai_agents import TemporalAgentDriver  # noqa: E402

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.usefixtures("bounded")]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_the_agent_bridge_conforms(temporal_env: Any, scenario: Scenario) -> None:
    """Each shared scenario holds for an agent's ``workflow_tools`` (see ``proves``)."""
    await run_scenario(TemporalAgentDriver(temporal_env.client), scenario)


async def test_every_scenario_applies(temporal_env: Any) -> None:
    """Edits travel through the gate's Update, so no scenario is left out."""
    assert scenarios_for(TemporalAgentDriver(temporal_env.client)) == list(SCENARIOS)
