"""``call.exchanged``: what a running body asked and was answered mid-call, in its call."""

from __future__ import annotations

import asyncio
import contextvars
from pathlib import Path
from typing import Any

import pytest

from agent_adapter import CallContext, Executor, Registry, digest
from agent_adapter.engine import ExchangeRecorder, exchange_recorder, record_exchange
from agent_adapter.errors import ToolUsageError
from agent_adapter.ledger import CallExchanged, Event, MemoryLedger, SQLiteLedger, replay


async def events_of(ledger: Any, **kwargs: Any) -> list[Event]:
    return [e async for e in ledger.read(**kwargs)]


def shape(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.type, getattr(e, "method", "")) for e in events]


async def test_exchanges_are_events_of_the_call_in_order_and_replay_gives_the_same_value(
    clock: Any,
) -> None:
    """Between call.started and the outcome, one per exchange; a repeat asks nobody."""
    registry = Registry()
    asked: list[str] = []

    @registry.tool()
    async def survey(question: str) -> str:
        asked.append(question)
        await record_exchange(
            "elicitation/create", request={"message": question}, response={"action": "accept"}
        )
        await record_exchange("sampling/createMessage", request={"n": 1}, error="refused: no")
        return "done"

    ledger = MemoryLedger()
    async with Executor(registry, ledger=ledger, clock=clock) as executor:
        ctx = CallContext(run_id="r", call_id="c")
        assert await executor.run_spec(registry.get("survey"), {"question": "ok?"}, ctx) == "done"
        assert await executor.run_spec(registry.get("survey"), {"question": "ok?"}, ctx) == "done"
    events = await events_of(ledger)
    assert shape(events) == [
        ("call.requested", ""),
        ("call.validated", ""),
        ("call.started", ""),
        ("call.exchanged", "elicitation/create"),
        ("call.exchanged", "sampling/createMessage"),
        ("call.succeeded", ""),
        ("call.replayed", ""),
    ]
    assert events[3] == CallExchanged(
        seq=4,
        ts=events[3].ts,
        run_id="r",
        call_id="c",
        tool="survey",
        prev=events[2].hash,
        hash=events[3].hash,
        method="elicitation/create",
        request={"message": "ok?"},
        response={"action": "accept"},
    )
    assert (events[4].response, events[4].error) == (None, "refused: no")  # type: ignore[attr-defined]
    assert asked == ["ok?"]
    audit = replay(events)
    assert audit.problems() == []
    assert [e.seq for e in audit.call("r", "c").exchanges] == [4, 5]
    assert (await ledger.verify()).ok


async def test_a_write_ahead_exchange_is_durable_before_record_returns(tmp_path: Path) -> None:
    """Another reader of the file sees the exchange while the body still runs."""
    path = tmp_path / "ledger.db"
    registry = Registry()
    seen: list[list[tuple[str, str]]] = []

    @registry.tool()
    async def ask() -> str:
        await record_exchange("elicitation/create", request={"message": "go?"}, response="yes")
        reader = SQLiteLedger(path)
        try:
            seen.append(shape(await events_of(reader)))
        finally:
            await reader.close()
        return "ok"

    ledger = SQLiteLedger(path)
    async with Executor(registry, ledger=ledger) as executor:
        await executor.call("ask", {}, run_id="r", call_id="c")
    await ledger.close()
    assert seen == [
        [
            ("call.requested", ""),
            ("call.validated", ""),
            ("call.started", ""),
            ("call.exchanged", "elicitation/create"),
        ]
    ]


async def test_durability_outcome_commits_the_exchange_with_the_outcome(tmp_path: Path) -> None:
    """The spec asked for one commit per call: nothing of it is on disk mid-body."""
    path = tmp_path / "ledger.db"
    registry = Registry()
    seen: list[list[Event]] = []

    @registry.tool(durability="outcome")
    async def ask() -> str:
        await record_exchange("elicitation/create", request={"message": "go?"}, response="yes")
        reader = SQLiteLedger(path)
        try:
            seen.append(await events_of(reader))
        finally:
            await reader.close()
        return "ok"

    ledger = SQLiteLedger(path)
    async with Executor(registry, ledger=ledger) as executor:
        await executor.call("ask", {}, run_id="r", call_id="c")
        events = await events_of(ledger)
    await ledger.close()
    assert seen == [[]]
    assert [e.type for e in events] == [
        "call.requested",
        "call.validated",
        "call.started",
        "call.exchanged",
        "call.succeeded",
    ]
    assert replay(events).problems() == []


