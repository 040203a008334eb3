"""Redaction by path: a field inside an argument (``card.number``), in lists too."""

from __future__ import annotations

import datetime
from typing import Any

import msgspec
import pytest

from agent_adapter import (
    CallbackApproval,
    CallContext,
    Decision,
    DeferredApproval,
    Executor,
    Registry,
    digest,
)
from agent_adapter.errors import ApprovalPending, ToolFailed, ToolUsageError
from agent_adapter.ledger import MemoryLedger

NUMBER = "4111111111111111"


class Card(msgspec.Struct):
    number: str
    brand: str


def _tools(seen: list[Any]) -> Registry:
    registry = Registry()

    @registry.tool(redact=["card.number"])
    async def charge(card: Card, amount: int) -> str:
        seen.append((card, amount))
        if amount < 0:
            raise ValueError(f"card {card.number} ({card!r}) declined")
        return "charged"

    @registry.tool(redact=["cards.number"])
    async def split(cards: list[Card], amount: int) -> str:
        seen.append((cards, amount))
        return "split"

    return registry


def _requested(ledger: MemoryLedger, call_id: str) -> Any:
    for record in ledger.records:
        if record.call_id == call_id and record.type == "call.requested":
            return msgspec.json.decode(record.payload)["args"]
    raise AssertionError(call_id)


async def test_a_field_is_redacted_in_the_ledger_and_runs_as_given() -> None:
    seen: list[Any] = []
    ledger = MemoryLedger()
    executor = Executor(_tools(seen), ledger=ledger)
    raw = '{"card": {"number": "' + NUMBER + '", "brand": "visa"}, "amount": 5}'
    as_dict = {"card": Card(number=NUMBER, brand="visa"), "amount": 5}
    await executor.call("charge", raw, run_id="r", call_id="text")
    await executor.call("charge", as_dict, run_id="r", call_id="dict")
    shown = {"card": {"number": "[redacted]", "brand": "visa"}, "amount": 5}
    assert (_requested(ledger, "text"), _requested(ledger, "dict")) == (shown, shown)
    assert seen == [(Card(NUMBER, "visa"), 5)] * 2
    validated = [e.digest async for e in ledger.read() if e.type == "call.validated"]
    real = digest({"card": {"number": NUMBER, "brand": "visa"}, "amount": 5})
    assert validated == [real, real]  # the digest covers the redacted value
    assert NUMBER.encode() not in b"".join(r.payload for r in ledger.records)


async def test_a_path_through_a_list_redacts_every_element() -> None:
    seen: list[Any] = []
    ledger = MemoryLedger()
    executor = Executor(_tools(seen), ledger=ledger)
    cards = [{"number": NUMBER, "brand": "visa"}, {"number": "5500000000000004", "brand": "mc"}]
    await executor.call("split", {"cards": cards, "amount": 2}, run_id="r", call_id="c")
    assert _requested(ledger, "c") == {
        "cards": [
            {"number": "[redacted]", "brand": "visa"},
            {"number": "[redacted]", "brand": "mc"},
        ],
        "amount": 2,
    }


async def test_an_error_quoting_the_field_is_scrubbed() -> None:
    ledger = MemoryLedger()
    executor = Executor(_tools([]), ledger=ledger)
    with pytest.raises(ToolFailed):
        await executor.call(
            "charge",
            {"card": {"number": NUMBER, "brand": "visa"}, "amount": -1},
            run_id="r",
            call_id="c",
        )
    failed = [e async for e in ledger.read() if e.type == "call.failed"]
    assert "[redacted]" in failed[0].error and NUMBER not in failed[0].error
    assert NUMBER.encode() not in b"".join(r.payload for r in ledger.records)


async def test_an_edit_that_leaves_the_placeholder_keeps_the_value() -> None:
    """The reviewer changed the brand and left the number as shown: the number stays."""
    seen: list[Any] = []
    registry = Registry()

    @registry.tool(redact=["card.number"], confirm=True)
    async def charge(card: Card, amount: int) -> str:
        seen.append((card, amount))
        return "charged"

    def review(request: Any) -> Decision:
        edited = msgspec.to_builtins(request.args)
        edited["card"] = {"number": "[redacted]", "brand": "amex"}
        return Decision(approved=True, reviewer="ops", edits=edited)

    executor = Executor(registry, approval=CallbackApproval(review))
    args = {"card": {"number": NUMBER, "brand": "visa"}, "amount": 5}
    assert await executor.call("charge", args, run_id="r", call_id="c") == "charged"
    assert seen == [(Card(NUMBER, "amex"), 5)]


