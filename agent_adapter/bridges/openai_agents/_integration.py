"""The integration object: ids from the SDK's tool context, and the bridge's token table."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ...engine import CallContext, Decision, TokenTable, new_id
from ._compat import sdk_name

__all__ = ["INTEGRATION", "NAME", "OpenAIAgentsIntegration", "state_run_id"]

if TYPE_CHECKING:
    from agents import get_current_trace
    from agents.agent_tool_state import get_agent_tool_state_scope
else:
    get_current_trace = sdk_name("agents", "get_current_trace")
    get_agent_tool_state_scope = sdk_name("agents.agent_tool_state", "get_agent_tool_state_scope")

#: The bridge's name in ``Registry.tool(targets=...)`` and in request metadata.
NAME = "openai_agents"
_NO_OP_TRACE_ID = "no-op"


def trace_run_id() -> str | None:
    """The current SDK trace id, or None when tracing is off (the SDK's ``NoOpTrace``)."""
    trace = get_current_trace()
    if trace is None:
        return None
    trace_id = getattr(trace, "trace_id", None)
    if not isinstance(trace_id, str) or not trace_id or trace_id == _NO_OP_TRACE_ID:
        return None
    return trace_id


def context_run_id(run_context: Any) -> str | None:
    """A ``run_id`` the host put in a mapping run context (``Runner.run(context={...})``)."""
    app = getattr(run_context, "context", None)
    if isinstance(app, Mapping):
        value = app.get("run_id")
        if isinstance(value, str) and value:
            return value
    return None


def run_id_for(run_context: Any) -> str:
    """The run id of a call: the trace id, else the context's ``run_id``, else a fresh one.

    The trace id survives ``to_state``, JSON and resume, so a re-run of an older snapshot
    reaches the executor under the same (run_id, call_id) and is not executed twice.
    Without either, every call is its own run (nothing ties two invocations together).
    """
    return trace_run_id() or context_run_id(run_context) or new_id("run")


def state_run_id(state: Any, fallback: str = "", *, fresh: bool = True) -> str:
    """The run id the executor will see for a paused state's calls, read from the state.

    The state's trace id (tracing on), else a ``run_id`` in its mapping context, else
    ``fallback``, else (``fresh``) a new id: the same rule as :func:`run_id_for` inside
    a tool.
    """
    trace = getattr(state, "_trace_state", None)
    trace_id = getattr(trace, "trace_id", None)
    if isinstance(trace_id, str) and trace_id and trace_id != _NO_OP_TRACE_ID:
        return trace_id
    found = context_run_id(getattr(state, "_context", None)) or fallback
    return found or (new_id("run") if fresh else "")


class OpenAIAgentsIntegration:
    """What the bridge knows about the SDK: how to read ids, and the one-use tokens.

    ``tokens`` holds the decisions ``resolve_interruptions`` issued, keyed by
    (per-state scope id, tool_call_id, tool); ``max_tokens_per_resolve`` caps one resolve.
    """

    name = NAME

    def __init__(
        self,
        *,
        capacity: int = 4096,
        ttl_s: float = 60.0,
        max_tokens_per_resolve: int = 256,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.metadata: dict[str, Any] = {"integration": NAME}
        self.max_tokens_per_resolve = max_tokens_per_resolve
        self.tokens = TokenTable(capacity=capacity, ttl_s=ttl_s, clock=clock)

    def set_clock(self, clock: Callable[[], float] | None) -> None:
        """Replace the token clock (tests move time by hand); drops every live token."""
        self.tokens = TokenTable(
            capacity=self.tokens.capacity, ttl_s=self.tokens.ttl_s, clock=clock
        )

    def bind_context(self, tool_context: Any, approval: Decision | None = None) -> CallContext:
        """The executor's ``CallContext`` for one SDK tool call.

        ``call_id`` is ``ToolContext.tool_call_id`` (a fresh id when the SDK gives none);
        ``run_id`` follows :func:`run_id_for`; ``approval`` is a token's decision or None.
        """
        call_id = getattr(tool_context, "tool_call_id", None) or new_id("call")
        return CallContext(
            run_id=run_id_for(tool_context),
            call_id=call_id,
            approval=approval,
            metadata=dict(self.metadata),
        )

    def take_token(self, tool_context: Any, tool: str) -> Decision | None:
        """The one-use decision issued for exactly this state copy, call id and tool."""
        scope = get_agent_tool_state_scope(tool_context)
        call_id = getattr(tool_context, "tool_call_id", None)
        if not scope or not call_id:
            return None
        return self.tokens.take((scope, call_id, tool))


#: The process-wide integration every exported tool and ``resolve_interruptions`` share.
INTEGRATION = OpenAIAgentsIntegration()
