"""A started effect body is never cancelled half-way: a cancel is held until its outcome."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from _helpers import (
    every_call_has_one_outcome,  # noqa: F401 (a fixture)
    recorded,
    types,
)

from agent_adapter import CallContext, Executor, Registry
from agent_adapter.errors import DuplicateEffect, EffectInFlight, ToolError, ToolTimeout
from agent_adapter.ledger import MemoryLedger, SQLiteLedger, replay

pytestmark = pytest.mark.usefixtures("every_call_has_one_outcome")


class Charges:
    """A charge tool with an effect key whose body waits on a gate."""

    def __init__(
        self, ledger: Any = None, *, timeout: float | None = None, hooks: Any = ()
    ) -> None:
        self.registry = Registry()
        self.ledger = ledger if ledger is not None else MemoryLedger()
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.ran: list[str] = []
        self.fail = False

        @self.registry.tool(effect="charge:{order_id}", timeout=timeout)
        async def charge(order_id: str) -> str:
            self.ran.append(order_id)
            self.entered.set()
            await self.gate.wait()
            if self.fail:
                raise RuntimeError("gateway said 502")
            return f"charged {order_id}"

        self.spec = charge
        self.executor = Executor(self.registry, ledger=self.ledger, hooks=hooks)

    def start(self, call_id: str = "c1") -> asyncio.Task[Any]:
        ctx = CallContext(run_id="r1", call_id=call_id)
        return asyncio.ensure_future(self.executor.run_spec(self.spec, {"order_id": "A1"}, ctx))


async def test_cancel_is_delivered_after_the_success_is_recorded() -> None:
    """The caller's cancel waits for the body; the outcome is call.succeeded (key committed),
    and the caller then gets CancelledError."""
    c = Charges()
    task = c.start()
    await c.entered.wait()
    task.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    c.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await types(c.ledger) == [
        "call.requested",
        "call.validated",
        "effect.claimed",
        "call.started",
        "call.succeeded",
    ]
    assert c.executor.effect_status("charge:A1") == "committed"
    with pytest.raises(DuplicateEffect):
        await c.start("c2")
    assert c.ran == ["A1"]


async def test_a_second_cancel_is_held_too() -> None:
    """Two cancels while the body runs: still one body to its end, its failure recorded as
    call.failed (not call.cancelled), then CancelledError."""
    c = Charges()
    c.fail = True
    task = c.start()
    await c.entered.wait()
    task.cancel()
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()
    c.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await types(c.ledger))[-1] == "call.failed"
    audit = replay(await recorded(c.ledger))
    assert audit.call("r1", "c1").outcome == "call.failed"


async def test_after_tool_sees_the_real_outcome_before_the_cancel() -> None:
    """after_tool hooks run with the body's own outcome ("succeeded"), before the caller
    gets the held cancel."""
    seen: list[str] = []

    class Hook:
        def after_tool(self, call: Any, outcome: Any) -> None:
            seen.append(outcome.kind)

    c = Charges(hooks=[Hook()])
    task = c.start()
    await c.entered.wait()
    task.cancel()
    await asyncio.sleep(0)
    c.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["succeeded"]


async def test_the_timeout_still_cancels_the_body() -> None:
    """The engine's own deadline cancels a body on purpose, as before: call.timed_out
    (the key ambiguous), ToolTimeout to the caller."""
    c = Charges(timeout=0.05)
    with pytest.raises(ToolTimeout):
        await c.start()
    assert (await types(c.ledger))[-1] == "call.timed_out"
    assert c.executor.ambiguous_effects() == {"charge:A1": ("r1", "c1")}


async def test_a_cancel_during_the_timed_body_is_held_and_the_deadline_still_applies() -> None:
    """A caller's cancel during a timed body is held; the deadline then still ends the body
    (call.timed_out), and the caller gets CancelledError, its own cancel."""
    c = Charges(timeout=0.2)
    task = c.start()
    await c.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await types(c.ledger))[-1] == "call.timed_out"


async def test_a_cancel_in_the_write_ahead_is_held(tmp_path: Path) -> None:
    """On SQLite (the write-ahead suspends), a cancel that comes while call.started is
    being written is held through the body as well: the success is recorded."""
    ledger = SQLiteLedger(tmp_path / "l.db")
    c = Charges(ledger)
    c.gate.set()
    await c.executor.start()
    task = c.start()
    for _ in range(50):  # cancel as soon as the call has claimed the key, mid-append
        await asyncio.sleep(0)
        if c.executor.effect_status("charge:A1") != "unknown":
            break
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    kinds = await types(ledger)
    assert kinds[-1] == "call.succeeded", kinds
    assert replay([e async for e in ledger.read()]).problems() == []
    await c.executor.close()
    await ledger.close()


async def test_a_call_of_the_same_executor_waits_for_the_holder_and_is_a_duplicate() -> None:
    """A second call for a key its own executor holds in flight waits for that outcome and
    answers as a duplicate would (DuplicateEffect naming the holder's call); one body."""
    c = Charges()
    first = c.start("c1")
    await c.entered.wait()
    second = c.start("c2")
    for _ in range(5):
        await asyncio.sleep(0)
    assert not second.done()
    c.gate.set()
    assert await first == "charged A1"
    with pytest.raises(DuplicateEffect) as info:
        await second
    assert (info.value.call_id, info.value.same_args) == ("c1", True)
    assert c.ran == ["A1"]
    assert (await types(c.ledger, "c2"))[-1] == "call.duplicate"


async def test_a_waiting_call_runs_when_the_holders_failure_frees_the_key() -> None:
    """The holder's ToolError frees the key: the waiting call then claims it and runs."""

    registry = Registry()
    gate, entered = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    @registry.tool(effect="charge:{order_id}")
    async def charge(order_id: str, n: int) -> str:
        ran.append(f"c{n}")
        entered.set()
        await gate.wait()
        if n == 1:
            raise ToolError("card declined: nothing charged")
        return f"charged {order_id}"

    ex = Executor(registry, ledger=MemoryLedger())
    first = asyncio.ensure_future(ex.call("charge", {"order_id": "A1", "n": 1}, call_id="c1"))
    await entered.wait()
    second = asyncio.ensure_future(ex.call("charge", {"order_id": "A1", "n": 2}, call_id="c2"))
    await asyncio.sleep(0)
    gate.set()
    with pytest.raises(ToolError):
        await first
    assert await second == "charged A1"
    assert ran == ["c1", "c2"]


async def test_an_in_flight_refusal_is_not_final_for_its_call_id() -> None:
    """Another executor's call meets the key in flight: EffectInFlight. The same (run, call)
    asked again decides again (in flight while the holder runs, then a duplicate once it
    committed), each attempt with its own call.requested and one outcome; the audit is
    clean, and a reopened executor replays the final answer."""
    c = Charges()
    other = Executor(c.registry, ledger=c.ledger)
    await other.start()
    ctx = CallContext(run_id="r1", call_id="c2")
    first = c.start("c1")
    await c.entered.wait()

    for _ in range(2):
        with pytest.raises(EffectInFlight):
            await other.run_spec(c.spec, {"order_id": "A1"}, ctx)
    c.gate.set()
    assert await first == "charged A1"
    with pytest.raises(DuplicateEffect) as info:
        await other.run_spec(c.spec, {"order_id": "A1"}, ctx)
    assert info.value.call_id == "c1"
    assert (await types(c.ledger, "c2")) == [
        "call.requested",
        "call.validated",
        "call.ambiguous",
        "call.requested",
        "call.validated",
        "call.ambiguous",
        "call.requested",
        "call.validated",
        "call.duplicate",
    ]
    audit = replay(await recorded(c.ledger))
    assert audit.problems() == []
    record = audit.call("r1", "c2")
    assert (record.attempts, record.outcome, record.outcomes) == (3, "call.duplicate", 1)
    # Final now: asked again (here, or by an executor opened on the ledger), it replays.
    reopened = await Executor.open(c.registry, ledger=c.ledger)
    with pytest.raises(DuplicateEffect):
        await reopened.run_spec(c.spec, {"order_id": "A1"}, ctx)
    assert (await types(c.ledger, "c2"))[-1] == "call.replayed"
    assert c.ran == ["A1"]
