"""Ids from LangGraph: the thread is the run, the tool call (or message and call) the call.

``config["run_id"]`` and the checkpoint id change on every step and every resume, so
neither can name a run the ledger must recognise again; the thread id is what a host
resumes under, so it is the run. A call is its tool call id, or, for models that reuse
tool call ids across turns, the AIMessage id and the tool call id together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ...engine import register_target
from ...errors import ToolUsageError

__all__ = ["CALL_IDS", "NAME", "CallIds", "call_id_for", "one_call_per_task", "run_id_for"]

#: The bridge's name in ``Registry.tool(targets=...)`` and in request metadata.
NAME = register_target("langgraph")

CallIds = Literal["tool_call", "message"]
CALL_IDS: tuple[str, ...] = ("tool_call", "message")

# LangGraph's task path marker for a node's own task (not a Send): such a ToolNode task
# runs every call of the latest AIMessage (langgraph.constants, stable since 0.2).
_PULL = "__pregel_pull"


def run_id_for(config: Mapping[str, Any] | None) -> str:
    """``config["configurable"]["thread_id"]``; a call without one is a ToolUsageError.

    Without a thread there is no checkpointer to resume, and nothing a repeat of the
    call could be recognised by: refusing is the only answer that keeps a body from
    running twice.
    """
    configurable = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise ToolUsageError(
            "a LangGraph tool exported by agent-adapter needs a thread: invoke the graph "
            'with config={"configurable": {"thread_id": ...}} and a checkpointer (the thread '
            "id is the run id the ledger knows the calls by)"
        )
    return str(thread_id)


def _messages(state: Any) -> Sequence[Any]:
    if isinstance(state, Mapping):
        found = state.get("messages")
    elif isinstance(state, list):
        found = state
    else:
        found = getattr(state, "messages", None)
    return found if isinstance(found, list) else ()


def _message_with(state: Any, tool_call_id: str) -> Any:
    """The latest AIMessage in the state that made the tool call ``tool_call_id``."""
    for message in reversed(_messages(state)):
        calls = getattr(message, "tool_calls", None) or ()
        if getattr(message, "type", None) == "ai" and any(
            c.get("id") == tool_call_id for c in calls
        ):
            return message
    return None


def call_id_for(state: Any, tool_call_id: str | None, mode: CallIds) -> str:
    """The call id: the tool call id, or ``f"{ai_message_id}:{tool_call_id}"``."""
    if not tool_call_id:
        raise ToolUsageError(
            "the tool was invoked without a tool call id (tool.ainvoke(args) instead of a "
            "ToolCall through a ToolNode): no approval or repeat can be bound to the call"
        )
    if mode == "tool_call":
        return tool_call_id
    message = _message_with(state, tool_call_id)
    message_id = getattr(message, "id", None)
    if not message_id:
        raise ToolUsageError(
            f'call_ids="message" needs the AIMessage that made tool call {tool_call_id} '
            "in the graph state, with an id; none was found (use the default "
            'call_ids="tool_call" for a state without messages)'
        )
    return f"{message_id}:{tool_call_id}"


def one_call_per_task(config: Mapping[str, Any] | None, state: Any, tool_call_id: str) -> None:
    """Refuse a task that runs several calls of one message before it interrupts.

    A ToolNode reached by a plain edge runs every call of the latest AIMessage in one
    task: resuming reruns all of them and LangGraph matches resume values to interrupts
    by their order in the task, so one call's approval can reach another call. A Send
    per call (``create_agent`` does this) gives each call its own task and interrupt.
    """
    path = ((config or {}).get("metadata") or {}).get("langgraph_path") or ()
    if not path or path[0] != _PULL:
        return
    message = _message_with(state, tool_call_id)
    calls = getattr(message, "tool_calls", None) or ()
    if len(calls) > 1:
        raise ToolUsageError(
            f"tool call {tool_call_id} needs approval, but its task runs all "
            f"{len(calls)} calls of one message (a ToolNode reached by a plain edge): "
            "resuming would rerun every call and match the answers by order. Give each "
            "call its own task: langchain.agents.create_agent, or route with "
            'Send("tools", [tool_call]) per call'
        )
