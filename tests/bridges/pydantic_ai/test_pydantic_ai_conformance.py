"""The pydantic-ai bridge passes every scenario of the conformance kit, through a real Agent."""

from __future__ import annotations

import pytest

from agent_adapter.testing import Scenario, run_scenario, scenarios_for
from agent_adapter.testing.pydantic_ai import PydanticAIDriver

DRIVER = PydanticAIDriver()


@pytest.mark.parametrize("scenario", scenarios_for(DRIVER), ids=lambda s: s.name)
async def test_the_pydantic_ai_bridge_conforms(scenario: Scenario) -> None:
    """Each kit scenario holds for ``ExecutorToolset`` driven by ``Agent.run``."""
    await run_scenario(DRIVER, scenario)
