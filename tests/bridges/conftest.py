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


#: The longest one MCP test may take (a hung server, client or subprocess ends the run,
#: with every thread's traceback, instead of hanging it).
TEST_BOUND_S = 120


@pytest.fixture
def bounded() -> Iterator[None]:
    """Bound the test in time: past ``TEST_BOUND_S`` the run stops with tracebacks."""
    import faulthandler

    faulthandler.dump_traceback_later(TEST_BOUND_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
