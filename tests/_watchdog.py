"""The tests' name for ``agent_adapter.testing``'s watchdog (the throwaway PostgreSQL of
``agent_adapter.testing.postgres`` uses it too); see there."""

from __future__ import annotations

from agent_adapter.testing._watchdog import Watchdog, children, running, start_time

__all__ = ["Watchdog", "children", "running", "start_time"]
