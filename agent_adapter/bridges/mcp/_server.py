"""``mcp_server``: registry tools behind the SDK's low-level ``Server``, through the executor.

The gateway decides nothing: it maps an MCP ``tools/call`` onto ``Executor.run_spec``
(ids from ``_meta`` or fresh, never the JSON-RPC id), the client's elicitation onto
``CallContext.approval``, and every ``AdapterError`` onto an ``isError`` result.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import time
import uuid
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
import msgspec
from mcp.server.lowlevel import Server
from mcp.server.request_state import (
    RequestStateBoundary,
    RequestStateSecurity,
    authenticated_principal,
)
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ...engine import (
    MAX_ARGS_BYTES,
    CallContext,
    Decision,
    Executor,
    Registry,
    ToolSpec,
    get_default_executor,
)
from ...errors import AdapterError, ToolUsageError
from ._approval import (
    METADATA,
    CallState,
    answer_decision,
    can_elicit,
    form_message,
    read_state,
)
from ._names import APPROVAL_SCHEMA, META_CALL_ID, META_RUN_ID, NAME
from ._proxy import ClientView, client_view, proxied_failure, proxied_result, upstream_tool
from ._relay import Downstream, downstream_of, serving, set_log_level
from ._results import refusal, success
from ._waiting import WaitingCall, WaitingCalls, read_wait_state
from ._wire import arguments_text

__all__ = ["drain", "exported_tools", "mcp_server"]

_encode = msgspec.json.Encoder().encode
_APPROVAL_KEY = "approval"
#: The reviewer recorded for an elicited answer on a transport without authentication.
ELICITATION_REVIEWER = "mcp-elicitation"


def _package_version() -> str:
    # serverInfo.version: the installed package's (a client reports it, the conformance
    # suite's server-info check shows it); a source tree that is not installed says so.
    try:
        return importlib.metadata.version("agent-adapter")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def exported_tools(registry: Registry, view: ClientView | None = None) -> list[types.Tool]:
    """The ``tools/list`` entries: every tool whose ``targets`` include ``"mcp"``.

    ``inputSchema`` is the registry's own schema, untouched. Annotations say what the
    spec says: ``destructiveHint`` when the tool needs approval (any ``confirm`` but
    False), ``idempotentHint`` when it has an effect key (a repeat has no second effect),
    ``readOnlyHint`` only from ``Registry.tool(readonly=True)``, never guessed. A proxied
    tool is listed as its upstream listed it (title, outputSchema, annotations, _meta),
    under its exported name: the gateway's own rules are enforced, not advertised.
    ``view`` (one client's) lists a proxied tool as the upstream listed it to that
    client's capabilities, and leaves out one it does not list to them.
    """
    if view is None:
        view = ClientView({})
    shown = [spec for spec in registry if spec.exported_to(NAME) and view.shows(spec)]
    return [_listed(spec, view.listing(spec)) for spec in view.ordered(shown)]


def _listed(spec: ToolSpec, upstream: types.Tool | None) -> types.Tool:
    if upstream is not None:
        update: dict[str, Any] = {"name": spec.name}
        if spec.readonly:  # the operator's policy says so
            hints = upstream.annotations or types.ToolAnnotations()
            update["annotations"] = hints.model_copy(update={"read_only_hint": True})
        return upstream.model_copy(update=update)
    return types.Tool(
        name=spec.name,
        description=spec.description or None,
        input_schema=spec.json_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=spec.readonly,
            destructive_hint=spec.confirm is not False,
            idempotent_hint=spec.effect is not None,
        ),
    )


def _answer(spec: ToolSpec, value: Any) -> types.CallToolResult:
    # A proxied call's value is the upstream's result (recorded so, so a replay is too).
    if upstream_tool(spec) is not None:
        result = proxied_result(value)
        if result is not None:
            return result
    return success(value)


def _refused(spec: ToolSpec, error: AdapterError) -> types.CallToolResult:
    # A proxied call the upstream answered with isError: its own result, as it sent it.
    if upstream_tool(spec) is not None:
        result = proxied_failure(error)
        if result is not None:
            return result
    return refusal(error)


def _meta_of(params: types.CallToolRequestParams) -> Mapping[str, Any]:
    # A dict on 2026-07-28 requests, a model (extra keys in model_extra) on some legacy
    # paths: a gateway that reads only one shape loses the pinned ids on the other.
    meta = params.meta
    if meta is None:
        return {}
    if isinstance(meta, Mapping):
        return meta
    return getattr(meta, "model_extra", None) or {}


def _pinned(meta: Mapping[str, Any], key: str) -> str | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 256:
        raise MCPError(
            code=types.INVALID_PARAMS,
            message=f"_meta[{key!r}] must be non-empty text of at most 256 characters",
        )
    return value


def _fresh(kind: str) -> str:
    # Never the JSON-RPC id: it restarts at 1 on every connection, and the ledger would
    # answer a second client's call 1 with the first client's result.
    return f"mcp-{kind}-{uuid.uuid4().hex}"


class _Gateway:
    """One server's handlers and its record of used request states."""

    def __init__(
        self,
        registry: Registry,
        executor: Executor,
        *,
        elicit: bool,
        state_ttl_s: float,
        default_run_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.default_run_id = default_run_id
        self.executor = executor
        self.elicit = elicit
        self.state_ttl_s = state_ttl_s
        #: nonces of request states already answered -> when they stop mattering (their
        #: seal expires): a state is single-use, which the seal alone cannot promise
        self.used: dict[str, float] = {}
        #: calls running on behalf of a client; a disconnect does not cancel them
        self.running: set[asyncio.Task[Any]] = set()
        #: proxied calls of 2026-07-28 clients, whose upstream's questions wait for a retry
        self.waiting = WaitingCalls(ttl_s=state_ttl_s, clock=clock)

    async def list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """Every exported tool, on one page; a proxied one as its upstream lists it to a
        client with this client's capabilities (left out when it lists it to none such)."""
        view = await client_view(self.registry, ctx.session)
        return types.ListToolsResult(tools=exported_tools(self.registry, view))

    async def set_logging_level(
        self, ctx: Any, params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """``logging/setLevel``: kept on the connection; applied to what is relayed."""
        set_log_level(ctx.session, params.level)
        return types.EmptyResult()

    def _spec(self, name: str) -> ToolSpec:
        spec = self.registry.get(name) if name in self.registry else None
        if spec is None or not spec.exported_to(NAME):
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")
        return spec

    async def _visible(self, name: str, session: Any) -> ToolSpec:
        """``_spec``, and unknown too when its upstream does not list it to this client
        (for its capabilities): never run, nothing recorded. The client's upstream
        connections are opened first: a tool its upstream lists only to this client's
        capabilities is registered when that connection opens, listed or not before."""
        view = await client_view(self.registry, session)
        spec = self._spec(name)
        if not view.shows(spec):
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")
        return spec

    def _use_state(self, plain: str) -> CallState:
        """The state of a retry, spent now; a used or unreadable one is refused."""
        state = read_state(plain)
        if state is None:
            raise MCPError(code=types.INVALID_PARAMS, message="Invalid or expired requestState")
        now = time.monotonic()
        if len(self.used) > 1024:
            self.used = {n: t for n, t in self.used.items() if t > now}
        # Checked and spent with no await in between: two retries that carry one state
        # cannot both pass, on one event loop.
        if state.nonce in self.used:
            raise MCPError(code=types.INVALID_PARAMS, message="requestState already used")
        self.used[state.nonce] = now + self.state_ttl_s
        return state

    def _has_record(self, run_id: str, call_id: str) -> bool:
        key = (run_id, call_id)
        state = self.executor.state
        return key in state.outcomes or key in state.inflight

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """One ``tools/call``: a result for everything but an unknown tool or a bad request."""
        spec = await self._visible(params.name, ctx.session)
        meta = _meta_of(params)
        pinned_call = _pinned(meta, META_CALL_ID)
        pinned_run = _pinned(meta, META_RUN_ID)
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        state: CallState | None = None
        if modern and params.request_state is not None:
            waited = read_wait_state(params.request_state)
            if waited is not None:
                # The answer to the upstream's question: the running call carries on.
                call = self.waiting.answer(waited, spec.name, params.input_responses, ctx)
                self.waiting.sweep()
                return await self._outcome(spec, call)
            state = self._use_state(params.request_state)
            call_id, run_id = state.call_id, state.run_id
        else:
            call_id = pinned_call or _fresh("call")
            run_id = pinned_run or self.default_run_id or _fresh("run")
        if modern:
            # (After a retry's own check, so a late retry is told that it is late.)
            self.waiting.sweep()
        args = _sized(params.arguments if params.arguments is not None else {})
        ctx_ids = CallContext(run_id=run_id, call_id=call_id, metadata=METADATA)
        decision: Decision | None = None
        if (
            spec.confirm is not False
            and self.elicit
            and can_elicit(ctx.session)
            and not self._has_record(run_id, call_id)
        ):
            # The engine's own decision (the confirm rule step 6 runs), recording nothing;
            # invalid arguments are never asked (run_spec records call.invalid).
            prepared = await self.executor.prepare(spec, args, ctx_ids)
            if prepared.ok and prepared.needs_approval:
                call_digest = prepared.digest
                reviewer = _reviewer(ctx)
                message = form_message(prepared)
                if modern:
                    answer = (params.input_responses or {}).get(_APPROVAL_KEY)
                    if state is None or answer is None or state.digest != call_digest:
                        return _ask_later(message, call_id, run_id, call_digest)
                    decision = answer_decision(answer, call_digest, reviewer)
                else:
                    decision = await _ask_now(ctx, message, call_digest, reviewer)
        call_ctx = CallContext(run_id=run_id, call_id=call_id, approval=decision, metadata=METADATA)
        waiting: WaitingCall | None = None
        downstream: Downstream
        if modern and upstream_tool(spec) is not None:
            # Its upstream may ask mid-call: the question goes out as InputRequiredResult.
            waiting, downstream = self.waiting.open(ctx, spec.name, call_id, run_id)
        else:
            downstream = downstream_of(ctx)
        with serving(downstream):
            # (The task copies the context: a proxied body finds its client there.)
            task = asyncio.ensure_future(self.executor.run_spec(spec, args, call_ctx))
        self.running.add(task)
        task.add_done_callback(self._done)
        if waiting is not None:
            waiting.bind(task)
            return await self._outcome(spec, waiting)
        return await self._result(spec, task)

    async def _outcome(
        self, spec: ToolSpec, call: WaitingCall
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The upstream's next question for the client, or the call's result."""
        question = await call.next()
        if question is not None:
            return question
        assert call.task is not None
        return await self._result(spec, call.task)

    async def _result(self, spec: ToolSpec, task: asyncio.Task[Any]) -> types.CallToolResult:
        try:
            # Shielded: a client that disconnects (or cancels the request) mid-call does not
            # cancel the body, so the call ends with its real outcome, not an ambiguous one.
            value = await asyncio.shield(task)
        except AdapterError as exc:
            return _refused(spec, exc)
        return _answer(spec, value)

    async def not_an_object(self, ctx: Any, call_next: Any) -> Any:
        """Server middleware: ``tools/call`` arguments that are not an object.

        The SDK would refuse them as a malformed request (a JSON-RPC error, nothing
        recorded); for a tool the gateway exports they are the model's invalid arguments:
        an ``isError`` tool-args-invalid result, recorded as ``call.invalid``, nobody asked.
        """
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping):
            return await call_next(ctx)
        args = params.get("arguments")
        name = params.get("name")
        if args is None or isinstance(args, Mapping) or not isinstance(name, str):
            return await call_next(ctx)
        spec = await self._visible(name, ctx.session)
        meta = params.get("_meta")
        meta = meta if isinstance(meta, Mapping) else {}
        call_ctx = CallContext(
            run_id=_pinned(meta, META_RUN_ID) or self.default_run_id or _fresh("run"),
            call_id=_pinned(meta, META_CALL_ID) or _fresh("call"),
            metadata=METADATA,
        )
        try:
            # As the JSON text the client sent: a string is not an object either (given as
            # a str, run_spec would parse it as JSON arguments).
            # (Arguments the HTTP transport could not read come as the text sent, marked.)
            raw = args if isinstance(args, str) and arguments_text(meta) else _text_of(args)
            value = await self.executor.run_spec(spec, raw, call_ctx)
        except AdapterError as exc:
            return refusal(exc)
        return _answer(spec, value)  # (a replayed pinned call: the recorded value)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.running.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the outcome is in the ledger already

    async def drain(self) -> None:
        """Wait for the calls still running (their clients gone) to record their outcome.

        A question waiting for a 2026-07-28 client's retry is refused to its upstream now:
        no retry can reach a server shutting down.
        """
        self.waiting.expire_all()
        while self.running:
            await asyncio.gather(*self.running, return_exceptions=True)


def _sized(args: Any) -> Any:
    # run_spec measures JSON text only: oversized arguments given as a dict are passed as
    # their text, so the size limit refuses them (recorded as call.invalid, not stored).
    if isinstance(args, dict) and args:
        try:
            raw = _encode(args)
        except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
            # (A lone surrogate is a UnicodeEncodeError: run_spec refuses the dict itself
            # and records call.invalid, as for any invalid arguments.)
            return args
        if len(raw) > MAX_ARGS_BYTES:
            return raw
    return args


def _text_of(args: Any) -> Any:
    try:
        return _encode(args)
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError):
        # Not encodable (a lone surrogate): as it is, which validation refuses too.
        return args


def _reviewer(ctx: Any) -> str:
    with contextlib.suppress(Exception):
        principal = authenticated_principal(ctx)
        if principal:
            return principal
    return ELICITATION_REVIEWER


def _ask_later(
    message: str, call_id: str, run_id: str, call_digest: str
) -> types.InputRequiredResult:
    # 2026-07-28: the request returns; the client asks the person and retries with the
    # answer and this state (sealed by the boundary, spent on first use).
    return types.InputRequiredResult(
        input_requests={
            _APPROVAL_KEY: types.ElicitRequest(
                params=types.ElicitRequestFormParams(
                    message=message, requested_schema=APPROVAL_SCHEMA
                )
            )
        },
        request_state=CallState.new(call_id, run_id, call_digest).dump(),
    )


async def _ask_now(ctx: Any, message: str, call_digest: str, reviewer: str) -> Decision:
    # Up to 2025-11-25: elicitation/create nested inside the running tools/call.
    try:
        answer = await ctx.session.elicit_form(
            message=message,
            requested_schema=APPROVAL_SCHEMA,
            related_request_id=ctx.request_id,
        )
    except Exception as exc:
        # Fail closed: no answer is no approval (the call is recorded as denied).
        return Decision(
            approved=False,
            reviewer=reviewer,
            reason=f"elicitation failed: {type(exc).__name__}: {exc}",
            digest=call_digest,
        )
    return answer_decision(answer, call_digest, reviewer)


def mcp_server(
    registry: Registry,
    *,
    executor: Executor | None = None,
    name: str = "agent-adapter",
    elicit: bool = True,
    request_state: RequestStateSecurity | None = None,
    default_run_id: str | None = None,
    clock: Callable[[], float] | None = None,
) -> Server[Any]:
    """An MCP ``Server`` (the SDK's low-level one) exporting ``registry``'s MCP tools.

    Every ``tools/call`` runs through ``executor`` (the default executor when None). A
    tool that needs approval is asked of the person through the client's elicitation
    when the client declared it and ``elicit`` is True (mid-call up to 2025-11-25, an
    ``InputRequiredResult`` on 2026-07-28); otherwise the executor's approval port decides
    (``DeferredApproval``: the result is approval-pending with its ``request_id``).
    ``request_state`` protects the 2026-07-28 state (default: a key of this process, so a
    state does not survive a restart; pass ``RequestStateSecurity(keys=[...])`` for
    several replicas). ``default_run_id`` is the run of calls whose client sends no
    ``io.agent-adapter/run-id`` (None: a fresh run per call); give one only when the
    server has one client (stdio), since a run shares limits and deferred decisions.
    A proxied call of a 2026-07-28 client whose upstream asks mid-call answers the client
    with an ``InputRequiredResult`` and keeps running; a question not answered within
    ``request_state``'s TTL, by ``clock`` (default ``time.monotonic``), is refused to the
    upstream. Serve it with ``server.run(...)`` (stdio) or
    ``server.streamable_http_app()``.
    """
    executor = executor if executor is not None else get_default_executor()
    security = request_state if request_state is not None else RequestStateSecurity.ephemeral()
    if default_run_id is not None and (not isinstance(default_run_id, str) or not default_run_id):
        raise ToolUsageError("default_run_id must be non-empty text or None")
    gateway = _Gateway(
        registry,
        executor,
        elicit=elicit,
        state_ttl_s=security.ttl,
        default_run_id=default_run_id,
        clock=time.monotonic if clock is None else clock,
    )
    with warnings.catch_warnings():
        # logging/setLevel is deprecated from 2026-07-28 on, and still what a client of
        # an older era sends before an upstream's log messages are relayed to it.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[Any] = Server(
            name,
            version=_package_version(),
            on_list_tools=gateway.list_tools,
            on_call_tool=gateway.call_tool,
            on_set_logging_level=gateway.set_logging_level,
        )
    # The low-level Server does not seal requestState by itself: without this boundary a
    # client could forge the call id and digest it echoes.
    server.middleware.append(RequestStateBoundary(security, default_audience=name))
    server.middleware.append(gateway.not_an_object)
    server.agent_adapter_gateway = gateway  # type: ignore[attr-defined]
    return server


async def drain(server: Server[Any]) -> None:
    """Wait until every call ``server`` started has recorded its outcome.

    A call outlives a client that disconnects mid-call (its outcome is still recorded);
    a host that shuts the gateway down awaits this first, so no call is cut short.
    """
    gateway = getattr(server, "agent_adapter_gateway", None)
    if isinstance(gateway, _Gateway):
        await gateway.drain()
