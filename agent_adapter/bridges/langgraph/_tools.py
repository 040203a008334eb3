"""Registry tools as LangChain tools: the registry's schema, the executor's pipeline.

Each tool advertises the registry's JSON Schema and leaves validation to the executor
(a dict ``args_schema`` passes the model's arguments through as they are). LangGraph
injects a ``ToolRuntime``: the thread id, the tool call id and the state the ids come
from. A call that needs approval interrupts its task before the executor sees it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import msgspec
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import ToolRuntime
from langgraph.types import interrupt
from pydantic import PrivateAttr

from ...engine import CallContext, Decision, Executor, Registry, ToolSpec, get_default_executor
from ...errors import AdapterError, ToolUsageError
from ._approvals import decision_for, interrupt_value
from ._errors import error_message, model_visible, value_message
from ._ids import CALL_IDS, NAME, CallIds, call_id_for, one_call_per_task, run_id_for

__all__ = ["Export", "ExecutorTool", "export_of", "langgraph_tools"]


class Export(msgspec.Struct, frozen=True):
    """What the bridge attached to a tool it exported: the spec, its executor, the ids."""

    spec: ToolSpec
    executor: Executor
    call_ids: CallIds


class ExecutorTool(StructuredTool):
    """A ``StructuredTool`` whose calls run through an executor (see ``langgraph_tools``)."""

    _agent_adapter: Export | None = PrivateAttr(default=None)


def export_of(tool: Any) -> Export | None:
    """The export record of a tool this bridge built, else None."""
    found = getattr(tool, "_agent_adapter", None) if isinstance(tool, ExecutorTool) else None
    return found if isinstance(found, Export) else None


def _body(spec: ToolSpec, executor: Executor, call_ids: CallIds) -> Any:
    gated = spec.confirm is not False
    run_spec = executor.run_spec
    name = spec.name
    metadata = {"integration": NAME}

    # The runtime's name is not ``runtime``: a registry tool may take an argument of that
    # name, which LangGraph's injection would overwrite.
    async def call(agent_adapter_runtime: ToolRuntime, **args: Any) -> ToolMessage:
        runtime = agent_adapter_runtime
        config = runtime.config
        run_id = run_id_for(config)
        tool_call_id = runtime.tool_call_id or ""
        call_id = call_id_for(runtime.state, tool_call_id, call_ids)
        decision: Decision | None = None
        if gated:
            ids = CallContext(run_id=run_id, call_id=call_id, metadata=metadata)
            prepared = await executor.prepare(spec, args, ids)
            # A call already on record (a resumed, repeated or restored checkpoint reruns
            # the task) is not asked again: the executor answers it from the ledger.
            if prepared.ok and prepared.needs_approval and not prepared.recorded:
                one_call_per_task(config, runtime.state, tool_call_id)
                # Raises GraphInterrupt the first time; on resume returns the answer.
                answer = interrupt(interrupt_value(name, prepared, run_id, call_id))
                decision = decision_for(answer, prepared, call_id)
        ctx = CallContext(run_id=run_id, call_id=call_id, approval=decision, metadata=metadata)
        try:
            value = await run_spec(spec, args, ctx)
        except AdapterError as exc:
            if model_visible(exc):
                return error_message(exc, tool=name, tool_call_id=tool_call_id)
            raise  # duplicate, ambiguous, failed, timeout, usage: the host's, as themselves
        return value_message(value, tool=name, tool_call_id=tool_call_id)

    # Evaluated annotations, not this module's postponed strings: LangChain reads the
    # function's type hints on every call (to find a config and the injected runtime),
    # and strings would be compiled again each time.
    call.__annotations__ = {
        "agent_adapter_runtime": ToolRuntime,
        "args": Any,
        "return": ToolMessage,
    }
    return call


def _tool(spec: ToolSpec, executor: Executor, call_ids: CallIds) -> ExecutorTool:
    tool = ExecutorTool(
        name=spec.name,
        description=spec.description or spec.name,
        # A dict schema: advertised as it is, the arguments passed through unvalidated
        # (the executor validates, strictly, and records an invalid call).
        args_schema=copy.deepcopy(spec.json_schema),
        coroutine=_body(spec, executor, call_ids),
    )
    tool._agent_adapter = Export(spec, executor, call_ids)
    return tool


def langgraph_tools(
    registry: Registry, *, executor: Executor | None = None, call_ids: CallIds = "tool_call"
) -> list[BaseTool]:
    """One LangChain tool per registry tool whose ``targets`` include ``langgraph``.

    ``executor=None`` uses the default executor. run_id is the thread id (a call without
    one: ToolUsageError); call_id the tool call id, or with ``call_ids="message"``
    ``f"{ai_message_id}:{tool_call_id}"`` (for models that reuse tool call ids). A call
    that needs approval interrupts with ``{"type": INTERRUPT_TYPE, ...}``; resume it with
    ``review_interrupts`` or an answer of your own. Model-visible refusals are a
    ``ToolMessage(status="error")``; other kinds are raised as themselves. The tools need
    a graph that gives each call its own task (``create_agent``, or ``Send`` per call)
    and a checkpointer.
    """
    if call_ids not in CALL_IDS:
        raise ToolUsageError(f"call_ids must be one of {list(CALL_IDS)}, not {call_ids!r}")
    executor = executor if executor is not None else get_default_executor()
    return [_tool(spec, executor, call_ids) for spec in _exported(registry)]


def _exported(registry: Registry) -> Iterator[ToolSpec]:
    return (spec for spec in registry if spec.exported_to(NAME))
