"""Shared test helpers: a deterministic clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog


class FakeClock:
    """A clock the test moves by hand (seconds, like ``time.time``)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    """A FakeClock starting at t=1000 s."""
    return FakeClock()


# The PostgreSQL fixtures (a throwaway cluster per session, a schema per test).
pytest_plugins = ["_pg_fixtures"]


@pytest.fixture(autouse=True)
def _structlog_configuration() -> Iterator[None]:
    """Each test starts with the structlog configuration the session had: the CLI's
    in-process runs configure structlog for their process (a filtering logger at CRITICAL
    when logging is off), which would otherwise silence a later test's capture_logs."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)
