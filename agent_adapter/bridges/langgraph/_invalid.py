"""Tool calls LangChain could not parse (``AIMessage.invalid_tool_calls``): recorded, answered.

LangGraph routes only ``tool_calls``; a call whose arguments did not parse sits in
``invalid_tool_calls`` and reaches no tool, so without this the ledger would never hear
of it and the model would never be told. Each such call to an exported tool goes through
``run_spec`` with its raw text (recorded ``call.requested`` + ``call.invalid``, the model
answered with tool-args-invalid); a call to any other tool is answered, not recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.runtime import Runtime

from ...engine import CallContext, new_id
from ...errors import AdapterError, ToolArgsInvalid
from ._errors import error_message
from ._ids import NAME, run_id_for
from ._tools import export_of

__all__ = ["InvalidToolCallsMiddleware", "answer_invalid_tool_calls"]

logger = logging.getLogger("agent_adapter.bridges.langgraph")


async def answer_invalid_tool_calls(
    message: Any, tools: Iterable[BaseTool], *, config: Mapping[str, Any] | None = None
) -> list[ToolMessage]:
    """A ``ToolMessage(status="error")`` for each of ``message.invalid_tool_calls``.

    ``tools`` are the graph's tools (those ``langgraph_tools`` built are recorded through
    their executor, run_id = the thread id of ``config``, which defaults to the running
    graph's). A call without an id is recorded under a fresh call id and cannot be
    answered (a ToolMessage needs the id). For a graph built by hand: call it in the node
    after the model and add the messages to the state; ``create_agent`` users add
    ``InvalidToolCallsMiddleware(tools)``.
    """
    invalid = list(getattr(message, "invalid_tool_calls", None) or ())
    if not invalid:
        return []
    config = config if config is not None else get_config()
    exports = {t.name: e for t in tools if (e := export_of(t)) is not None}
    answers: list[ToolMessage] = []
    for bad in invalid:
        name = str(bad.get("name") or "")
        tool_call_id = str(bad.get("id") or "")
        export = exports.get(name)
        if export is None:
            error: AdapterError = ToolArgsInvalid(
                f"the arguments of this call to {name or 'an unnamed tool'} could not be "
                f"parsed: {bad.get('error') or 'invalid JSON'}"
            )
        else:
            error = await _record(export, message, bad, tool_call_id, config)
        if tool_call_id:
            answers.append(error_message(error, tool=name, tool_call_id=tool_call_id))
    return answers


async def _record(
    export: Any, message: Any, bad: Mapping[str, Any], tool_call_id: str, config: Any
) -> AdapterError:
    """The call through ``run_spec``, its raw text as the arguments: the refusal it got."""
    raw = bad.get("args")
    raw = raw if isinstance(raw, str) else ""
    executor = export.executor
    spec = export.spec
    call_id = tool_call_id or new_id("call")
    if export.call_ids == "message" and tool_call_id:
        call_id = f"{getattr(message, 'id', '')}:{tool_call_id}"
    ctx = CallContext(run_id=run_id_for(config), call_id=call_id, metadata={"integration": NAME})
    prepared = await executor.prepare(spec, raw, ctx)
    if prepared.ok:
        # LangChain found these arguments unusable though they validate (it parses JSON
        # objects only): never run a call the framework itself refused; tell the model.
        logger.warning(
            "invalid tool call %s to %s validates; answered, not run", call_id, spec.name
        )
        return ToolArgsInvalid(
            f"the arguments of this call to {spec.name} could not be read as a tool call: "
            f"{bad.get('error') or 'invalid'}; send the call again"
        )
    try:
        await executor.run_spec(spec, raw, ctx)  # records call.invalid (or replays it)
    except AdapterError as exc:
        return exc
    raise AssertionError("invalid arguments ran")  # pragma: no cover (prepare said invalid)


class InvalidToolCallsMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """``create_agent`` middleware: record and answer the model's unparseable tool calls.

    After each model turn, every ``invalid_tool_calls`` entry gets its ToolMessage (see
    ``answer_invalid_tool_calls``). When the turn made no valid call, the agent goes back
    to the model (which reads the errors) instead of ending with the calls unanswered.
    """

    def __init__(self, tools: Iterable[BaseTool]) -> None:
        super().__init__()
        self._tools = list(tools)

    @hook_config(can_jump_to=["model"])
    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """The answers to the last AIMessage's invalid calls, and a jump back if needed."""
        messages = state["messages"]
        last = messages[-1] if messages else None
        if last is None or getattr(last, "type", None) != "ai":
            return None
        answers = await answer_invalid_tool_calls(last, self._tools)
        if not answers:
            return None
        update: dict[str, Any] = {"messages": answers}
        if not getattr(last, "tool_calls", None):
            update["jump_to"] = "model"
        return update
