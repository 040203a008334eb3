"""``answering(read, write)``: every line the SDK's transport cannot read gets its answer.

The SDK's stdio transport parses each line with pydantic; a line that does not parse or
validate becomes an ``Exception`` on the read stream, which the dispatcher logs at debug
level and drops (``JSONRPCDispatcher._dispatch``): the client waits forever for an
answer that never comes. This wrapper is the stream the server reads: it turns each such
item into the JSON-RPC error the spec names (-32700 for text that is not JSON, id null;
-32600 for JSON that is not a valid request, with its id when that is readable), or,
for a ``tools/call`` whose only fault is in its ``arguments`` (a lone surrogate, nesting
the SDK's parser refuses), into the request itself, so that the gateway records the
model's invalid arguments as ``call.invalid`` like any other.
"""

from __future__ import annotations

import json
import secrets
from types import TracebackType
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

__all__ = ["answering", "answering_http", "arguments_text"]

#: Deeper than this outside ``arguments`` is refused (the SDK's own parser stops near 200).
_MAX_ENVELOPE_DEPTH = 64


class _Answering:
    """A read stream of the SDK's stream pair that answers what it cannot read."""

    def __init__(self, read: Any, write: Any) -> None:
        self._read = read
        self._write = write

    @property
    def last_context(self) -> Any:
        # The dispatcher runs each handler in the sender's context (read by getattr).
        return getattr(self._read, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return await self._take(self._read.receive)

    async def _take(self, get: Any) -> SessionMessage | Exception:
        while True:
            item: SessionMessage | Exception = await get()
            if not isinstance(item, Exception):
                return item
            reply = _reply_to(item)
            if isinstance(reply, SessionMessage):
                return reply
            if reply is None:
                return item  # not a line we could read back: the SDK's own handling
            await self._write.send(SessionMessage(reply))

    async def aclose(self) -> None:
        await self._read.aclose()

    def __aiter__(self) -> _Answering:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return await self._take(self._read.__anext__)

    async def __aenter__(self) -> _Answering:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


def answering(read: Any, write: Any) -> Any:
    """The read stream to give ``Server.run``: ``read``, with its unreadable lines answered.

    ``read`` and ``write`` are the pair a transport yields (``stdio_server()``); the
    answers go out on ``write``, in the order the lines came in.
    """
    return _Answering(read, write)


def _error(rid: Any, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message)
    )


def _reply_to(exc: Exception) -> types.JSONRPCError | SessionMessage | None:
    """The error answering a line that failed the SDK's parse, or the request to serve."""
    if not isinstance(exc, ValidationError):
        return None
    errors = exc.errors()
    if not errors:
        return None
    if errors[0].get("type") == "json_invalid":
        raw = errors[0].get("input")
        if not isinstance(raw, str):
            return None
        try:
            # Python's parser reads what pydantic's refuses but JSON allows (a lone
            # surrogate's escape, nesting past ~200): the id can still be answered.
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return _error(None, types.PARSE_ERROR, "Parse error: not JSON text")
        return _judge(raw)
    return _judge(_whole(errors))


def _whole(errors: list[Any]) -> Any:
    # JSON that parsed but fits no message type: each error names a branch of the union
    # (request, notification, response, error). A value that is not an object fails at a
    # branch's root; an object lacks "result" or "error" for two of them, and that
    # error's input is the whole message.
    for error in errors:
        loc = error.get("loc", ())
        if len(loc) <= 1 or (error.get("type") == "missing" and len(loc) == 2):
            return error.get("input")
    return None  # (not found: answered with id null)


def _judge(obj: Any) -> types.JSONRPCError | SessionMessage:
    if not isinstance(obj, dict):
        what = "a batch (not supported)" if isinstance(obj, list) else type(obj).__name__
        return _error(None, types.INVALID_REQUEST, f"Invalid Request: not an object ({what})")
    # Only a request's id is answered: an error carrying the id of a malformed response
    # would read, to the client, as the answer to its own request of that id.
    rid = obj.get("id")
    if not (isinstance(rid, str | int) and not isinstance(rid, bool)) or _fault(rid, 0):
        rid = None
    if "method" not in obj:
        if rid is not None and ("result" in obj or "error" in obj):
            # The client's answer to a request of ours (an elicitation) that cannot be
            # read: an error for that request, so the call waiting on it ends (an
            # approval that cannot be read is no approval) instead of waiting forever.
            problem = _fault(obj, 0) or "not a valid JSON-RPC response"
            return SessionMessage(
                _error(rid, types.INVALID_REQUEST, f"the client's answer: {problem}")
            )
        rid = None
    params = obj.get("params")
    if (
        rid is not None
        and obj.get("method") == "tools/call"
        and isinstance(params, dict)
        and "arguments" in params
    ):
        envelope = {**obj, "params": {**params, "arguments": {}}}
        if _fault(envelope, 0) is None:
            try:
                message = types.jsonrpc_message_adapter.validate_python(obj, by_name=False)
            except (ValidationError, RecursionError):
                pass
            else:
                # Only the arguments are at fault: the model's invalid arguments, for the
                # gateway to refuse and record (never echoed back on the wire).
                return SessionMessage(message)
    problem = _fault(obj, 0) or _shape(obj)
    return _error(rid, types.INVALID_REQUEST, f"Invalid Request: {problem}")


