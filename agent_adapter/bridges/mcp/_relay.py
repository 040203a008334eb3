"""What passes between a client and an upstream during a proxied call.

The gateway decides tool calls; everything else a call carries is relayed as it is:
progress (under the client's own ``progressToken``), log messages, and the upstream's
``elicitation/create`` and ``sampling/createMessage`` requests, each sent to the client
whose call is waiting on the upstream, only when that client declared the capability,
and answered with what the client answered. Each request and its answer (or why there
is none) is recorded as a ``call.exchanged`` event of the waiting call, durable before
the upstream hears the answer (``agent_adapter.engine.exchange_recorder``); an answer
that cannot be recorded is not handed on (the upstream gets an error instead).
Ledgers written before that kept them in the result's ``EXCHANGES_KEY``.

A log message no call waits for goes to the one client connection the upstream
connection serves, when it has only ever served one (a stdio gateway has one client);
once it served several (HTTP, at once or one after another) it is dropped: the upstream
addressed no one (a line may be about a client that left), and clients of one
gateway may be different people. A client's ``logging/setLevel`` applies to what is
relayed to it, in a call or not; a 2026-07-28 client gets log messages only in a call
(the protocol has no channel outside one).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.metadata
import logging
import warnings
import weakref
from collections.abc import Collection, Iterator
from typing import Any, overload

import mcp_types as types
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ...engine import ExchangeRecorder, exchange_recorder
from ...errors import ToolUsageError

__all__ = [
    "EXCHANGES_KEY",
    "FORWARDED",
    "Downstream",
    "Relay",
    "client_connection",
    "current_downstream",
    "downstream_of",
    "forwarded_capabilities",
    "serving",
    "set_log_level",
]

#: The client capabilities the gateway forwards to an upstream (and declares to it only
#: on a connection that serves clients that declared them). Roots are not forwarded.
FORWARDED: tuple[str, ...] = ("elicitation", "sampling")

#: Where a client connection's ``logging/setLevel`` is kept (``Connection.state``).
_LEVEL_STATE = "io.agent-adapter/log-level"
_logger = logging.getLogger("agent_adapter.bridges.mcp")

_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@overload
def client_connection(session: Any) -> Connection: ...
@overload
def client_connection(session: Any, *, required: bool) -> Connection | None: ...
def client_connection(session: Any, *, required: bool = True) -> Connection | None:
    """The SDK's per-client ``Connection`` behind one request's ``ServerSession``.

    mcp 2.3 makes a ``ServerSession`` per request and offers no public way from it (or
    from the handler's context) to the connection it belongs to; the session keeps it as
    ``_connection``. This is the one place that reads it, and it says so when a version
    of the SDK no longer has it (``required=False``: None instead, for what can do
    without it, such as the session id a ``peer`` names).
    """
    connection = getattr(session, "_connection", None)
    if not isinstance(connection, Connection):
        if not required:
            return None
        try:
            version = importlib.metadata.version("mcp")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        raise RuntimeError(
            f"the mcp SDK's {type(session).__name__} has no _connection (a "
            f"mcp.server.connection.Connection) in mcp {version}: the gateway reads it to "
            "route an upstream's requests to the right client; use mcp>=2.3,<3"
        )
    return connection


def forwarded_capabilities(session: Any) -> frozenset[str]:
    """Which of ``FORWARDED`` the client of ``session`` declared."""
    caps = getattr(session, "client_capabilities", None)
    if caps is None:
        return frozenset()
    return frozenset(name for name in FORWARDED if getattr(caps, name, None) is not None)


def set_log_level(session: Any, level: str) -> None:
    """Keep the client's ``logging/setLevel`` on its connection, for what is relayed."""
    client_connection(session).state[_LEVEL_STATE] = level


def _wanted(connection: Connection, level: str) -> bool:
    floor = connection.state.get(_LEVEL_STATE)
    if floor not in _LEVELS or level not in _LEVELS:
        return True
    return _LEVELS.index(level) >= _LEVELS.index(floor)


#: Where a proxied call's recorded value kept what was asked and answered mid-call, in
#: ledgers written before ``call.exchanged`` (still read: a replay leaves it out).
EXCHANGES_KEY = "io.agent-adapter/exchanges"

_current: contextvars.ContextVar[Downstream | None] = contextvars.ContextVar(
    "agent_adapter_mcp_downstream", default=None
)


def _dump(model: Any) -> Any:
    dump = getattr(model, "model_dump", None)
    if dump is None:
        return model
    return dump(mode="json", by_alias=True, exclude_none=True)


class Downstream:
    """The client side of one ``tools/call``: its session, request id and progress token."""

    def __init__(self, ctx: Any) -> None:
        self.session = ctx.session
        #: which forwarded capabilities the client declared (picks the upstream connection)
        self.capabilities = forwarded_capabilities(ctx.session)
        self.request_id = ctx.request_id
        meta = getattr(ctx, "meta", None)
        token = None
        if isinstance(meta, dict):
            token = meta.get("progressToken", meta.get("progress_token"))
        elif meta is not None:
            token = getattr(meta, "progress_token", None)
        self.progress_token: str | int | None = token
        #: who answers what is relayed (``call.exchanged``'s ``peer``): the client's
        #: ``clientInfo`` and its transport session, as far as they are known
        self.peer = _peer(ctx.session, client_connection(ctx.session, required=False))
        #: the waiting call's recorder, taken inside its body (``Relay.enter``)
        self.recorder: ExchangeRecorder | None = None

    @functools.cached_property
    def connection(self) -> Connection:
        """The client connection (the SDK makes a session per request, on one connection);
        read when an upstream's message is routed (``client_connection``)."""
        return client_connection(self.session)

    def declared(self, capability: str) -> bool:
        caps = getattr(self.session, "client_capabilities", None)
        return caps is not None and getattr(caps, capability, None) is not None

    def _related(self) -> ServerMessageMetadata | None:
        if self.request_id is None:
            return None
        return ServerMessageMetadata(related_request_id=self.request_id)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self.progress_token is None:
            return
        await self.session.send_notification(
            types.ProgressNotification(
                params=types.ProgressNotificationParams(
                    progress_token=self.progress_token,
                    progress=progress,
                    total=total,
                    message=message,
                )
            ),
            self.request_id,
        )

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        # The session applies the client's level (logging/setLevel, or the 2026-07-28
        # per-request opt-in) as it would for the gateway's own messages.
        with warnings.catch_warnings():
            # (Deprecated from 2026-07-28 on, and what clients of older eras get; the
            # warning is raised when the coroutine is made, so only that is covered.)
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            sending = self.session.send_log_message(
                params.level, params.data, params.logger, related_request_id=self.request_id
            )
        await sending

    async def ask(self, method: str, request: Any, result_type: type[Any]) -> Any:
        """Send the upstream's request to this client and record it with its answer (or
        error) before the upstream gets either."""
        params = _dump(request.params)
        try:
            answer = await self.session.send_request(request, result_type, metadata=self._related())
        except MCPError as exc:
            error = f"the client answered error {exc.error.code}: {exc.error.message}"
            return await self.record(method, params, exc.error, error=error)
        except Exception as exc:
            failed = types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"the client did not answer: {exc}"
            )
            return await self.record(
                method, params, failed, error=f"the client did not answer: {type(exc).__name__}"
            )
        return await self.record(method, params, answer, response=_dump(answer))

    async def record(
        self, method: str, params: Any, reply: Any, *, response: Any = None, error: str = ""
    ) -> Any:
        """``reply`` for the upstream, once the exchange is on record in the waiting call
        (no recorder: a body the executor does not run); else an error saying why not."""
        if self.recorder is None:
            return reply
        try:
            await self.recorder.record(
                method, request=params, response=response, error=error, peer=self.peer
            )
        except Exception as exc:  # (a LedgerError, or the call ended meanwhile)
            # Not on record, not handed on: what the upstream does next rests on it.
            return types.ErrorData(
                code=types.INTERNAL_ERROR,
                message=f"{method}: the exchange could not be recorded ({exc}); not relayed",
            )
        return reply


