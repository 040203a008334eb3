"""Proxied calls of 2026-07-28 clients that wait on their upstream's question.

That era has no server-to-client request inside a call: when a proxied call's upstream
asks (``elicitation/create``, ``sampling/createMessage``), the client's ``tools/call`` is
answered with an ``InputRequiredResult`` carrying the question, while the body (one
executor call: one ``call.started``, one outcome) keeps running with the upstream's
request open. The client's retry brings the answer and the ``requestState``; the state
names the waiting call in this table, and the answer goes to the waiting upstream
request. Then the next question, or the call's outcome, answers that retry.

Each question's state is single-use (a nonce, spent by the first answer). A question not
answered within the TTL is refused to the upstream (a JSON-RPC error, recorded as the
call's ``call.exchanged``; the upstream decides what its tool does then), the call
leaves the table, and a late retry is a JSON-RPC error: it never reaches the upstream.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import mcp_types as types
import msgspec
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from ._relay import Downstream, _dump

__all__ = ["Asking", "NoAnswer", "WaitState", "WaitingCall", "WaitingCalls", "read_wait_state"]

#: The refusal of a state whose call is no longer waiting for it (a replay, a late retry).
_GONE = "requestState already used, expired, or its call has ended"


class WaitState(msgspec.Struct, frozen=True, kw_only=True):
    """The ``requestState`` of a call waiting on its upstream (sealed by the SDK's boundary).

    ``waiting`` names the call in the table; ``nonce`` the question (spent by the first
    answer); the ids say which executor call it is.
    """

    waiting: str
    nonce: str
    call_id: str
    run_id: str

    def dump(self) -> str:
        """The plaintext the boundary seals."""
        return msgspec.json.encode(self).decode()


def read_wait_state(plain: str) -> WaitState | None:
    """The state of a waiting call's question, else None (another kind of state)."""
    try:
        return msgspec.json.decode(plain, type=WaitState)
    except msgspec.DecodeError:
        return None


class NoAnswer(Exception):
    """A waiting question will not be answered (its TTL passed, or the server shuts down)."""


class _Question:
    """One upstream request waiting for the client's answer."""

    def __init__(self, key: str, request: Any, result_type: type[Any]) -> None:
        self.key = key
        self.request = request
        self.result_type = result_type
        self.answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()


class Asking(Downstream):
    """A 2026-07-28 client's side of a proxied call: questions wait for its retry.

    Between the client's requests nobody is attached: progress and log lines of that
    time have no request to ride on and are dropped.
    """

    def __init__(self, ctx: Any, call: WaitingCall) -> None:
        super().__init__(ctx)
        self.call = call
        self.attached = True

    def attach(self, ctx: Any) -> None:
        """The client's retry carries the call on: its request is the one served now."""
        fresh = Downstream(ctx)
        self.session, self.request_id = fresh.session, fresh.request_id
        self.progress_token = fresh.progress_token
        # (The connection is read again, from this request's session, when next routed.)
        self.__dict__.pop("connection", None)
        self.attached = True

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self.attached:
            await super().progress(progress, total, message)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if self.attached:
            await super().log(params)

    async def ask(self, method: str, request: Any, result_type: type[Any]) -> Any:
        """The upstream's request, answered by the client's retry (or refused), and
        recorded as the call's exchange before the upstream gets the reply."""
        params = _dump(request.params)
        refused = self.call.refusal()
        if refused is not None:
            return await self.record(
                method,
                params,
                types.ErrorData(code=types.INVALID_REQUEST, message=f"{method}: {refused}"),
                error=f"refused: {refused}",
            )
        try:
            answer = await self.call.ask(request, result_type)
        except NoAnswer as exc:
            return await self.record(
                method,
                params,
                types.ErrorData(code=types.REQUEST_TIMEOUT, message=f"{method}: {exc}"),
                error=str(exc),
            )
        return await self.record(method, params, answer, response=_dump(answer))


class WaitingCall:
    """One proxied call of a 2026-07-28 client: its body's task and its open question."""

    def __init__(self, table: WaitingCalls, tool: str, call_id: str, run_id: str) -> None:
        self.table = table
        self.id = uuid.uuid4().hex
        self.tool, self.call_id, self.run_id = tool, call_id, run_id
        self.task: asyncio.Task[Any] | None = None
        self.question: _Question | None = None
        #: the state of the question as sent to the client; None once spent (or unsent)
        self.nonce: str | None = None
        self.deadline = 0.0
        #: why no question of this call is answered any more (None while one can be)
        self.expired: str | None = None
        self._rounds = 0
        self._timer: asyncio.TimerHandle | None = None
        #: the client side the body serves (set by the table)
        self.asking: Asking | None = None
        #: set when the body asks or ends: the client's request then has its answer
        self._signal: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def bind(self, task: asyncio.Task[Any]) -> None:
        """The body runs in ``task``; when it ends the call leaves the table."""
        self.task = task
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self.table.calls.pop(self.id, None)
        self.asking = None
        if self._timer is not None:
            self._timer.cancel()
        self._wake()

    def _wake(self) -> None:
        if not self._signal.done():
            self._signal.set_result(None)

    def refusal(self) -> str | None:
        """Why a question asked now is refused at once; None when it can wait."""
        if self.expired is not None:
            return self.expired
        if self.question is not None:
            # One question at a time: the client answers one InputRequiredResult per round.
            return "another question of this call is waiting"
        return None

    async def ask(self, request: Any, result_type: type[Any]) -> Any:
        """The upstream's request, held open until the client's retry answers it.

        Raises ``NoAnswer`` when the question expires first.
        """
        self._rounds += 1
        question = _Question(f"upstream-{self._rounds}", request, result_type)
        self.question = question
        self.deadline = self.table.clock() + self.table.ttl_s
        self._arm(self.table.ttl_s)
        self._wake()
        try:
            return await question.answer
        finally:
            self.question = None
            self.nonce = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _arm(self, delay_s: float) -> None:
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._due)

    def _due(self) -> None:
        # A loop timer may fire up to its clock's resolution early (and the table's clock
        # need not be the loop's): not yet due is armed again for the rest.
        self._timer = None
        if self.question is None or self.expired is not None:
            return
        left = self.deadline - self.table.clock()
        if left > 0:
            self._arm(left)
        else:
            self.expire(self.table.late())

    async def next(self) -> types.InputRequiredResult | None:
        """The question to send the client now, or None when the body has ended."""
        assert self.task is not None
        # Not cancelled with the client's request: a client that goes away leaves the body
        # running, and its question waits for the TTL (or the call's timeout).
        await asyncio.wait([self.task, self._signal], return_when=asyncio.FIRST_COMPLETED)
        question = self.question
        if self.task.done() or question is None or self.expired is not None:
            return None
        self._signal = asyncio.get_running_loop().create_future()
        self.nonce = uuid.uuid4().hex
        if self.asking is not None:
            self.asking.attached = False
        state = WaitState(
            waiting=self.id, nonce=self.nonce, call_id=self.call_id, run_id=self.run_id
        )
        return types.InputRequiredResult(
            input_requests={question.key: question.request}, request_state=state.dump()
        )

    def expire(self, why: str) -> None:
        """Nobody answers any more: the open question (and any later one) is refused."""
        self.table.calls.pop(self.id, None)
        self.expired = why
        self.nonce = None
        question = self.question
        if question is not None and not question.answer.done():
            question.answer.set_exception(NoAnswer(why))