def _shape(obj: dict[str, Any]) -> str:
    if obj.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "method" in obj and not isinstance(obj["method"], str):
        return "method must be a string"
    if "params" in obj and not isinstance(obj["params"], dict):
        return "params must be an object"
    if (
        "id" in obj
        and obj.get("id") is not None
        and (isinstance(obj["id"], bool) or not isinstance(obj["id"], str | int))
    ):
        return "id must be a string or an integer"
    return "not a valid JSON-RPC request, notification or response"


def _fault(value: Any, depth: int) -> str | None:
    """Why ``value`` cannot go back on the wire as it is (a lone surrogate, depth), or None."""
    if depth > _MAX_ENVELOPE_DEPTH:
        return f"nests deeper than {_MAX_ENVELOPE_DEPTH} levels"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a string holds a lone surrogate (not Unicode text)"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _fault(key, depth + 1) or _fault(item, depth + 1)
            if found:
                return found
    elif isinstance(value, list):
        for item in value:
            found = _fault(item, depth + 1)
            if found:
                return found
    return None


#: Marks, in ``_meta``, arguments that ``answering_http`` rewrote as the JSON text the
#: client sent. Random per process: a client cannot set it, so arguments given as a
#: string by a client are still "not an object".
_TEXT_MARK = secrets.token_hex(16)
_TEXT_KEY = "io.agent-adapter/arguments-text"
_MAX_BODY = 4 * 1024 * 1024


def arguments_text(meta: Any) -> bool:
    """Whether a ``tools/call``'s ``_meta`` says its arguments are the client's JSON text."""
    return isinstance(meta, dict) and meta.get(_TEXT_KEY) == _TEXT_MARK


def answering_http(app: Any, *, path: str = "/mcp") -> Any:
    """An ASGI app: ``app`` (``Server.streamable_http_app()``), with unreadable bodies answered.

    The SDK's HTTP transport answers them itself, but as -32602 with id null, and as a
    parse error for JSON its parser refuses (a lone surrogate's escape, nesting past
    ~200) though JSON allows it. A POST to ``path`` whose body the SDK cannot read is
    answered as over stdio (``answering``): -32700 (id null), -32600 with the request's
    id, or, for a ``tools/call`` at fault only in its ``arguments``, the request with its
    arguments as the JSON text sent, for the gateway to record as ``call.invalid``.
    """

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if (
            scope.get("type") != "http"
            or scope.get("method") != "POST"
            or scope.get("path") != path
        ):
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more and size <= _MAX_BODY:
            message = await receive()
            if message["type"] != "http.request":
                # (A disconnect mid-body: the SDK sees what came, then the disconnect.)
                await app(scope, _replay(chunks, message, receive, more=True), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = bool(message.get("more_body"))
        if more:  # too large to judge here: the SDK's own size limit answers it
            await app(scope, _replay(chunks, None, receive, more=True), send)
            return
        body = b"".join(chunks)
        verdict = _judge_body(body)
        if verdict is None:
            await app(scope, _replay([body], None, receive), send)
        elif isinstance(verdict, bytes):
            await app(scope, _replay([verdict], None, receive), send)
        else:
            payload = verdict.model_dump_json(by_alias=True, exclude_unset=True).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(payload)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": payload})

    return guarded


def _replay(chunks: list[bytes], first: Any, receive: Any, *, more: bool = False) -> Any:
    pending: list[Any] = [
        {"type": "http.request", "body": chunk, "more_body": more or i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    if first is not None:
        pending.append(first)

    async def replayed() -> Any:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def _judge_body(body: bytes) -> types.JSONRPCError | bytes | None:
    """None: the SDK reads ``body``; an error to answer; or the body to serve instead."""
    try:
        types.jsonrpc_message_adapter.validate_json(body, by_name=False)
    except ValidationError:
        pass
    else:
        return None
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return _error(None, types.PARSE_ERROR, "Parse error: not JSON text")
    verdict = _judge(obj)
    if isinstance(verdict, types.JSONRPCError):
        return verdict
    if isinstance(verdict.message, types.JSONRPCError):  # (an unreadable answer of the client's)
        return verdict.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
    # A tools/call at fault only in its arguments: served with them as the JSON text
    # sent (ASCII escapes: nothing the SDK's parser refuses), marked for the gateway.
    params = dict(obj["params"])
    meta = params.get("_meta")
    params["_meta"] = {**(meta if isinstance(meta, dict) else {}), _TEXT_KEY: _TEXT_MARK}
    try:
        params["arguments"] = json.dumps(params["arguments"], ensure_ascii=True)
    except (ValueError, RecursionError):
        return _error(obj.get("id"), types.INVALID_REQUEST, "Invalid Request: arguments")
    return json.dumps({**obj, "params": params}, ensure_ascii=True).encode()
