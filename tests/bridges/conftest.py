"""Bridge tests: every test's tokens live on a fake clock and start from an empty table."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_adapter.bridges.openai_agents import INTEGRATION


@pytest.fixture(autouse=True)
def token_clock(clock) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """The shared integration's tokens on the test's FakeClock, emptied before and after."""
    INTEGRATION.set_clock(clock)
    yield clock
    INTEGRATION.set_clock(None)
