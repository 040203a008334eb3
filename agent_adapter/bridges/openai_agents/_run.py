"""``run`` / ``run_sync``: ``Runner.run`` with agent-adapter's exceptions as themselves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._compat import sdk_name
from ._errors import unwrap

__all__ = ["run", "run_sync"]

if TYPE_CHECKING:
    from agents import Runner
else:
    Runner = sdk_name("agents", "Runner")  # an SDK without it: IntegrationError on use


def _reraise(exc: Exception) -> None:
    inner = unwrap(exc)
    if inner is not exc:
        # Our error keeps its own cause (ToolFailed's original exception), not the wrapper.
        raise inner.with_traceback(inner.__traceback__) from inner.__cause__


async def run(agent: Any, input: Any, **kwargs: Any) -> Any:
    """``Runner.run(agent, input, **kwargs)``; a tool's ``AdapterError`` arrives unwrapped."""
    try:
        return await Runner.run(agent, input, **kwargs)
    except Exception as exc:
        _reraise(exc)
        raise


def run_sync(agent: Any, input: Any, **kwargs: Any) -> Any:
    """``Runner.run_sync(agent, input, **kwargs)``; a tool's ``AdapterError`` arrives unwrapped."""
    try:
        return Runner.run_sync(agent, input, **kwargs)
    except Exception as exc:
        _reraise(exc)
        raise
