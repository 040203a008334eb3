"""The bridge's name, the supported pydantic-ai range, and the ids of one call.

Ids: ``run_id`` is the run's ``conversation_id`` and ``call_id`` the tool call id. The
run's own ``ctx.run_id`` is a fresh UUID on every ``Agent.run`` (a resume included), so a
resumed call would reach the executor as a new run and could run again; the
conversation id is carried by the message history (it survives a JSON round trip), so a
resume of the same history reaches the executor under the same (run_id, call_id).
"""

from __future__ import annotations

import re
from typing import Any

import pydantic_ai

from ...engine import CallContext, new_id, register_target
from ...errors import IntegrationError

__all__ = ["META_KEY", "NAME", "SUPPORTED", "check_framework", "ids_of"]

#: The bridge's name in ``Registry.tool(targets=...)`` and in request metadata; registered
#: at import, so tools may name it once this module is imported.
NAME = register_target("pydantic_ai")

#: The key of the bridge's entry in ``DeferredToolRequests.metadata[tool_call_id]``.
META_KEY = "agent_adapter"

#: The range the ``pydantic-ai`` extra installs and the tests run: 2.60 up to, not including, 3.
SUPPORTED = ((2, 60), (3, 0))

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)")


def check_framework() -> None:
    """Raise IntegrationError for a pydantic-ai outside ``SUPPORTED``."""
    version = str(getattr(pydantic_ai, "__version__", ""))
    match = _VERSION.match(version)
    low, high = SUPPORTED
    if match is None or not low <= (int(match[1]), int(match[2])) < high:
        raise IntegrationError(
            f"pydantic-ai {version or '(unknown version)'} is not supported: agent-adapter's "
            f"bridge needs pydantic-ai-slim >={low[0]}.{low[1]},<{high[0]} "
            "(pip install 'agent-adapter[pydantic-ai]')"
        )


def ids_of(run_context: Any) -> tuple[str, str]:
    """(run_id, call_id) of one tool call: the conversation id and the tool call id.

    pydantic-ai always resolves a conversation id for a run (the one passed to
    ``Agent.run``, else the history's, else a fresh one); a context without one (a toolset
    called by hand) gets fresh ids, as a call with no ids does in ``Executor.call``.
    """
    run_id = getattr(run_context, "conversation_id", None) or new_id("run")
    call_id = getattr(run_context, "tool_call_id", None) or new_id("call")
    return run_id, call_id


def call_context(run_id: str, call_id: str, approval: Any = None) -> CallContext:
    """The executor's context for one call of this bridge."""
    return CallContext(
        run_id=run_id, call_id=call_id, approval=approval, metadata={"integration": NAME}
    )
