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
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata

from ...engine import ExchangeRecorder, exchange_recorder
from ...errors import ToolUsageError

__all__ = [
    "EXCHANGES_KEY",
    "Downstream",
    "Relay",
    "current_downstream",
    "downstream_of",
    "serving",
]

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
        #: the client connection (the SDK makes a session per request, on one connection)
        self.connection = getattr(ctx.session, "_connection", ctx.session)
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
        self.peer = _peer(ctx.session, self.connection)
        #: the waiting call's recorder, taken inside its body (``Relay.enter``)
        self.recorder: ExchangeRecorder | None = None

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
    one stream), so it goes to the client whose proxied calls are waiting: when calls of
    two connections wait at once it is refused rather than shown to a person who may not
    be the one asked (and a log line is dropped), and with no call waiting it is refused.
    """

    def __init__(self) -> None:
        self._waiting: list[Downstream] = []

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``mcp.Client``: the callbacks that relay to the client."""
        return {
            "elicitation_callback": self._elicit,
            "sampling_callback": self._sample,
            "logging_callback": self._log,
        }

    def enter(self, downstream: Downstream) -> None:
        """``downstream``'s call waits on this upstream (called in the call's body: what is
        relayed to it is recorded in that call)."""
        if downstream.recorder is None:
            with contextlib.suppress(ToolUsageError):  # (not a body the executor runs)
                downstream.recorder = exchange_recorder()
        self._waiting.append(downstream)

    def leave(self, downstream: Downstream) -> None:
        if downstream in self._waiting:
            self._waiting.remove(downstream)

    def _target(self) -> Downstream | None:
        if not self._waiting:
            return None
        latest = self._waiting[-1]
        if any(d.connection is not latest.connection for d in self._waiting):
            return None
        return latest

    async def _relay_request(
        self, capability: str, method: str, request: Any, result_type: type[Any]
    ) -> Any:
        target = self._target()
        if target is None:
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"{method}: no one client's call is waiting on this upstream",
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
        if target is None:
            return  # no one client is waiting on this upstream: nobody to tell
        await target.log(params)
