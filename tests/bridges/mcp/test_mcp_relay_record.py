"""The relay hands an upstream's question on, and its answer back, only once on record."""

from __future__ import annotations

import gc
from typing import Any

import mcp_types as types

from agent_adapter.bridges.mcp._relay import Downstream, Relay
from agent_adapter.errors import LedgerError


class Session:
    """A client session that answers every request with ``answer`` (a fake, no transport)."""

    client_capabilities = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    client_params = types.InitializeRequestParams(
        protocol_version="2025-11-25",
        capabilities=types.ClientCapabilities(),
        client_info=types.Implementation(name="desk", version="2.1"),
    )

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def send_request(self, request: Any, result_type: Any, metadata: Any = None) -> Any:
        return self.answer


class Context:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.request_id = 7
        self.meta = None


class Recorder:
    """Records like ``ExchangeRecorder``; ``fail`` makes it refuse as a failing ledger."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.recorded: list[dict[str, Any]] = []

    async def record(self, method: str, **fields: Any) -> None:
        if self.fail:
            raise LedgerError("ledger x is closed")
        self.recorded.append({"method": method, **fields})


def elicitation() -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message="go?", requested_schema={"type": "object", "properties": {}}
        )
    )


async def test_an_answer_is_recorded_with_its_question_and_the_client_named() -> None:
    """The answer goes back to the upstream after the exchange is recorded, whole."""
    answer = types.ElicitResult(action="accept", content={})
    downstream = Downstream(Context(Session(answer)))
    recorder = Recorder()
    downstream.recorder = recorder  # type: ignore[assignment]
    got = await downstream.ask("elicitation/create", elicitation(), types.ElicitResult)
    assert got is answer
    assert recorder.recorded == [
        {
            "method": "elicitation/create",
            "request": {
                "mode": "form",
                "message": "go?",
                "requestedSchema": {"type": "object", "properties": {}},
            },
            "response": {"action": "accept", "content": {}},
            "error": "",
            "peer": "desk 2.1",
        }
    ]


async def test_an_answer_that_cannot_be_recorded_is_not_handed_on() -> None:
    """A failing ledger: the upstream gets an error naming why, never the answer."""
    answer = types.ElicitResult(action="accept", content={})
    downstream = Downstream(Context(Session(answer)))
    downstream.recorder = Recorder(fail=True)  # type: ignore[assignment]
    got = await downstream.ask("elicitation/create", elicitation(), types.ElicitResult)
    assert got == types.ErrorData(
        code=types.INTERNAL_ERROR,
        message="elicitation/create: the exchange could not be recorded (ledger x is closed); "
        "not relayed",
    )


class Connection:
    """A client connection (a fake): what ``Relay.attach`` reads of one."""

    protocol_version = "2025-11-25"


def waiting(relay: Relay, connection: Connection, answer: Any) -> Recorder:
    """A call of ``connection`` waiting on ``relay``; returns its recorder."""
    downstream = Downstream(Context(Session(answer)))
    downstream.__dict__["connection"] = connection  # (the cached property's value)
    recorder = Recorder()
    downstream.recorder = recorder  # type: ignore[assignment]
    relay.enter(downstream)
    return recorder


async def test_a_question_while_two_calls_of_one_client_wait_is_recorded_in_neither() -> None:
    """The upstream's request names no call: with two waiting, which one asked is unknown,
    so it is refused, never recorded as an exchange of a call that may not have asked."""
    relay = Relay()
    client = Connection()
    answer = types.ElicitResult(action="accept", content={})
    first = waiting(relay, client, answer)
    second = waiting(relay, client, answer)
    got = await relay._elicit(None, elicitation().params)
    assert isinstance(got, types.ErrorData)
    assert got.code == types.INVALID_REQUEST
    assert (first.recorded, second.recorded) == ([], [])


class Listening(Connection):
    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self.lines: list[Any] = []

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        self.lines.append(data)


async def test_a_log_line_outside_a_call_never_reaches_the_client_after_another_left() -> None:
    """Over HTTP one upstream connection serves client after client: a line no call
    waits for may be about the one that left, so the one still there never gets it."""
    relay = Relay()
    alone = Listening()
    relay.attach(alone)
    line = types.LoggingMessageNotificationParams(level="info", data="for the one client")
    await relay._log(line)
    assert alone.lines == ["for the one client"]  # (stdio: its one client gets it)
    relay.attach(alone)  # (the same client again, on its next request)
    gone, stays = Listening(), Listening()
    relay = Relay()
    relay.attach(gone)
    relay.attach(stays)
    del gone
    gc.collect()
    await relay._log(types.LoggingMessageNotificationParams(level="info", data="gone's"))
    assert stays.lines == []


async def test_after_a_call_left_unanswered_a_question_is_refused_even_with_one_waiting() -> None:
    """A call that stopped waiting before the upstream answered (``abandon``) may still be
    asked for later: the one call waiting then is not told, nor is it recorded in it."""
    relay = Relay()
    answer = types.ElicitResult(action="accept", content={})
    relay.abandon(None)
    alone = waiting(relay, Connection(), answer)
    got = await relay._elicit(None, elicitation().params)
    assert isinstance(got, types.ErrorData)
    assert got.code == types.INVALID_REQUEST
    assert "ended before the upstream answered it" in got.message
    assert alone.recorded == []


class Logged(Session):
    """A client session that keeps the log lines sent to it."""

    def __init__(self) -> None:
        super().__init__(None)
        self.lines: list[Any] = []

    async def send_log_message(self, level: str, data: Any, logger: Any, **_: Any) -> None:
        self.lines.append(data)


def call_of(relay: Relay, connection: Listening) -> tuple[Downstream, Logged]:
    session = Logged()
    downstream = Downstream(Context(session))
    downstream.__dict__["connection"] = connection
    relay.enter(downstream)
    return downstream, session


async def test_after_a_call_left_unanswered_its_clients_log_lines_reach_no_other_client() -> None:
    """A log line names no call either: once one of client A's calls was abandoned, a line
    may be about it, so while only client B's call waits it is dropped; A's next call
    still gets the lines (it is the client the abandoned call was of)."""
    relay = Relay()
    a, b = Listening(), Listening()
    first, _ = call_of(relay, a)
    relay.abandon(first)
    _, seen_by_b = call_of(relay, b)
    await relay._log(types.LoggingMessageNotificationParams(level="info", data="about A's"))
    assert seen_by_b.lines == []
    relay = Relay()
    first, _ = call_of(relay, a)
    relay.abandon(first)
    _, seen_by_a = call_of(relay, a)
    await relay._log(types.LoggingMessageNotificationParams(level="info", data="for A"))
    assert seen_by_a.lines == ["for A"]
