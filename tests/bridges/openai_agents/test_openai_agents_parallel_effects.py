"""Parallel tool calls on one effect key through the real SDK ``Runner.run``: the SDK
cancels sibling tool calls when one raises, and a charge under way is never left
ambiguous by that."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Runner
from openai_agents_helpers import CONFIG, assistant_message, function_call, make_agent

from agent_adapter import Executor, Registry
from agent_adapter.integrations.openai_agents import function_tools
from agent_adapter.ledger import MemoryLedger, replay


class Shop:
    """A slow charge (an effect key, its body gated like a payment API's round trip) and a
    tool that fails at once."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.ledger = MemoryLedger()
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.charged: list[str] = []

        @self.registry.tool(effect="charge:{order_id}")
        async def charge(order_id: str, amount_cents: int) -> str:
            self.charged.append(order_id)
            self.entered.set()
            await self.gate.wait()
            return f"charged {amount_cents} to {order_id}"

        @self.registry.tool
        async def lookup(order_id: str) -> str:
            raise RuntimeError("inventory service down")

        self.executor = Executor(self.registry, ledger=self.ledger)

    async def outcome(self, call_id: str) -> str | None:
        tags = [e.type async for e in self.ledger.read() if e.call_id == call_id and e.is_outcome]
        return tags[-1] if tags else None

    async def run(self, *calls: Any) -> BaseException | None:
        agent, _ = make_agent(
            function_tools(self.registry, executor=self.executor),
            list(calls),
            [assistant_message("done")],
        )
        try:
            await Runner.run(agent, "go", run_config=CONFIG)
        except Exception as exc:
            return exc
        return None

    async def settled(self, call_id: str) -> str:
        """The call's outcome once recorded (yielding to the loop, a bounded number of
        times: a cancelled sibling may finish after Runner.run has raised)."""
        for _ in range(10_000):
            tag = await self.outcome(call_id)
            if tag is not None:
                return tag
            await asyncio.sleep(0)
        raise AssertionError(f"{call_id} has no outcome")

    async def audit_clean(self) -> None:
        events = [e async for e in self.ledger.read()]
        assert replay(events, await self.ledger.verify()).problems() == []
        assert self.executor.ambiguous_effects() == {}


async def test_the_same_charge_twice_in_one_turn_runs_once_and_is_never_ambiguous() -> None:
    """The model asks for one charge twice in one turn while the first runs: the second
    waits for it and is refused as its duplicate; the first's success is recorded."""
    shop = Shop()
    args = {"order_id": "A1", "amount_cents": 500}

    async def release() -> None:
        await shop.entered.wait()
        for _ in range(20):  # let the second call reach the key and wait on it
            await asyncio.sleep(0)
        shop.gate.set()

    releasing = asyncio.ensure_future(release())
    error = await shop.run(
        function_call("charge", args, call_id="c_ch1"),
        function_call("charge", args, call_id="c_ch2"),
    )
    await releasing
    # The bridge raises the duplicate to the host (the SDK wraps it in its UserError).
    assert "already committed by call c_ch1" in str(error), error
    assert await shop.settled("c_ch1") == "call.succeeded"
    assert await shop.settled("c_ch2") == "call.duplicate"
    assert shop.charged == ["A1"]
    await shop.audit_clean()


async def test_a_failing_sibling_does_not_cut_a_charge_in_half() -> None:
    """A sibling tool that raises makes the SDK cancel the charge under way: the charge
    runs to its end and its success is recorded, the key committed, not ambiguous."""
    shop = Shop()

    async def release() -> None:
        await shop.entered.wait()
        await shop.settled("c_look")  # the sibling failed: the SDK cancels the charge
        for _ in range(20):
            await asyncio.sleep(0)
        shop.gate.set()

    releasing = asyncio.ensure_future(release())
    error = await shop.run(
        function_call("charge", {"order_id": "A1", "amount_cents": 500}, call_id="c_ch1"),
        function_call("lookup", {"order_id": "A1"}, call_id="c_look"),
    )
    await releasing
    assert await shop.settled("c_ch1") == "call.succeeded"
    assert await shop.outcome("c_look") == "call.failed"
    assert "inventory service down" in str(error), error
    assert shop.executor.effect_status("charge:A1") == "committed"
    await shop.audit_clean()
