"""What passes between a client and an upstream during a proxied call.

The gateway decides tool calls; everything else a call carries is relayed as it is:
progress (under the client's own ``progressToken``), log messages, and the upstream's
``elicitation/create`` and ``sampling/createMessage`` requests, each sent to the client
whose call is waiting on the upstream, only when that client declared the capability,
and answered with what the client answered. Each request and its answer is kept with
the call (``Downstream.exchanges``): the proxied result records them.
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

__all__ = [
    "EXCHANGES_KEY",
    "Downstream",
    "Relay",
    "current_downstream",
    "downstream_of",
    "serving",
]

#: Where a proxied call's recorded value keeps what was asked and answered mid-call.
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
        #: ``{"method", "params", "answer"}`` per upstream request relayed for this call
        self.exchanges: list[dict[str, Any]] = []

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
        """Send the upstream's request to this client; its answer (or error) is kept."""
        entry: dict[str, Any] = {"method": method, "params": _dump(request.params)}
        self.exchanges.append(entry)
        try:
            answer = await self.session.send_request(request, result_type, metadata=self._related())
        except MCPError as exc:
            entry["error"] = {"code": exc.error.code, "message": exc.error.message}
            return exc.error
        except Exception as exc:
            entry["error"] = {"code": types.INTERNAL_ERROR, "message": f"{type(exc).__name__}"}
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"the client did not answer: {exc}"
            )
        entry["answer"] = _dump(answer)
        return answer


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
            target.exchanges.append(
                {"method": method, "params": _dump(request.params), "refused": "not declared"}
            )
            return types.ErrorData(
                code=types.INVALID_REQUEST,
                message=f"{method}: the client did not declare {capability}",
            )
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
