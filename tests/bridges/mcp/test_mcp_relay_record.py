"""The relay hands an upstream's question on, and its answer back, only once on record."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from agent_adapter.bridges.mcp._relay import Downstream
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
