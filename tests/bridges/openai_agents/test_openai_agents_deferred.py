"""``review_interruptions`` with ``DeferredApproval``: what is still pending, and a resolve loop
that waits for the reviewer instead of spinning."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from _helpers import CountingLedger
from agents import Runner
from openai_agents_helpers import (
    CONFIG,
    approvals_that_ran,
    assistant_message,
    call_types,
    function_call,
    make_agent,
    outputs,
)

from agent_adapter import DeferredApproval, Executor, Registry
from agent_adapter.errors import ToolArgsInvalid
from agent_adapter.integrations.openai_agents import (
    Review,
    function_tools,
    resolve_interruptions,
    review_interruptions,
)
from agent_adapter.ledger import MemoryLedger

APPROVED_AFTER_WAITING = [
    "approval.pending",
    "approval.answered",
    "approval.consumed",
    "call.requested",
    "call.validated",
    "approval.requested",
    "approval.granted",
    "call.started",
    "call.succeeded",
]


def build() -> tuple[Registry, list[dict[str, Any]]]:
    """A registry with one ``confirm=True`` refund; the list records the bodies that ran."""
    registry = Registry()
    ran: list[dict[str, Any]] = []

    @registry.tool(confirm=True)
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order."""
        ran.append({"order_id": order_id, "amount_cents": amount_cents})
        return f"refunded {amount_cents} on {order_id}"

    return registry, ran


def refund_call(order_id: str, call_id: str) -> Any:
    """The model's call of ``refund`` for 500 cents on ``order_id``."""
    return function_call("refund", {"order_id": order_id, "amount_cents": 500}, call_id=call_id)


async def paused(registry: Registry, executor: Executor, *calls: Any) -> tuple[Any, Any, Any]:
    """Run an agent whose first turn makes ``calls``; returns (agent, model, result)."""
    agent, model = make_agent(
        function_tools(registry, executor=executor), list(calls), [assistant_message("done")]
    )
    result = await Runner.run(agent, "Refund", run_config=CONFIG)
    return agent, model, result


async def events(ledger: MemoryLedger) -> list[tuple[str, str]]:
    """(type, call_id) of every event, in order."""
    return [(e.type, e.call_id) async for e in ledger.read()]


async def test_a_review_names_the_open_request_until_it_is_answered() -> None:
    """The first pass records the request and names it in ``pending``; another pass before the
    answer names the same request and records nothing; after the answer the call is approved,
    nothing is pending, and it runs once."""
    registry, ran = build()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await paused(registry, executor, refund_call("A1", "c1"))

    first = await review_interruptions(result, deferred, run_id="r-1")
    [open_request] = await deferred.pending()
    state = first.state
    assert first == Review(state=state, pending=(open_request.request_id,))
    assert [i.call_id for i in state.get_interruptions()] == ["c1"]

    before = await events(ledger)
    again = await review_interruptions(state, deferred, run_id="r-1")
    assert again == Review(state=state, pending=(open_request.request_id,))
    assert await events(ledger) == before

    await deferred.answer(open_request.request_id, approved=True, reviewer="alice")
    assert await review_interruptions(state, deferred, run_id="r-1") == Review(
        state=state, approved=("c1",)
    )
    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model) == {"c1": "refunded 500 on A1"}
    assert ran == [{"order_id": "A1", "amount_cents": 500}]
    assert await call_types(ledger, "c1") == APPROVED_AFTER_WAITING
    assert await approvals_that_ran(ledger) == {"c1": ("context", "alice", True)}


