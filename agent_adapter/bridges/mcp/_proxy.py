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
import functools
import json
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from ...engine import Registry, ToolSpec, current_call
from ...errors import AdapterError, ToolError, ToolTimeout, ToolUsageError
from ._names import META_CALL_ID, META_RUN_ID
from ._policy import ToolPolicy, parse_policy
from ._relay import (
    EXCHANGES_KEY,
    Downstream,
    Relay,
    client_connection,
    current_downstream,
    forwarded_capabilities,
)
from ._upstream import NONE, Upstream, UpstreamSession, UpstreamUnavailable, describe

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "RESULT_MARK",
    "ClientView",
    "UpstreamError",
    "client_view",
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

#: The SDK's own errors for a request the upstream did not answer (its timeout, a
#: connection that closed before the answer): any other code is the upstream's answer.
_UNANSWERED = (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT)


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


#: How a proxied body finds the upstream connection for the client it serves.
_Route = Callable[[Downstream | None], Awaitable[UpstreamSession]]

#: Each proxied tool's body (of an ``Upstream``) -> that upstream and its tool's name.
_ROUTED: weakref.WeakKeyDictionary[Callable[..., Any], tuple[Upstream, str]] = (
    weakref.WeakKeyDictionary()
)
#: Each registry -> the ``Upstream`` objects proxied into it.
_UPSTREAMS: weakref.WeakKeyDictionary[Registry, list[Upstream]] = weakref.WeakKeyDictionary()


class ClientView:
    """What one client sees of a registry's proxied tools: its upstream connections."""

    def __init__(self, sessions: dict[Upstream, UpstreamSession]) -> None:
        self._sessions = sessions

    def _routed(self, spec: ToolSpec) -> tuple[Upstream, str] | None:
        try:
            return _ROUTED.get(spec.fn)
        except TypeError:
            return None

    def shows(self, spec: ToolSpec) -> bool:
        """False for a proxied tool the upstream does not list to this client."""
        routed = self._routed(spec)
        if routed is None:
            return True
        session = self._sessions.get(routed[0])
        return session is not None and session.lists(routed[1])

    def _place(self, spec: ToolSpec, rank: dict[str, int]) -> int:
        routed = self._routed(spec)
        return rank.get(routed[1], len(rank)) if routed is not None else len(rank)

    def ordered(self, specs: list[ToolSpec]) -> list[ToolSpec]:
        """``specs`` with each upstream's tools in the order it lists them to this client
        (at the place of its first): a tool registered later is not listed last."""
        groups: dict[Upstream, list[ToolSpec]] = {}
        slots: list[ToolSpec | Upstream] = []
        for spec in specs:
            routed = self._routed(spec)
            if routed is None or routed[0] not in self._sessions:
                slots.append(spec)
                continue
            if routed[0] not in groups:
                groups[routed[0]] = []
                slots.append(routed[0])
            groups[routed[0]].append(spec)
        out: list[ToolSpec] = []
        for slot in slots:
            if not isinstance(slot, Upstream):
                out.append(slot)
                continue
            rank = {name: i for i, name in enumerate(self._sessions[slot].tools or {})}
            out.extend(sorted(groups[slot], key=functools.partial(self._place, rank=rank)))
        return out

    def listing(self, spec: ToolSpec) -> types.Tool | None:
        """The upstream's ``tools/list`` entry for this client; None: not a proxied tool."""
        routed = self._routed(spec)
        if routed is not None:
            session = self._sessions.get(routed[0])
            if session is not None and session.tools is not None:
                entry = session.tools.get(routed[1])
                if entry is not None:
                    return entry
        return upstream_tool(spec)


