"""OpenAI agents in Temporal workflows: tests that need Temporal's plugin.

The plugin (``temporalio-openai-agents``) pins openai-agents 0.22.x, so these tests run in
the second environment ``make test`` builds (``.venv-agents``), which sets
``AGENT_ADAPTER_AGENTS_ENV=1``. In an environment without the plugin (the main one, on a
newer SDK) the directory is not collected, and the header says so; where
``AGENT_ADAPTER_AGENTS_ENV=1`` is set and the plugin is missing, collection fails. The
dev server is the Temporal tests' (``tests/bridges/temporal``), started once per session.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

AGENTS_ENV = "AGENT_ADAPTER_AGENTS_ENV"
TEMPORAL_TESTS = Path(__file__).resolve().parents[1] / "temporal"


def _plugin_missing() -> str | None:
    for module in ("temporalio", "agents"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    if importlib.util.find_spec("temporalio.openai_agents") is None:
        return "temporalio-openai-agents is not installed"
    return None


MISSING = _plugin_missing()
if MISSING is not None:
    if os.environ.get(AGENTS_ENV) == "1":
        raise pytest.UsageError(
            f"{AGENTS_ENV}=1 but {MISSING} (pip install 'agent-adapter[temporal-openai-agents]')"
        )
    # Not this environment's tests: `make test` runs them in .venv-agents.
    collect_ignore_glob = ["*.py"]
else:
    # The Temporal tests' helpers (the dev server, the registry, the crash worker).
    sys.path.insert(0, str(TEMPORAL_TESTS))


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say so when this directory is left to the other environment."""
    if MISSING is None:
        return None
    return (
        f"tests/bridges/temporal_agents: not collected here ({MISSING}); "
        "make test runs them in .venv-agents"
    )


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_env() -> AsyncIterator[Any]:
    """A ``WorkflowEnvironment`` on the offline dev server, started once per session."""
    from temporal_support import dev_server

    async with dev_server() as env:
        yield env