async def test_recording_outside_a_running_body_is_refused_and_records_nothing() -> None:
    """No call, a hook before the body, a recorder kept past the outcome: ToolUsageError."""
    registry = Registry()
    kept: list[ExchangeRecorder] = []
    refused: list[str] = []

    class Early:
        async def before_tool(self, call: Any) -> None:
            try:
                exchange_recorder()
            except ToolUsageError as exc:
                refused.append(str(exc))

    @registry.tool()
    async def ask() -> str:
        kept.append(exchange_recorder())
        return "ok"

    with pytest.raises(ToolUsageError, match="outside a running tool body"):
        await record_exchange("elicitation/create")
    ledger = MemoryLedger()
    async with Executor(registry, ledger=ledger, hooks=[Early()]) as executor:
        await executor.call("ask", {}, run_id="r", call_id="c")
        (recorder,) = kept
        assert not recorder.open
        with pytest.raises(ToolUsageError, match="has ended: its outcome is recorded"):
            await recorder.record("elicitation/create", request={"late": True})
    assert refused == [
        "exchange_recorder(): call c of run r (ask) has not started its body; only a "
        "running body records an exchange"
    ]
    assert "call.exchanged" not in [e.type for e in await events_of(ledger)]


async def test_bad_fields_are_refused_before_anything_is_recorded() -> None:
    """A method that is not text, or none at all: a clear error, the call goes on."""
    registry = Registry()
    errors: list[str] = []

    @registry.tool()
    async def ask() -> str:
        for method in (7, ""):
            try:
                await record_exchange(method)  # type: ignore[arg-type]
            except ToolUsageError as exc:
                errors.append(str(exc))
        return "ok"

    ledger = MemoryLedger()
    async with Executor(registry, ledger=ledger) as executor:
        assert await executor.call("ask", {}) == "ok"
    assert errors == [
        "method must be text, not int",
        "an exchange needs a method naming what was asked",
    ]
    assert "call.exchanged" not in [e.type for e in await events_of(ledger)]


async def test_a_recorder_taken_in_the_body_records_from_another_task() -> None:
    """A protocol client's callback runs in its own task: the recorder is bound to the
    call, not to the context; several exchanges at once all land, each once."""
    registry = Registry()
    gate = asyncio.Event()

    @registry.tool()
    async def ask() -> str:
        recorder = exchange_recorder()

        async def callback(n: int) -> None:
            await gate.wait()
            await recorder.record("sampling/createMessage", request={"n": n}, response=n)

        # (A fresh context, as a protocol client's receive loop has: no running call.)
        tasks = [asyncio.create_task(callback(n), context=contextvars.Context()) for n in range(3)]
        gate.set()
        await asyncio.gather(*tasks)
        return "ok"

    ledger = MemoryLedger()
    seen: list[str] = []

    class Watch:
        def on_event(self, event: Event) -> None:
            seen.append(event.type)

    async with Executor(registry, ledger=ledger, hooks=[Watch()]) as executor:
        await executor.call("ask", {}, run_id="r", call_id="c")
    events = await events_of(ledger)
    exchanged = [e for e in events if isinstance(e, CallExchanged)]
    assert sorted(e.request["n"] for e in exchanged) == [0, 1, 2]
    assert [e.type for e in events][-1] == "call.succeeded"
    assert seen.count("call.exchanged") == 3  # observers (OTel, subscribers) see each
    assert replay(events).problems() == []


async def test_redaction_applies_to_what_was_exchanged() -> None:
    """Redacted argument values are scrubbed from the exchange; redact_result keeps only
    digests of what was said."""
    registry = Registry()

    @registry.tool(redact=["card"])
    async def pay(card: str, amount: int) -> str:
        await record_exchange(
            "elicitation/create",
            request={"message": f"charge card {card}?", card: "key"},
            response={"action": "accept"},
            peer=f"client with {card}",
        )
        return "paid"

    @registry.tool(redact_result=True)
    async def secret() -> str:
        await record_exchange("elicitation/create", request={"q": 1}, response={"a": 2})
        return "hidden"

    ledger = MemoryLedger()
    async with Executor(registry, ledger=ledger) as executor:
        await executor.call("pay", {"card": "4111-1111", "amount": 5})
        await executor.call("secret", {})
    paid, hidden = [e for e in await events_of(ledger) if isinstance(e, CallExchanged)]
    assert (paid.request, paid.peer) == (
        {"message": "charge card [redacted]?", "[redacted]": "key"},
        "client with [redacted]",
    )
    assert (hidden.request, hidden.response, hidden.redacted) == (None, None, True)
    assert (hidden.request_digest, hidden.response_digest) == (digest({"q": 1}), digest({"a": 2}))


async def test_a_redacted_number_is_scrubbed_from_what_was_exchanged() -> None:
    """A redacted argument that is a number is not text: the exchange's number that is
    it is redacted as well, not stored as it was (other numbers stay)."""
    registry = Registry()

    @registry.tool(redact=["account"])
    async def transfer(account: int, amount: int) -> str:
        await record_exchange(
            "elicitation/create",
            request={"from": account, "amount": amount, "message": f"from {account}?"},
            response={"action": "accept", "content": {"account": account}},
        )
        return "sent"

    ledger = MemoryLedger()
    async with Executor(registry, ledger=ledger) as executor:
        await executor.call("transfer", {"account": 12345678, "amount": 5})
    (exchanged,) = [e for e in await events_of(ledger) if isinstance(e, CallExchanged)]
    assert exchanged.request == {"from": "[redacted]", "amount": 5, "message": "from [redacted]?"}
    assert exchanged.response == {"action": "accept", "content": {"account": "[redacted]"}}
    assert "12345678" not in repr(await events_of(ledger))