async def test_an_answer_through_the_ledger_may_not_set_a_redacted_field() -> None:
    registry = Registry()

    @registry.tool(redact=["card.number"], confirm=True)
    async def charge(card: Card, amount: int) -> str:
        return "charged"

    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger, approval=deferred)
    args = {"card": {"number": NUMBER, "brand": "visa"}, "amount": 5}
    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(charge, args, CallContext(run_id="r", call_id="c"))
    (pending,) = await deferred.pending()
    assert pending.args["card"] == {"number": "[redacted]", "brand": "visa"}
    with pytest.raises(ToolUsageError, match=r"card\.number"):
        await deferred.answer(
            info.value.request_id,
            approved=True,
            reviewer="ops",
            edits={"card": {"number": "4000000000000002", "brand": "visa"}, "amount": 5},
        )
    # Leaving the placeholder is allowed, and the requested number is what runs.
    await deferred.answer(
        info.value.request_id,
        approved=True,
        reviewer="ops",
        edits={"card": {"number": "[redacted]", "brand": "visa"}, "amount": 4},
    )
    assert await executor.run_spec(charge, args, CallContext(run_id="r", call_id="c2")) == (
        "charged"
    )
    assert NUMBER.encode() not in b"".join(r.payload for r in ledger.records)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"redact": ["card..number"]}, "is not an argument name or a dotted path"),
        ({"redact": ["wallet.number"]}, r"redact names unknown arguments \['wallet'\]"),
        (
            {"redact": ["card.number"], "effect": "charge:{card}"},
            r"effect template names redacted arguments \['card'\]",
        ),
        ({"redact": ["card.numbr"]}, r"'card.numbr' names no field of the argument 'card'"),
        ({"redact": ["amount.cents"]}, r"'amount.cents' names no field"),
    ],
)
def test_bad_paths_are_refused_at_registration(options: dict[str, Any], message: str) -> None:
    registry = Registry()

    async def charge(card: Card, amount: int) -> str:
        return "charged"

    with pytest.raises(ToolUsageError, match=message):
        registry.tool(charge, **options)


class Camel(msgspec.Struct, rename="camel"):
    card_number: str
    brand: str


def test_paths_are_checked_by_encoded_names_and_through_lists_and_schemas() -> None:
    """What the arguments hold as JSON is what a path names (``cardNumber``, not the field)."""
    registry = Registry()

    async def pay(card: Camel, history: list[Camel], amount: int) -> str:
        return "paid"

    registry.tool(pay, redact=["card.cardNumber", "history.cardNumber"])
    with pytest.raises(ToolUsageError, match="names no field"):
        registry.tool(pay, name="pay2", redact=["card.card_number"])
    schema = {
        "type": "object",
        "properties": {
            "card": {"type": "object", "properties": {"number": {"type": "string"}}},
            "tags": {"type": "object"},  # an open object: any field
        },
    }
    registry.add_schema_tool("mcp_pay", schema, pay, redact=["card.number", "tags.secret"])
    with pytest.raises(ToolUsageError, match="names no field"):
        registry.add_schema_tool("mcp_pay2", schema, pay, redact=["card.pin"])


class Wallet(msgspec.Struct):
    pin: bytes
    opened: datetime.datetime


async def test_errors_quoting_non_json_values_are_scrubbed() -> None:
    """bytes and datetimes appear in messages as repr/str/decoded text, not as their JSON."""
    registry = Registry()

    @registry.tool(redact=["wallet.pin", "wallet.opened"])
    async def unlock(wallet: Wallet) -> str:
        raise ValueError(
            f"pin {wallet.pin!r} / {wallet.pin.decode()} refused; opened {wallet.opened} "
            f"({wallet.opened!r}, {wallet.opened.isoformat()})"
        )

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    opened = datetime.datetime(2031, 5, 6, 7, 8, tzinfo=datetime.UTC)
    with pytest.raises(ToolFailed):
        await executor.call(
            "unlock",
            {"wallet": Wallet(pin=b"hunter22", opened=opened)},
            run_id="r",
            call_id="c",
        )
    (failed,) = [e async for e in ledger.read() if e.type == "call.failed"]
    for secret in ("hunter22", "2031", "aHVudGVyMjI"):  # text, the date, base64 of the pin
        assert secret not in failed.error, failed.error
    assert b"hunter22" not in b"".join(r.payload for r in ledger.records)


async def test_an_answer_may_not_fill_in_a_redacted_field_the_request_did_not_have() -> None:
    """The request had no card (None): an edit that adds one with a number would write the
    number in clear in approval.answered."""
    registry = Registry()

    @registry.tool(redact=["card.number"], confirm=True)
    async def charge(card: Card | None, amount: int) -> str:
        return "charged"

    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger, approval=deferred)
    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(
            charge, {"card": None, "amount": 5}, CallContext(run_id="r", call_id="c")
        )
    with pytest.raises(ToolUsageError, match=r"\['card\.number'\]"):
        await deferred.answer(
            info.value.request_id,
            approved=True,
            reviewer="ops",
            edits={"card": {"number": NUMBER, "brand": "visa"}, "amount": 5},
        )
    assert NUMBER.encode() not in b"".join(r.payload for r in ledger.records)
