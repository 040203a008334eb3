"""Registry tools as the SDK's own ``FunctionTool``: schema, approval gate, invoker."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from ...engine import CallContext, Executor, Registry, ToolSpec, get_default_executor
from ...errors import AdapterError
from ._compat import check_sdk, sdk_name
from ._errors import encode_output, error_output, model_visible
from ._integration import INTEGRATION, NAME, OpenAIAgentsIntegration, run_id_for

__all__ = ["Export", "export_of", "function_tool", "function_tools", "tool_schema"]

# Through sdk_name, never ``from agents... import``: an SDK without one of these still
# imports the bridge, and exporting raises IntegrationError naming it (check_sdk).
if TYPE_CHECKING:
    from agents import FunctionTool
    from agents.exceptions import UserError
    from agents.strict_schema import ensure_strict_json_schema
    from agents.tool import set_function_tool_failure_error_function
    from agents.tool_context import ToolContext
else:
    FunctionTool = sdk_name("agents", "FunctionTool")
    UserError = sdk_name("agents.exceptions", "UserError")
    ensure_strict_json_schema = sdk_name("agents.strict_schema", "ensure_strict_json_schema")
    set_function_tool_failure_error_function = sdk_name(
        "agents.tool", "set_function_tool_failure_error_function"
    )
    ToolContext = sdk_name("agents.tool_context", "ToolContext")

_ATTR = "_agent_adapter_export"
_encode = msgspec.json.Encoder().encode


class Export(msgspec.Struct, frozen=True):
    """What the bridge attached to a tool it exported: spec, executor, token holder."""

    spec: ToolSpec
    executor: Executor
    integration: OpenAIAgentsIntegration


def export_of(tool: Any) -> Export | None:
    """The export record of an SDK tool this bridge built, else None."""
    found = getattr(tool, _ATTR, None)
    return found if isinstance(found, Export) else None


def tool_schema(spec: ToolSpec, *, strict: bool) -> tuple[dict[str, Any], bool]:
    """The parameters schema and whether it is strict.

    Strict only where the engine finds the schema portable and the SDK's own conversion
    leaves the engine's strict form exactly as it is (so the model is shown that schema,
    no open object closed, nothing else rewritten); otherwise the full schema, non-strict,
    never a silently narrowed one.
    """
    if strict:
        candidate = spec.strict_schema()
        if candidate is not None:
            try:
                # The SDK converts a copy again in FunctionTool.__post_init__; a fixed point
                # here means what it sends is what the engine built. (Its own
                # ``_reject_open_objects`` flag refuses every ``$ref``, i.e. every tool
                # with a nested Struct or dataclass, though its $defs are converted too.)
                converted = ensure_strict_json_schema(copy.deepcopy(candidate))
            except (UserError, ValueError, TypeError):
                converted = None
            if converted == candidate:
                return candidate, True
    return copy.deepcopy(spec.json_schema), False


def _gate(spec: ToolSpec, executor: Executor) -> bool | Callable[..., Any]:
    """The SDK's ``needs_approval`` for ``spec.confirm``; it decides nothing for the executor.

    The engine's own decision (``Executor.prepare``: the confirm rule step 6 asks, failing
    closed), on the arguments as JSON text, the path the executor takes, so the gate and
    the executor agree on validity and on the digest. Invalid arguments are never sent for
    approval: the gate says no and the executor returns tool-args-invalid.
    """
    if spec.confirm is False:
        return False

    async def needs_approval(run_context: Any, params: Any, call_id: str) -> bool:
        try:
            raw = _encode(params)
        except (TypeError, msgspec.EncodeError):
            return False  # not JSON: the executor refuses it as tool-args-invalid
        ctx = CallContext(
            run_id=run_id_for(run_context),
            call_id=call_id or "",
            metadata={"integration": NAME},
        )
        prepared = await executor.prepare(spec, raw, ctx)
        return prepared.ok and prepared.needs_approval

    return needs_approval


def _invoker(
    spec: ToolSpec, executor: Executor, integration: OpenAIAgentsIntegration
) -> Callable[..., Any]:
    gated = spec.confirm is not False
    bind = integration.bind_context
    take = integration.take_token
    run_spec = executor.run_spec
    name = spec.name

    # Annotated ToolContext (never RunContextWrapper): the SDK would otherwise pass a fork
    # without tool_call_id and without the per-state scope the tokens are bound to.
    async def on_invoke_tool(ctx: ToolContext[Any], raw_args: str) -> Any:
        approval = take(ctx, name) if gated else None
        try:
            value = await run_spec(spec, raw_args, bind(ctx, approval))
        except AdapterError as exc:
            if model_visible(exc):
                return error_output(exc)
            raise  # the SDK wraps it: UserError("Error running tool ...") from exc
        return encode_output(value)

    return on_invoke_tool


def function_tool(
    spec: ToolSpec,
    *,
    executor: Executor | None = None,
    strict: bool = True,
    integration: OpenAIAgentsIntegration | None = None,
) -> FunctionTool:
    """One SDK ``FunctionTool`` that runs ``spec`` through ``executor``'s pipeline.

    ``executor=None`` uses the default executor. The schema is OpenAI-strict where it is
    portable (``strict=False`` or a non-portable schema: non-strict). ``spec.confirm``
    becomes the SDK's ``needs_approval`` gate. Raises IntegrationError for an SDK outside
    0.22 to below 1.0.
    """
    check_sdk()
    executor = executor if executor is not None else get_default_executor()
    integration = integration if integration is not None else INTEGRATION
    schema, is_strict = tool_schema(spec, strict=strict)
    tool = FunctionTool(
        name=spec.name,
        description=spec.description,
        params_json_schema=schema,
        on_invoke_tool=_invoker(spec, executor, integration),
        strict_json_schema=is_strict,
        needs_approval=_gate(spec, executor),
    )
    # None: refusals and CancelledError are never turned into "please try again" text;
    # the model-visible kinds are already tool output, everything else fails the run.
    set_function_tool_failure_error_function(tool, None)
    setattr(tool, _ATTR, Export(spec, executor, integration))
    return tool


def function_tools(
    registry: Registry,
    *,
    executor: Executor | None = None,
    strict: bool = True,
    integration: OpenAIAgentsIntegration | None = None,
) -> list[FunctionTool]:
    """One ``FunctionTool`` per registry tool whose ``targets`` include ``openai_agents``."""
    check_sdk()
    return [
        function_tool(spec, executor=executor, strict=strict, integration=integration)
        for spec in _exported(registry)
    ]


def _exported(registry: Registry) -> Iterator[ToolSpec]:
    return (spec for spec in registry if spec.exported_to(NAME))
