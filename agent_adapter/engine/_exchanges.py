"""What a running body exchanged with the outside mid-call: ``call.exchanged`` records.

A body that asks someone a question while it runs (an MCP upstream's elicitation relayed
to the client, a sampling request, a callback to a person) records each question and its
answer as an event of its own call, between ``call.started`` and the outcome, through the
executor's normal append path: the hash chain, followers and every store see it. The
outcome stays the body's result alone.

``exchange_recorder()`` is called inside the body (it reads the running call from the
context, as ``current_call()`` does) and returns an ``ExchangeRecorder`` bound to that
call, which may then be used from any task of the loop (a protocol client's callback
runs in its own task, outside the body's context) until the call's outcome is written.
``record_exchange(...)`` is the one-step form for code that runs in the body itself.

Durability: with the spec's default ``durability="write-ahead"``, ``record`` returns once
the event is durable, so the answer can be handed on knowing it is on record (one commit
per exchange; a call without exchanges pays nothing). With ``durability="outcome"`` the
spec asked for one commit per call: the event is buffered and written with the outcome.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from ..errors import ToolUsageError
from ..ledger import CallExchanged, appending, recordable
from ._digest import digest
from ._run import _Run, _scrubbed, _shown_secrets

__all__ = ["ExchangeRecorder", "exchange_recorder", "record_exchange"]

#: The call whose pipeline steps run in this context (set by ``run_spec``).
_running: ContextVar[_Run | None] = ContextVar("agent_adapter_running_call", default=None)


class ExchangeRecorder:
    """Records ``call.exchanged`` events for one running call (``exchange_recorder()``)."""

    __slots__ = ("_run",)

    def __init__(self, run: _Run) -> None:
        self._run = run

    @property
    def run_id(self) -> str:
        """The run id of the call this recorder writes for."""
        return self._run.ctx.run_id

    @property
    def call_id(self) -> str:
        """The call id of the call this recorder writes for."""
        return self._run.ctx.call_id

    @property
    def open(self) -> bool:
        """True while the call runs: its body started and its outcome is not written."""
        run = self._run
        return run.reached_body and not run.ended

    async def record(
        self,
        method: str,
        *,
        request: Any = None,
        response: Any = None,
        error: str = "",
        peer: str = "",
    ) -> CallExchanged:
        """Append one ``call.exchanged`` for the call and return it as recorded.

        ``method`` names the exchange (``"elicitation/create"``, ...); ``request`` and
        ``response`` are JSON values (an object that is not one is recorded as its
        encodable form); ``error`` says why there is no response (refused, failed);
        ``peer`` who was asked. Values of the spec's redacted arguments are scrubbed
        from every text in them; with ``redact_result`` only their digests are stored.
        Durable before it returns unless the spec has ``durability="outcome"``.

        Raises ToolUsageError when the call is not running (its body has not started,
        or its outcome is written: an exchange after it would not belong to the call)
        or for a ``method``, ``error`` or ``peer`` that is not text; nothing is recorded.
        """
        run = self._run
        if run.ended:
            raise ToolUsageError(
                f"call {run.ctx.call_id} of run {run.ctx.run_id} ({run.spec.name}) has "
                "ended: its outcome is recorded, and an exchange after it is not part of it"
            )
        if not run.reached_body:
            raise ToolUsageError(
                f"call {run.ctx.call_id} of run {run.ctx.run_id} ({run.spec.name}) has "
                "not started its body: only a running body records an exchange"
            )
        for name, value in (("method", method), ("error", error), ("peer", peer)):
            if not isinstance(value, str):
                raise ToolUsageError(f"{name} must be text, not {type(value).__name__}")
        if not method:
            raise ToolUsageError("an exchange needs a method naming what was asked")
        event = _exchanged(run, method, request, response, error, peer)
        pipe = run.pipe
        run.buffer.append(event)
        if run.spec.durability == "outcome":
            return event  # committed with the outcome, as the spec asked
        # Ours (never handed back to our own follower), from whichever task records it.
        mine = appending.set(pipe.follower)
        try:
            # With whatever the call still had buffered (a call.started not yet written).
            await pipe.flush(run)
        finally:
            appending.reset(mine)
        return event


def _exchanged(
    run: _Run, method: str, request: Any, response: Any, error: str, peer: str
) -> CallExchanged:
    """The ``call.exchanged`` event, after the spec's redaction rules."""
    secrets = _shown_secrets(run)
    request = _scrubbed_value(recordable(request), secrets)
    response = _scrubbed_value(recordable(response), secrets)
    ctx = run.ctx
    event = CallExchanged(
        ts=run.pipe.clock(),
        run_id=ctx.run_id,
        call_id=ctx.call_id,
        tool=run.spec.name,
        method=_scrubbed(method, secrets),
        error=_scrubbed(error, secrets),
        peer=_scrubbed(peer, secrets),
    )
    if run.spec.redact_result:
        # What was said mid-call is as private as the result it led to.
        event.redacted = True
        event.request_digest = "" if request is None else _digest_of(request)
        event.response_digest = "" if response is None else _digest_of(response)
    else:
        event.request = request
        event.response = response
    return event


def _digest_of(value: Any) -> str:
    try:
        return digest(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return digest(repr(value))  # (a float JSON cannot hold, say: still one digest)


def _scrubbed_value(value: Any, secrets: list[str]) -> Any:
    """``value`` (JSON) with ``secrets`` scrubbed from every text in it, keys included."""
    if not secrets:
        return value
    if isinstance(value, str):
        return _scrubbed(value, secrets)
    if isinstance(value, dict):
        return {_scrubbed(str(k), secrets): _scrubbed_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed_value(v, secrets) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool) and str(value) in secrets:
        return "[redacted]"  # a redacted number is no text to scrub: the leaf that is it
    return value


def exchange_recorder() -> ExchangeRecorder:
    """The recorder of the call whose body is running here (see the module docstring).

    Raises ToolUsageError outside a running tool body (no call, or a guard, hook or
    confirm rule before the body started).
    """
    run = _running.get()
    if run is None or run.pipe is None:
        raise ToolUsageError(
            "exchange_recorder() is called outside a running tool body: an exchange "
            "is recorded by the body of the call it belongs to"
        )
    recorder = ExchangeRecorder(run)
    if not recorder.open:
        # (A guard or hook of the call, before its body, or after its outcome.)
        state = "has ended" if run.ended else "has not started its body"
        raise ToolUsageError(
            f"exchange_recorder(): call {run.ctx.call_id} of run {run.ctx.run_id} "
            f"({run.spec.name}) {state}; only a running body records an exchange"
        )
    return recorder


async def record_exchange(
    method: str,
    *,
    request: Any = None,
    response: Any = None,
    error: str = "",
    peer: str = "",
) -> CallExchanged:
    """``exchange_recorder().record(...)``: one exchange of the running body's own call."""
    return await exchange_recorder().record(
        method, request=request, response=response, error=error, peer=peer
    )
