"""``proxy``: every tool of an upstream MCP server, registered as a schema tool.

What an upstream answer proves decides the effect key. Never sent, or refused with a
JSON-RPC error before dispatch: the tool did nothing (``ToolError``, the key is freed).
An ``isError`` result, a timeout, a dropped connection or an answer that cannot be read:
the tool may have run (the key becomes ambiguous), unless the operator's policy declares
``not_executed_on_error``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from ...engine import Registry, ToolSpec, current_call
from ...errors import ToolError, ToolTimeout, ToolUsageError
from ._names import META_CALL_ID, META_RUN_ID
from ._policy import ToolPolicy, parse_policy

__all__ = ["DEFAULT_TIMEOUT_S", "PRE_DISPATCH_CODES", "UpstreamError", "proxy"]

#: JSON-RPC errors a server sends before it dispatches the call (parse error, invalid
#: request, unknown method, invalid params): proof that the tool did not run.
PRE_DISPATCH_CODES = frozenset(
    {types.PARSE_ERROR, types.INVALID_REQUEST, types.METHOD_NOT_FOUND, types.INVALID_PARAMS}
)
#: How long a proxied call waits for the upstream when the policy sets no ``timeout``:
#: an upstream that hangs must not hold the call (and its effect key) forever.
DEFAULT_TIMEOUT_S = 60.0


class UpstreamError(Exception):
    """The upstream answered with an error that does not prove the tool did nothing.

    Raised inside a proxied tool's body, so the executor records ``call.failed``
    (tool-failed) and an effect key becomes ambiguous.
    """


def _error_text(result: types.CallToolResult) -> str:
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    return " ".join(texts)[:500] or "no message"


def _value(result: types.CallToolResult) -> Any:
    """The tool's value: its structured content, else its content blocks as JSON."""
    if result.structured_content is not None:
        return result.structured_content
    return {
        "content": [
            block.model_dump(mode="json", by_alias=True, exclude_none=True)
            for block in result.content
        ]
    }


class _Link:
    """What the gateway knows about one upstream connection: whether it saw it close."""

    def __init__(self) -> None:
        self.closed = False


def _body(upstream: Any, link: _Link, tool: str, policy: ToolPolicy) -> Callable[..., Any]:
    timeout = policy.timeout if policy.timeout is not None else DEFAULT_TIMEOUT_S
    safe = policy.not_executed_on_error

    def unknown(message: str) -> Exception:
        # The upstream may have run it: ambiguous, unless the operator says otherwise.
        return ToolError(message) if safe else UpstreamError(message)

    async def call_upstream(**args: Any) -> Any:
        if link.closed:
            # Seen closed by an earlier call: this one is never sent.
            raise ToolError(f"upstream {tool}: the connection is closed; nothing was sent")
        call = current_call()
        meta = (
            {} if call is None else {META_CALL_ID: call.ctx.call_id, META_RUN_ID: call.ctx.run_id}
        )
        try:
            async with asyncio.timeout(timeout):
                result = await upstream.call_tool(tool, args, meta=meta)
        except TimeoutError:
            if safe:
                raise ToolError(f"upstream {tool} did not answer within {timeout:g} s") from None
            raise ToolTimeout(
                f"upstream {tool} did not answer within {timeout:g} s; it may have run"
            ) from None
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                link.closed = True  # this call may have reached it; the next ones cannot
            elif exc.error.code in PRE_DISPATCH_CODES:
                raise ToolError(f"upstream {tool} refused the call: {exc}") from None
            raise unknown(f"upstream {tool}: error {exc.error.code}: {exc}") from None
        except anyio.ClosedResourceError:
            # Our side of the connection was already closed: nothing was sent.
            raise ToolError(
                f"upstream {tool}: the connection is closed; nothing was sent"
            ) from None
        except Exception as exc:
            raise unknown(f"upstream {tool}: {type(exc).__name__}: {exc}") from None
        if not isinstance(result, types.CallToolResult):
            raise unknown(f"upstream {tool} answered {type(result).__name__}, not a tool result")
        if result.is_error:
            raise unknown(f"upstream {tool} reported an error: {_error_text(result)}")
        return _value(result)

    call_upstream.__name__ = f"upstream_{tool}"
    return call_upstream


def _confirm(tool: types.Tool, policy: ToolPolicy) -> bool:
    if policy.confirm is not None:
        return policy.confirm  # the operator's word, the only one that may relax it
    hints = tool.annotations
    # Untrusted hints may only add: an explicit destructiveHint on a tool not read-only.
    return bool(
        hints is not None and hints.destructive_hint is True and hints.read_only_hint is not True
    )


async def proxy(
    registry: Registry,
    upstream: Any,
    *,
    prefix: str = "",
    policy: Mapping[str, Any] | None = None,
) -> list[ToolSpec]:
    """Register every tool of ``upstream`` (an entered ``mcp.Client``) in ``registry``.

    Each becomes a schema tool named ``prefix + name`` (its own input schema, validated
    by the gateway before anything is sent) whose body calls the upstream. ``policy``
    maps upstream tool names (before ``prefix``) to a ``ToolPolicy`` or a mapping of its
    fields. Returns the new specs. Raises ToolUsageError, before registering anything,
    when a name collides with a registry tool (naming both), when the policy names a
    tool the upstream does not have, or when a policy entry or schema is invalid.
    """
    policies = parse_policy(policy)
    listed = await upstream.list_tools()
    tools: list[types.Tool] = list(listed.tools)
    names = {t.name for t in tools}
    missing = sorted(set(policies) - names)
    if missing:
        raise ToolUsageError(
            f"the policy names tools the upstream does not have: {missing}; it has {sorted(names)}"
        )
    for tool in tools:
        if prefix + tool.name in registry:
            raise ToolUsageError(
                f"upstream tool {tool.name!r} (exported as {prefix + tool.name!r}) collides "
                f"with the registry tool {prefix + tool.name!r}; pass a prefix"
            )
    entries: list[tuple[str, dict[str, Any], Any, dict[str, Any]]] = []
    link = _Link()
    for tool in tools:
        rule = policies.get(tool.name, ToolPolicy())
        options: dict[str, Any] = {
            "description": tool.description or "",
            "confirm": _confirm(tool, rule),
            "cache": rule.cache,
            "effect": rule.effect,
            "readonly": rule.readonly,
        }
        entries.append(
            (prefix + tool.name, tool.input_schema, _body(upstream, link, tool.name, rule), options)
        )
    scratch = Registry()
    for name, schema, body, options in entries:
        # Checked in a scratch registry first: one bad schema or policy registers nothing.
        try:
            scratch.add_schema_tool(name, schema, body, **options)
        except ToolUsageError as exc:
            raise ToolUsageError(f"upstream tool {name!r}: {exc}") from None
    return [
        registry.add_schema_tool(name, schema, body, **options)
        for name, schema, body, options in entries
    ]