async def client_view(registry: Registry, session: Any) -> ClientView:
    """The upstream connections that serve the client of ``session`` (a request's).

    Opens, for each ``Upstream`` proxied into ``registry``, the connection for the
    capabilities this client declared, when it is the first such client (its tools that
    are new are registered then). Raises MCPError (internal error, naming the upstream
    connection) when one cannot be opened: nothing was sent.
    """
    upstreams = _UPSTREAMS.get(registry)
    if not upstreams:
        return ClientView({})
    capabilities = forwarded_capabilities(session)
    connection = client_connection(session)
    sessions: dict[Upstream, UpstreamSession] = {}
    for upstream in upstreams:
        try:
            opened = await upstream.session(capabilities)
        except UpstreamUnavailable as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None
        except Exception as exc:
            raise MCPError(
                code=types.INTERNAL_ERROR,
                message=f"cannot reach the upstream for a client that declared "
                f"{describe(capabilities)}: {type(exc).__name__}: {exc}",
            ) from None
        if opened.relay is not None:
            opened.relay.attach(connection)
        sessions[upstream] = opened
    return ClientView(sessions)


def _body(route: _Route, tool: str, policy: ToolPolicy) -> Callable[..., Any]:
    timeout = policy.timeout if policy.timeout is not None else DEFAULT_TIMEOUT_S
    safe = policy.not_executed_on_error

    def unknown(message: str) -> Exception:
        # The upstream may have run it: ambiguous, unless the operator says otherwise.
        return ToolError(message) if safe else UpstreamError(message)

    async def unlisted(upstream: Any) -> bool:
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
        link = await route(downstream)
        if link.retired:
            link = await route(downstream)  # (retired since it was opened: a fresh one)
        upstream, relay = link.client, link.relay
        if link.closed or link.retired:
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
        link.begin()
        # Whether the upstream answered the request (a result or its own error): a call
        # that stops waiting before then leaves the upstream's later questions unplaced.
        answered = False
        try:
            async with asyncio.timeout(timeout):
                result = await upstream.call_tool(tool, args, meta=meta, **options)
            answered = True
        except TimeoutError:
            if safe:
                raise ToolError(f"upstream {tool} did not answer within {timeout:g} s") from None
            raise ToolTimeout(
                f"upstream {tool} did not answer within {timeout:g} s; it may have run"
            ) from None
        except MCPError as exc:
            answered = exc.error.code not in _UNANSWERED
            if exc.error.code == types.CONNECTION_CLOSED:
                link.closed = True  # this call may have reached it; the next ones cannot
            elif await unlisted(upstream):
                raise ToolError(
                    f"upstream {tool} is not a tool of the upstream (it answered: {exc}); "
                    "it did not run"
                ) from None
            raise unknown(f"upstream {tool}: error {exc.error.code}: {exc}") from None
        except anyio.ClosedResourceError:
            # Our side of the connection was already closed: nothing was sent.
            answered = True
            link.closed = True
            raise ToolError(
                f"upstream {tool}: the connection is closed; nothing was sent"
            ) from None
        except Exception as exc:
            raise unknown(f"upstream {tool}: {type(exc).__name__}: {exc}") from None
        finally:
            if relay is not None and not answered:
                relay.abandon(downstream)
                # Its later questions cannot be placed: new calls go to a fresh connection.
                link.retire()
            elif relay is not None and downstream is not None:
                relay.leave(downstream)
            if link.closed:
                link.retire()  # (of an Upstream: the next calls go to a fresh connection)
            link.end()
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


def _route_to(upstream: Upstream, tool: str) -> _Route:
    async def route(downstream: Downstream | None) -> UpstreamSession:
        # The connection that declared what this client declared (none without one).
        capabilities = NONE if downstream is None else downstream.capabilities
        try:
            session = await upstream.session(capabilities)
        except UpstreamUnavailable as exc:
            raise ToolError(f"upstream {tool}: {exc}") from None
        except Exception as exc:
            raise ToolError(
                f"upstream {tool}: cannot connect for a client that declared "
                f"{describe(capabilities)} ({type(exc).__name__}: {exc}); nothing was sent"
            ) from None
        if not session.lists(tool):
            raise ToolError(
                f"upstream {tool} is not listed to a client that declared "
                f"{describe(capabilities)}; nothing was sent"
            )
        return session

    return route


def _fixed(session: UpstreamSession) -> _Route:
    async def route(downstream: Downstream | None) -> UpstreamSession:
        return session

    return route