async def test_an_edit_of_a_bridge_request_is_checked_against_the_tools_schema() -> None:
    """A request the bridge asks records the tool's JSON schema (as the engine's do), so an
    edit that does not fit it is refused before anything is recorded, and a fitting one is
    recorded."""
    registry, ran = build()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger)
    _, _, result = await paused(registry, executor, refund_call("A1", "c1"))
    await review_interruptions(result, deferred, run_id="r-1")
    [request] = await deferred.pending()
    assert request.json_schema == registry.get("refund").json_schema
    before = await events(ledger)
    # (Edits replace the arguments entirely.)
    with pytest.raises(ToolArgsInvalid, match="amount_cents"):
        await deferred.answer(
            request.request_id,
            approved=True,
            reviewer="alice",
            edits={"order_id": "A1", "amount_cents": "abc"},
        )
    assert await events(ledger) == before
    await deferred.answer(
        request.request_id,
        approved=True,
        reviewer="alice",
        edits={"order_id": "A1", "amount_cents": 400},
    )
    assert [t for t, _ in await events(ledger)][len(before) :] == ["approval.answered"]
    assert ran == []


async def test_a_review_of_two_calls_reports_each_one() -> None:
    """Of two paused calls, the answered one is decided and the other stays pending by its own
    request id; a later pass decides that one; resolve_interruptions still returns the state."""
    registry, ran = build()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await paused(
        registry, executor, refund_call("A1", "c1"), refund_call("B2", "c2")
    )
    first = await review_interruptions(result, deferred, run_id="r-1")
    by_call = {p.call_id: p.request_id for p in await deferred.pending()}
    assert first == Review(state=first.state, pending=(by_call["c1"], by_call["c2"]))

    await deferred.answer(by_call["c2"], approved=False, reviewer="bob", reason="fraud")
    second = await review_interruptions(first.state, deferred, run_id="r-1")
    assert second == Review(state=first.state, pending=(by_call["c1"],), denied=("c2",))

    await deferred.answer(by_call["c1"], approved=True, reviewer="alice")
    assert await resolve_interruptions(first.state, deferred, run_id="r-1") is first.state
    await Runner.run(agent, first.state, run_config=CONFIG)
    assert outputs(model) == {
        "c1": "refunded 500 on A1",
        "c2": '{"error":{"kind":"approval-denied","message":"refund was not approved: fraud"}}',
    }
    assert ran == [{"order_id": "A1", "amount_cents": 500}]


async def test_the_resolve_loop_waits_for_the_reviewer_instead_of_spinning() -> None:
    """The documented loop (review, wait for each pending request, review again, resume) with a
    reviewer on another port object (found only by polling, as another process's answer is):
    while it waits it reads the ledger at most duration / poll_s + 1 times, and the run ends
    with the approved refund run once."""
    registry, ran = build()
    ledger = MemoryLedger()
    counting = CountingLedger(ledger)
    deferred = DeferredApproval(counting)
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await paused(registry, executor, refund_call("A1", "c1"))
    poll_s = 0.05
    waits: list[tuple[int, float]] = []  # (reads, seconds) of each wait

    waiting = asyncio.Event()  # set, with ``waits_from`` read count, as the loop starts to wait
    waits_from: list[int] = []

    async def reviewer() -> None:
        other = DeferredApproval(ledger)  # another port: no in-process wake-up
        await waiting.wait()
        await counting.at_least(waits_from[0] + 2)  # its first look found no answer
        [open_request] = await other.pending()
        await other.answer(open_request.request_id, approved=True, reviewer="alice")

    answering = asyncio.create_task(reviewer())
    review = await review_interruptions(result, deferred, run_id="r-1")
    while review.pending:
        for request_id in review.pending:
            start, started = counting.reads, time.monotonic()
            waits_from.append(start)
            waiting.set()
            await deferred.wait(request_id, timeout=60, poll_s=poll_s)
            waits.append((counting.reads - start, time.monotonic() - started))
        review = await review_interruptions(review.state, deferred, run_id="r-1")
    await answering
    await Runner.run(agent, review.state, run_config=CONFIG)

    assert len(waits) == 1
    [(reads, seconds)] = waits
    assert 2 <= reads <= seconds / poll_s + 1
    assert outputs(model) == {"c1": "refunded 500 on A1"}
    assert ran == [{"order_id": "A1", "amount_cents": 500}]
    assert await call_types(ledger, "c1") == APPROVED_AFTER_WAITING
