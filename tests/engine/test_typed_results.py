"""A cached or replayed value comes back as the tool's declared return type, not as JSON."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

import msgspec
from _helpers import timeline

from agent_adapter import CallContext, Executor, Registry
from agent_adapter.ledger import SQLiteLedger


class Order(msgspec.Struct):
    id: str
    total: float
    placed: datetime.datetime


@dataclasses.dataclass
class Stock:
    sku: str
    left: int


PLACED = datetime.datetime(2026, 11, 30, 9, 30, tzinfo=datetime.UTC)


def _registry(ran: list[str]) -> Registry:
    registry = Registry()

    @registry.tool(cache=60)
    async def order(order_id: str) -> Order:
        ran.append("order")
        return Order(id=order_id, total=9.5, placed=PLACED)

    @registry.tool(cache=60)
    def stock(sku: str) -> list[Stock]:
        ran.append("stock")
        return [Stock(sku=sku, left=3)]

    @registry.tool(cache=60)
    async def liar(x: int) -> str:
        ran.append("liar")
        return x  # type: ignore[return-value]  # breaks its own annotation

    @registry.tool(cache=60)
    async def untyped(x: int):  # type: ignore[no-untyped-def]
        ran.append("untyped")
        return {"x": x}

    return registry


async def _calls(executor: Executor, call_ids: tuple[str, ...]) -> list[Any]:
    out = []
    for call_id in call_ids:
        out.append(await executor.call("order", {"order_id": "A1"}, run_id="r", call_id=call_id))
        out.append(await executor.call("stock", {"sku": "S1"}, run_id="r", call_id=call_id + "s"))
        out.append(await executor.call("liar", {"x": 7}, run_id="r", call_id=call_id + "l"))
        out.append(await executor.call("untyped", {"x": 1}, run_id="r", call_id=call_id + "u"))
    return out


EXPECTED = [
    Order(id="A1", total=9.5, placed=PLACED),
    [Stock(sku="S1", left=3)],
    7,
    {"x": 1},
]


async def test_cache_hits_and_replays_return_the_declared_type() -> None:
    ran: list[str] = []
    executor = Executor(_registry(ran))
    first = await _calls(executor, ("c1",))  # runs the bodies
    hits = await _calls(executor, ("c2",))  # cache hits
    replays = await _calls(executor, ("c1",))  # the same call ids again: replayed
    assert (first, hits, replays) == (EXPECTED, EXPECTED, EXPECTED)
    assert ran == ["order", "stock", "liar", "untyped"]


async def test_after_a_restart_too(tmp_path: Path) -> None:
    ran: list[str] = []
    async with Executor(_registry(ran), ledger=SQLiteLedger(tmp_path / "l.db")) as executor:
        await _calls(executor, ("c1",))
    async with Executor(_registry(ran), ledger=SQLiteLedger(tmp_path / "l.db")) as executor:
        assert await _calls(executor, ("c2", "c1")) == EXPECTED + EXPECTED
    assert ran == ["order", "stock", "liar", "untyped"]


async def test_the_ledger_keeps_the_json_form() -> None:
    """What is recorded does not change: the outcome events hold the JSON value."""
    ran: list[str] = []
    executor = Executor(_registry(ran))
    await executor.run_spec(
        executor.registry.get("order"), {"order_id": "A1"}, CallContext(run_id="r", call_id="c1")
    )
    await executor.run_spec(
        executor.registry.get("order"), {"order_id": "A1"}, CallContext(run_id="r", call_id="c2")
    )
    results = [
        e.result
        async for e in executor.ledger.read()
        if e.type in ("call.succeeded", "call.cached")
    ]
    assert results == [{"id": "A1", "total": 9.5, "placed": "2026-11-30T09:30:00Z"}] * 2


class Checked(msgspec.Struct):
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise LookupError("negative")


async def test_a_value_that_breaks_its_annotation_comes_back_as_stored() -> None:
    """No lax conversion ("false" is not False) and no error from the type's own code:
    the hit returns the stored JSON and is recorded as call.cached like any other."""
    registry = Registry()

    @registry.tool(cache=60)
    async def flag(x: int) -> bool:
        return "false"  # type: ignore[return-value]

    @registry.tool(cache=60)
    async def checked(x: int) -> Checked:
        value = Checked(1)
        value.n = -1  # set after __post_init__ ran: rebuilding it from JSON raises
        return value

    executor = Executor(registry)
    flags = [
        await executor.call("flag", {"x": 1}, run_id="r", call_id=call_id)
        for call_id in ("f1", "f2")
    ]
    first = await executor.call("checked", {"x": 1}, run_id="r", call_id="k1")
    hit = await executor.call("checked", {"x": 1}, run_id="r", call_id="k2")
    assert (flags, first.n, hit) == (["false", "false"], -1, {"n": -1})
    kinds = [e.type async for e in executor.ledger.read(call_id="k2")]
    assert kinds == timeline("call.cached")