class WaitingCalls:
    """The table of 2026-07-28 proxied calls in flight, keyed by the id in their state."""

    def __init__(self, *, ttl_s: float, clock: Callable[[], float]) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self.calls: dict[str, WaitingCall] = {}

    def open(self, ctx: Any, tool: str, call_id: str, run_id: str) -> tuple[WaitingCall, Asking]:
        """A new waiting call and the client side its body serves."""
        call = WaitingCall(self, tool, call_id, run_id)
        call.asking = Asking(ctx, call)
        self.calls[call.id] = call
        return call, call.asking

    def late(self) -> str:
        """Why a question past its TTL is refused."""
        return f"the client did not answer within {self.ttl_s:g} s"

    def sweep(self) -> None:
        """Refuse every question whose TTL has passed (by the table's clock)."""
        now = self.clock()
        for call in list(self.calls.values()):
            if call.question is not None and now >= call.deadline:
                call.expire(self.late())

    def expire_all(self) -> None:
        """Refuse every open question (the server is shutting down: no retry can come)."""
        for call in list(self.calls.values()):
            call.expire("the gateway is shutting down; no answer can reach it")

    def answer(self, state: WaitState, tool: str, responses: Any, ctx: Any) -> WaitingCall:
        """Hand the client's answer to the waiting upstream request; the state is spent.

        Raises ``MCPError`` (INVALID_PARAMS) and hands nothing on for a state whose call is
        not waiting for it (used, expired, ended, another tool's) and for a retry without
        a readable answer (the state is then not spent: the client may answer again).
        """
        call = self.calls.get(state.waiting)
        if (
            call is None
            or call.nonce is None
            or call.nonce != state.nonce
            or call.tool != tool
            or (call.call_id, call.run_id) != (state.call_id, state.run_id)
        ):
            raise MCPError(code=types.INVALID_PARAMS, message=_GONE)
        question = call.question
        assert question is not None  # a nonce is set only while its question is open
        if self.clock() >= call.deadline:
            call.expire(self.late())
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"requestState expired: the question waited more than {self.ttl_s:g} s",
            )
        raw = (responses or {}).get(question.key)
        if raw is None:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"inputResponses has no answer to {question.key!r}",
            )
        try:
            answer = question.result_type.model_validate(_dump(raw))
        except ValidationError:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"inputResponses[{question.key!r}] is not an answer to "
                f"{question.request.method}",
            ) from None
        # Spent before the answer is handed on (no await in between): a second retry with
        # this state finds no nonce.
        call.nonce = None
        if call.asking is not None:
            call.asking.attach(ctx)
        question.answer.set_result(answer)
        return call
