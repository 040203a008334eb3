"""``proxy``: every tool of an upstream MCP server, registered as a schema tool.

What an upstream answer proves decides the effect key. Never sent (refused by our own
checks, or the connection seen closed before): the tool did nothing (``ToolError``, the
key is freed). Once the request was written, any error (a JSON-RPC error of any code, an
``isError`` result, a timeout, a dropped connection, an answer that cannot be read) says
nothing about what the tool did: the key becomes ambiguous, unless the operator's policy
declares ``not_executed_on_error``. The one exception is "unknown tool" from an upstream
that, asked again, lists no such tool: that tool cannot have run.

The proxy is transparent for what it does not decide: the upstream's result is the
call's value as the upstream sent it (content blocks, ``structuredContent``, ``_meta``),
recorded so, and a replay returns the same blocks. An ``isError`` result is the call's
failure (recorded as ``call.failed``), and it too reaches the client as the upstream sent
it: the engine records a failure as text, so that text ends with the result's JSON
(``RESULT_MARK``), which a pinned retry answered from the ledger returns again.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from ...engine import Registry, ToolSpec, current_call
from ...errors import AdapterError, ToolError, ToolTimeout, ToolUsageError
from ._names import META_CALL_ID, META_RUN_ID
from ._policy import ToolPolicy, parse_policy
from ._relay import EXCHANGES_KEY, Downstream, Relay, current_downstream

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "RESULT_MARK",
    "UpstreamError",
    "proxied_failure",
    "proxied_result",
    "proxy",
    "upstream_tool",
]

#: How long a proxied call waits for the upstream when the policy sets no ``timeout``:
#: an upstream that hangs must not hold the call (and its effect key) forever.
DEFAULT_TIMEOUT_S = 60.0


#: Ends the recorded error of a proxied call the upstream answered with ``isError``: the
#: upstream's result as JSON (one line: JSON text holds no raw newline) follows it.
RESULT_MARK = "\nio.agent-adapter/upstream-result: "

#: The kinds whose recorded error may carry the upstream's result (its own answers).
_REPORTED_KINDS = ("tool-failed", "tool-error")


class UpstreamError(Exception):
    """The upstream answered with an error that does not prove the tool did nothing.

    Raised inside a proxied tool's body, so the executor records ``call.failed``
    (tool-failed) and an effect key becomes ambiguous.
    """


def _error_text(result: types.CallToolResult) -> str:
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    return " ".join(texts)[:500] or "no message"


#: Each proxied tool's body -> the upstream's own ``tools/list`` entry (the gateway
#: lists it as the upstream did, under the exported name).
_LISTED: weakref.WeakKeyDictionary[Callable[..., Any], types.Tool] = weakref.WeakKeyDictionary()


def upstream_tool(spec: ToolSpec) -> types.Tool | None:
    """The upstream's ``tools/list`` entry of a proxied tool; None for any other tool."""
    try:
        return _LISTED.get(spec.fn)
    except TypeError:  # a body that cannot be weakly referenced is not ours
        return None


def _value(result: types.CallToolResult) -> dict[str, Any]:
    """The call's value: the upstream's result as it sent it, JSON (isError aside).

    What the upstream asked the client meanwhile is not in it: each exchange is its own
    ``call.exchanged`` event of the call (``_relay``)."""
    value: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    value.pop("isError", None)
    return value


def _reported(summary: str, value: dict[str, Any]) -> str:
    """An error text: ``summary`` for people, then the upstream's result for the client."""
    return summary + RESULT_MARK + json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def proxied_failure(error: AdapterError) -> types.CallToolResult | None:
    """The upstream's own ``isError`` result a proxied call's failure carries, else None.

    Read from the error's text (live, or rebuilt from the ledger for a replayed call), so
    a pinned retry gets the same blocks. The last ``RESULT_MARK`` is the gateway's own:
    what the upstream wrote comes before it, and JSON holds no raw newline.
    """
    if error.kind not in _REPORTED_KINDS:
        return None
    message = error.message
    at = message.rfind(RESULT_MARK)
    if at < 0:
        return None
    try:
        value = json.loads(message[at + len(RESULT_MARK) :])
    except ValueError:
        return None
    result = proxied_result(value)
    if result is None:
        return None
    return result.model_copy(update={"is_error": True})


def proxied_result(value: Any) -> types.CallToolResult | None:
    """The ``CallToolResult`` a proxied call's value (live or replayed) stands for.

    None when ``value`` is not one (a value recorded by an older version, which kept only
    the structured content): the caller answers it as any tool's value. The exchanges an
    older version kept in the value (``EXCHANGES_KEY``) are not part of the result.
    """
    if not isinstance(value, dict) or not isinstance(value.get("content"), list):
        return None
    sent = {k: v for k, v in value.items() if k != EXCHANGES_KEY}
    try:
        return types.CallToolResult.model_validate(sent)
    except ValueError:
        return None