#: The capability sets the policy check may open at start, after the one with none.
_SETS = [
    frozenset({"elicitation"}),
    frozenset({"sampling"}),
    frozenset({"elicitation", "sampling"}),
]


async def proxy(
    registry: Registry,
    upstream: Any,
    *,
    prefix: str = "",
    policy: Mapping[str, Any] | None = None,
    relay: Relay | None = None,
) -> list[ToolSpec]:
    """Register every tool of ``upstream`` in ``registry``.

    ``upstream`` is an entered ``Upstream`` (one connection per set of capabilities
    the clients declared, so the upstream lists and asks each client only what it
    declared) or an entered ``mcp.Client`` (one connection for every client, declaring
    whatever that client was built with; ``relay`` is the one whose ``client_options()``
    it was built with, which carries the upstream's elicitation, sampling and log
    messages to the client whose call is waiting).

    Each tool becomes a schema tool named ``prefix + name`` (its own input schema,
    validated by the gateway before anything is sent) whose body calls the upstream.
    ``policy`` maps upstream tool names (before ``prefix``) to a ``ToolPolicy`` or a
    mapping of its fields. With an ``Upstream``, a tool listed only to clients with
    capabilities is registered when the first such client arrives (one whose name a
    registry tool has is not); a policy naming tools the capability-less connection
    does not list opens the other capability sets at start to find them. Returns the
    new specs. Raises ToolUsageError, before registering anything, when a name collides
    with a registry tool (naming both), when the policy names a tool the upstream does
    not have, or when a policy entry or schema is invalid.
    """
    policies = parse_policy(policy)
    if isinstance(upstream, Upstream):
        sessions = [await upstream.session(NONE)]
        names = set(sessions[0].tools or {})
        for capabilities in _SETS:
            if not set(policies) - names:
                break
            sessions.append(await upstream.session(capabilities))
            names |= set(sessions[-1].tools or {})
        tools = list({name: t for s in sessions for name, t in (s.tools or {}).items()}.values())
    else:
        listed = await upstream.list_tools()
        tools = list(listed.tools)
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
    fixed = None if isinstance(upstream, Upstream) else UpstreamSession(upstream, relay, None, None)

    def entry(tool: types.Tool) -> tuple[str, dict[str, Any], Any, dict[str, Any]]:
        rule = policies.get(tool.name, ToolPolicy())
        options: dict[str, Any] = {
            "description": tool.description or "",
            "confirm": _confirm(tool, rule),
            "cache": rule.cache,
            "effect": rule.effect,
            "readonly": rule.readonly,
        }
        route = _fixed(fixed) if fixed is not None else _route_to(upstream, tool.name)
        return prefix + tool.name, tool.input_schema, _body(route, tool.name, rule), options

    def register(
        tool: types.Tool, made: tuple[str, dict[str, Any], Any, dict[str, Any]]
    ) -> ToolSpec:
        name, schema, body, options = made
        spec = registry.add_schema_tool(name, schema, body, **options)
        _LISTED[body] = tool
        if isinstance(upstream, Upstream):
            _ROUTED[body] = (upstream, tool.name)
        return spec

    entries = [entry(tool) for tool in tools]
    scratch = Registry()
    for name, schema, body, options in entries:
        # Checked in a scratch registry first: one bad schema or policy registers nothing.
        try:
            scratch.add_schema_tool(name, schema, body, **options)
        except ToolUsageError as exc:
            raise ToolUsageError(f"upstream tool {name!r}: {exc}") from None
    specs = [register(tool, made) for tool, made in zip(tools, entries, strict=True)]
    if isinstance(upstream, Upstream):
        _UPSTREAMS.setdefault(registry, []).append(upstream)

        def found(session: UpstreamSession) -> None:
            # A connection opened for a new capability set: the tools only it lists.
            for tool in (session.tools or {}).values():
                if prefix + tool.name in registry:
                    continue  # registered already, or a registry tool's name (it wins)
                try:
                    register(tool, entry(tool))
                except ToolUsageError:
                    continue  # a schema the registry refuses: not listed, not callable

        upstream.on_open(found)
    return specs
