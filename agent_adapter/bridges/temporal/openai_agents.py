"""OpenAI Agents SDK agents inside Temporal workflows, every tool call through the executor.

The agent loop (model turns, tool selection, handoffs) runs in the workflow under
Temporal's own plugin, ``temporalio-openai-agents`` (``OpenAIAgentsPlugin`` on the client:
each model call is an activity, and a completed one is never called again on replay).
``workflow_tools`` gives the agent one SDK ``FunctionTool`` per registry tool exported to
``"temporal"``; its body is ``call_tool``: the ``prepare`` activity, the ``ApprovalGate``
when the call needs approval (durable: an Update or a Signal, a timer for
``approval_timeout``), then the ``run`` activity on the worker's ``ToolActivities``. So
the ledger proves each call, and a retried ``run`` after a commit is answered from it.

Import it as ``agent_adapter.integrations.temporal_openai_agents``, in workflow code
inside ``workflow.unsafe.imports_passed_through()``. It needs openai-agents and temporalio,
not the plugin itself (the worker and the client do), and neither
``agent_adapter.integrations.temporal`` nor ``...openai_agents`` imports it.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from agents import FunctionTool
from agents.tool import set_function_tool_failure_error_function
from agents.tool_context import ToolContext
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from ...engine import Registry, ToolSpec
from ...errors import ToolUsageError
from ..openai_agents import check_sdk, encode_output, tool_schema
from ._shapes import NAME, ToolResult
from ._workflow import ApprovalGate, call_tool, error_kind

__all__ = ["error_kind", "workflow_tool", "workflow_tools"]

#: Per workflow execution (its instance, rebuilt by replay): call id -> (tool, arguments)
#: of the first call asked under it. Weak, so a finished workflow's entry goes with it.
_SEEN: weakref.WeakKeyDictionary[Any, dict[str, tuple[str, Any]]] = weakref.WeakKeyDictionary()
_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _canonical(raw_args: str) -> Any:
    """The model's arguments as compared between calls: parsed JSON (key order and spacing
    do not matter), or the raw text when it is not JSON (the executor refuses it)."""
    try:
        return _encode(json.loads(raw_args))
    except ValueError:
        return raw_args


def _refuse_reuse(tool: str, call_id: str, raw_args: str) -> None:
    """Raise tool-usage when this workflow asked ``call_id`` before for another call.

    A call id names one call: the executor answers a repeat of it from the ledger. Two
    different calls under one id (two agent runs in one workflow whose model reuses an
    id; Temporal's ``ResponseBuilders.tool_call`` gives every call the id ``"call"``)
    must never get each other's result or approval, so the second is refused before it
    is prepared or shown to anyone. The same call asked again (same tool and arguments)
    goes on: the ledger answers it.
    """
    seen = _SEEN.setdefault(workflow.instance(), {})
    call = (tool, _canonical(raw_args))
    first = seen.setdefault(call_id, call)
    if first != call:
        message = (
            f"call id {call_id!r} was already used in this workflow for another call "
            f"({first[0]} with other arguments); a call id cannot be reused for new arguments"
        )
        error = ToolUsageError(message)
        raise ApplicationError(
            f"{error.kind}: {message}", error.to_dict(), type=error.kind, non_retryable=True
        )


def _output(result: ToolResult) -> str:
    """What the model sees: the value (a str as is, else JSON), or ``{"error": ...}``."""
    if result.ok:
        return encode_output(result.value)
    return encode_output({"error": result.error})


def _schema(spec: ToolSpec, strict: bool) -> tuple[dict[str, Any], bool]:
    # A schema whose parameter has a default imports jsonschema (to check the default) on
    # first use; the workflow sandbox refuses that import, and the workflow task would
    # fail on every attempt. Passed through, it is the worker's one module.
    with workflow.unsafe.imports_passed_through():
        return tool_schema(spec, strict=strict)


def _function_tool(
    spec: ToolSpec,
    *,
    gate: ApprovalGate | None,
    strict: bool,
    start_to_close_timeout: timedelta,
    retry_policy: RetryPolicy | None,
    approval_timeout: timedelta | None,
) -> FunctionTool:
    name = spec.name

    # Runs in the workflow (the plugin runs the SDK's tool invocation there): only
    # activities, the gate's durable wait and pure code, so a replay takes the same path.
    async def on_invoke_tool(ctx: ToolContext[Any], raw_args: str) -> str:
        call_id = ctx.tool_call_id
        _refuse_reuse(name, call_id, raw_args)
        result = await call_tool(
            name,
            raw_args,
            call_id=call_id,
            gate=gate,
            start_to_close_timeout=start_to_close_timeout,
            retry_policy=retry_policy,
            approval_timeout=approval_timeout,
        )
        return _output(result)

    schema, is_strict = _schema(spec, strict)
    tool = FunctionTool(
        name=name,
        description=spec.description,
        params_json_schema=schema,
        on_invoke_tool=on_invoke_tool,
        strict_json_schema=is_strict,
    )
    # None: a refusal the model is not shown (duplicate-effect, ambiguous-effect, ...) or
    # a cancellation fails the run instead of becoming "please try again" text.
    set_function_tool_failure_error_function(tool, None)
    return tool


def workflow_tool(
    registry: Registry,
    name: str,
    *,
    gate: ApprovalGate | None = None,
    strict: bool = True,
    start_to_close_timeout: timedelta = timedelta(seconds=60),
    retry_policy: RetryPolicy | None = None,
    approval_timeout: timedelta | None = None,
) -> FunctionTool:
    """The registry tool ``name`` as an SDK ``FunctionTool`` for an agent run in a workflow.

    Build it in workflow code (the workflow's ``__init__`` or run method, where the
    ``gate`` is built) and give it to an ``Agent`` that ``Runner.run`` runs under
    ``OpenAIAgentsPlugin``. Each call is ``call_tool(name, <the model's arguments>,
    call_id=<the SDK's tool call id>, gate=gate, ...)``: run_id is the workflow id.
    Model-visible refusals are the tool's output, ``{"error": {"kind", "message"}}``;
    other kinds fail the run (the plugin's ``AgentsWorkflowError``; ``error_kind`` finds
    the kind). A call id this workflow used before for another call is refused
    (tool-usage). The schema is the registry's, OpenAI-strict where portable. Raises
    ToolUsageError for a tool that is not exported to ``"temporal"``.
    """
    check_sdk()
    spec = registry.get(name)
    if not spec.exported_to(NAME):
        raise ToolUsageError(f"tool {name!r} is not exported to temporal (see its targets)")
    return _function_tool(
        spec,
        gate=gate,
        strict=strict,
        start_to_close_timeout=start_to_close_timeout,
        retry_policy=retry_policy,
        approval_timeout=approval_timeout,
    )


def workflow_tools(
    registry: Registry,
    *,
    gate: ApprovalGate | None = None,
    strict: bool = True,
    start_to_close_timeout: timedelta = timedelta(seconds=60),
    retry_policy: RetryPolicy | None = None,
    approval_timeout: timedelta | None = None,
) -> list[FunctionTool]:
    """``workflow_tool`` for every registry tool whose ``targets`` include ``"temporal"``."""
    check_sdk()
    exported: Iterable[ToolSpec] = (spec for spec in registry if spec.exported_to(NAME))
    return [
        _function_tool(
            spec,
            gate=gate,
            strict=strict,
            start_to_close_timeout=start_to_close_timeout,
            retry_policy=retry_policy,
            approval_timeout=approval_timeout,
        )
        for spec in exported
    ]