class _Link:
    """What the gateway knows about one upstream connection: whether it saw it close."""

    def __init__(self) -> None:
        self.closed = False


def _body(
    upstream: Any, link: _Link, tool: str, policy: ToolPolicy, relay: Relay | None
) -> Callable[..., Any]:
    timeout = policy.timeout if policy.timeout is not None else DEFAULT_TIMEOUT_S
    safe = policy.not_executed_on_error

    def unknown(message: str) -> Exception:
        # The upstream may have run it: ambiguous, unless the operator says otherwise.
        return ToolError(message) if safe else UpstreamError(message)

    async def unlisted() -> bool:
        # "Unknown tool" proves nothing by itself (a tool may start, then fail in a way
        # that says so); an upstream that, asked now, lists no such tool never ran it.
        try:
            async with asyncio.timeout(timeout):
                listed = await upstream.list_tools()
        except Exception:
            return False
        return all(t.name != tool for t in listed.tools)

    async def call_upstream(**args: Any) -> Any:
        return await attempt(current_downstream(), args)

    async def attempt(downstream: Downstream | None, args: dict[str, Any]) -> Any:
        if link.closed:
            # Seen closed by an earlier call: this one is never sent.
            raise ToolError(f"upstream {tool}: the connection is closed; nothing was sent")
        call = current_call()
        meta = (
            {} if call is None else {META_CALL_ID: call.ctx.call_id, META_RUN_ID: call.ctx.run_id}
        )
        options: dict[str, Any] = {}
        if downstream is not None and downstream.progress_token is not None:
            # The upstream gets a token of the upstream client's; its progress reaches
            # the client under the client's own token.
            options["progress_callback"] = downstream.progress
        if relay is not None and downstream is not None:
            relay.enter(downstream)
        try:
            async with asyncio.timeout(timeout):
                result = await upstream.call_tool(tool, args, meta=meta, **options)
        except TimeoutError:
            if safe:
                raise ToolError(f"upstream {tool} did not answer within {timeout:g} s") from None
            raise ToolTimeout(
                f"upstream {tool} did not answer within {timeout:g} s; it may have run"
            ) from None
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                link.closed = True  # this call may have reached it; the next ones cannot
            elif await unlisted():
                raise ToolError(
                    f"upstream {tool} is not a tool of the upstream (it answered: {exc}); "
                    "it did not run"
                ) from None
            raise unknown(f"upstream {tool}: error {exc.error.code}: {exc}") from None
        except anyio.ClosedResourceError:
            # Our side of the connection was already closed: nothing was sent.
            raise ToolError(
                f"upstream {tool}: the connection is closed; nothing was sent"
            ) from None
        except Exception as exc:
            raise unknown(f"upstream {tool}: {type(exc).__name__}: {exc}") from None
        finally:
            if relay is not None and downstream is not None:
                relay.leave(downstream)
        if not isinstance(result, types.CallToolResult):
            raise unknown(f"upstream {tool} answered {type(result).__name__}, not a tool result")
        if result.is_error:
            # Failed (what it did is unknown), and answered as the upstream sent it.
            summary = f"upstream {tool} reported an error: {_error_text(result)}"
            raise unknown(_reported(summary, _value(result)))
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
    relay: Relay | None = None,
) -> list[ToolSpec]:
    """Register every tool of ``upstream`` (an entered ``mcp.Client``) in ``registry``.

    Each becomes a schema tool named ``prefix + name`` (its own input schema, validated
    by the gateway before anything is sent) whose body calls the upstream. ``policy``
    maps upstream tool names (before ``prefix``) to a ``ToolPolicy`` or a mapping of its
    fields. ``relay`` (the one whose ``client_options()`` the upstream's ``Client`` was
    built with) carries the upstream's elicitation, sampling and log messages to the
    client whose call is waiting; progress is relayed with or without it. Returns the
    new specs. Raises ToolUsageError, before registering anything,
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
        body = _body(upstream, link, tool.name, rule, relay)
        entries.append((prefix + tool.name, tool.input_schema, body, options))
    scratch = Registry()
    for name, schema, body, options in entries:
        # Checked in a scratch registry first: one bad schema or policy registers nothing.
        try:
            scratch.add_schema_tool(name, schema, body, **options)
        except ToolUsageError as exc:
            raise ToolUsageError(f"upstream tool {name!r}: {exc}") from None
    specs = []
    for (name, schema, body, options), tool in zip(entries, tools, strict=True):
        specs.append(registry.add_schema_tool(name, schema, body, **options))
        _LISTED[body] = tool
    return specs