def _peer(session: Any, connection: Any) -> str:
    params = getattr(session, "client_params", None)
    info = getattr(params, "client_info", None)
    peer = f"{info.name} {info.version}" if info is not None else "an unnamed MCP client"
    session_id = getattr(connection, "session_id", None)
    return f"{peer}, session {session_id}" if session_id else peer


def downstream_of(ctx: Any) -> Downstream:
    """A ``Downstream`` for the server request context ``ctx``."""
    return Downstream(ctx)


@contextlib.contextmanager
def serving(downstream: Downstream) -> Iterator[Downstream]:
    """Marks ``downstream`` as the client of the code inside (a proxied body reads it)."""
    token = _current.set(downstream)
    try:
        yield downstream
    finally:
        _current.reset(token)


def current_downstream() -> Downstream | None:
    """The client of the ``tools/call`` being served, inside its tool body; else None."""
    return _current.get()


class Relay:
    """Routes one upstream connection's requests and notifications to the waiting client.

    Give ``Relay().client_options()`` to the upstream's ``mcp.Client`` and the same relay
    to ``proxy(..., relay=...)``. An upstream's request names no call (over stdio there is
    one stream), so it goes to the one proxied call waiting: when two calls wait at once
    it is refused rather than recorded in a call that may not have asked, or shown to a
    person who may not be the one asked (a log line is dropped when calls of two
    connections wait), and with no call waiting it is refused.
    A log line with no call waiting goes to the one client connection attached (``attach``)
    when it is the only one ever attached.

    Once a call ended while its upstream request was unanswered (a timeout, a cancel, a
    wait cut short: ``abandon``), the upstream may still be running that call's tool and
    ask for it later, inside another call's wait: from then on this connection's
    questions are refused, for its life (the SDK shows no sign of when an abandoned
    request ends; an upstream usually does not answer a cancelled request at all), and
    a log line reaches a waiting call only when every abandoned call was of its client.
    (An ``Upstream`` retires such a connection: new calls go to a fresh one.)
    """

    def __init__(self) -> None:
        self._waiting: list[Downstream] = []
        #: the client connections this upstream connection serves (while they live)
        self._clients: weakref.WeakSet[Connection] = weakref.WeakSet()
        #: how many client connections it has ever served (a gone one's log lines must
        #: not reach the next client: an out-of-call line goes only where there was one)
        self._served = 0
        #: how many calls ended while their upstream request was unanswered, and how many
        #: of those were of each client connection
        self.abandoned = 0
        self._abandoned_of: weakref.WeakKeyDictionary[Connection, int] = weakref.WeakKeyDictionary()

    def client_options(self, capabilities: Collection[str] | None = None) -> dict[str, Any]:
        """Keyword arguments for ``mcp.Client``: the callbacks that relay to the client.

        The SDK's client declares a capability to the upstream when it has its callback:
        ``capabilities`` (a subset of ``FORWARDED``) limits them to those; None declares
        every one (a single upstream connection for every client, refused per call).
        """
        options: dict[str, Any] = {"logging_callback": self._log}
        if capabilities is None or "elicitation" in capabilities:
            options["elicitation_callback"] = self._elicit
        if capabilities is None or "sampling" in capabilities:
            options["sampling_callback"] = self._sample
        return options

    def attach(self, connection: Connection) -> None:
        """``connection`` (a client's) is served by this upstream connection."""
        if connection.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            # (A 2026-07-28 connection lives one request and takes no log outside it.)
            if connection not in self._clients:
                self._served += 1
            self._clients.add(connection)

    def enter(self, downstream: Downstream) -> None:
        """``downstream``'s call waits on this upstream (called in the call's body: what is
        relayed to it is recorded in that call)."""
        if downstream.recorder is None:
            with contextlib.suppress(ToolUsageError):  # (not a body the executor runs)
                downstream.recorder = exchange_recorder()
        self.attach(downstream.connection)
        self._waiting.append(downstream)

    def leave(self, downstream: Downstream) -> None:
        if downstream in self._waiting:
            self._waiting.remove(downstream)

    def abandon(self, downstream: Downstream | None) -> None:
        """A call (``downstream``'s, or one with no client) stopped waiting before the
        upstream answered its request: what the upstream asks from now on may be for it,
        so no question is relayed on this connection any more."""
        if downstream is not None:
            self.leave(downstream)
            connection = downstream.connection
            self._abandoned_of[connection] = self._abandoned_of.get(connection, 0) + 1
        self.abandoned += 1
        if self.abandoned == 1:
            _logger.warning(
                "an MCP upstream call ended before the upstream answered it; the upstream "
                "may still ask for it, so this upstream connection's elicitation and "
                "sampling requests are refused from now on"
            )

    def _target(self, *, one_call: bool = False) -> Downstream | None:
        if not self._waiting:
            return None
        if one_call and len(self._waiting) > 1:
            # A request names no call: with two waiting (even of one client), which one
            # asked is unknown, and its exchange would be recorded in a guessed call.
            return None
        latest = self._waiting[-1]
        if any(d.connection is not latest.connection for d in self._waiting):
            return None
        return latest

    async def _relay_request(
        self, capability: str, method: str, request: Any, result_type: type[Any]
    ) -> Any:
        if self.abandoned:
            # Not shown to, answered by, or recorded in a call that may not have asked.
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"{method}: refused: a call on this connection ended before the "
                "upstream answered it, so which call this request is for is unknown",
            )
        target = self._target(one_call=True)
        if target is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"{method}: no one call is waiting on this upstream",
            )
        if not target.declared(capability):
            refusal = types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"{method}: the client did not declare {capability}",
            )
            error = f"refused: the client did not declare {capability}"
            return await target.record(method, _dump(request.params), refusal, error=error)
        return await target.ask(method, request, result_type)

    async def _elicit(self, context: Any, params: types.ElicitRequestParams) -> Any:
        return await self._relay_request(
            "elicitation",
            "elicitation/create",
            types.ElicitRequest(params=params),
            types.ElicitResult,
        )

    async def _sample(self, context: Any, params: types.CreateMessageRequestParams) -> Any:
        return await self._relay_request(
            "sampling",
            "sampling/createMessage",
            types.CreateMessageRequest(params=params),
            types.CreateMessageResult,
        )

    async def _log(self, params: types.LoggingMessageNotificationParams) -> None:
        target = self._target()
        if target is not None:
            if self._abandoned_of.get(target.connection, 0) != self.abandoned:
                return  # may be about an abandoned call of another client: not guessed
            if _wanted(target.connection, params.level):
                await target.log(params)
            return
        if self._waiting:
            return  # calls of several connections wait: not guessed
        clients = list(self._clients)
        if len(clients) != 1 or self._served != 1:
            # No call waits and not one client served ever (one that left may be the
            # one the line is about): nobody to tell.
            return
        (client,) = clients
        if not _wanted(client, params.level):
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            sending = client.log(params.level, params.data, params.logger)
        await sending
