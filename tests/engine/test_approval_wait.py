"""``DeferredApproval.wait``: a program waits for a reviewer's answer without busy polling."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from _child import Child
from _helpers import CountingLedger, recorded, timeline, types

from agent_adapter import CallContext, Decision, DeferredApproval, Executor, Registry, digest
from agent_adapter.errors import ApprovalDenied, ApprovalPending, ToolUsageError
from agent_adapter.ledger import MemoryLedger, SQLiteLedger

ARGS = {"order_id": "A1", "amount_cents": 500}
D = digest(ARGS)
PENDING = timeline("call.failed", approval="pending")


def make() -> tuple[Registry, list[dict[str, Any]]]:
    """A registry with one ``confirm=True`` refund; the list records the bodies that ran."""
    registry = Registry()
    ran: list[dict[str, Any]] = []

    @registry.tool(confirm=True, effect="refund:{order_id}")
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order (integer cents)."""
        ran.append({"order_id": order_id, "amount_cents": amount_cents})
        return f"refunded {amount_cents} on {order_id}"

    return registry, ran


async def pending_request(executor: Executor, call_id: str = "c1") -> str:
    """Make a call that the deferred port holds; its request id."""
    with pytest.raises(ApprovalPending) as caught:
        await executor.run_spec(
            executor.registry.get("refund"), ARGS, CallContext(run_id="r1", call_id=call_id)
        )
    return caught.value.request_id


async def setup(clock: Any) -> tuple[MemoryLedger, CountingLedger, DeferredApproval, Executor, str]:
    """A memory ledger, the port's counting view of it, the port, an executor, one request."""
    registry, _ = make()
    ledger = MemoryLedger()
    counting = CountingLedger(ledger)
    deferred = DeferredApproval(counting, clock=clock)
    executor = Executor(registry, ledger=ledger, approval=deferred, clock=clock)
    return ledger, counting, deferred, executor, await pending_request(executor)


async def test_an_answer_through_the_same_port_wakes_the_wait_at_once(clock: Any) -> None:
    """An answer recorded through this port wakes its waiter without waiting for a poll (an
    hour here), and the wait returns the decision bound to the request's digest."""
    ledger, counting, deferred, _, request_id = await setup(clock)
    waiter = asyncio.create_task(deferred.wait(request_id, poll_s=3600))
    await counting.at_least(counting.reads + 1)  # the wait has looked once
    assert not waiter.done()
    await deferred.answer(request_id, approved=True, reviewer="carol", reason="fine")
    decision = await asyncio.wait_for(waiter, 60)
    assert decision == Decision(approved=True, reviewer="carol", reason="fine", digest=D)
    assert await types(ledger) == [*PENDING, "approval.answered"]  # the wait recorded nothing


async def test_the_wait_does_not_use_the_decision_up(clock: Any) -> None:
    """An answered request returns at once, as often as asked, recording nothing; the next
    call is then decided by that answer, once (a denial, then an edited approval)."""
    ledger, _, deferred, executor, request_id = await setup(clock)
    spec = executor.registry.get("refund")
    await deferred.answer(request_id, approved=False, reviewer="dan", reason="no")
    before = await recorded(ledger)
    for _ in range(2):
        assert await deferred.wait(request_id, timeout=0) == Decision(
            approved=False, reviewer="dan", reason="no", digest=D
        )
    assert await recorded(ledger) == before
    with pytest.raises(ApprovalDenied):
        await executor.run_spec(spec, ARGS, CallContext(run_id="r1", call_id="c2"))

    edited = await pending_request(executor, "c3")
    await deferred.answer(
        edited, approved=True, reviewer="dan", edits={"order_id": "A1", "amount_cents": 100}
    )
    assert await deferred.wait(edited) == Decision(
        approved=True,
        reviewer="dan",
        edits={"order_id": "A1", "amount_cents": 100},
        digest=D,
    )
    value = await executor.run_spec(spec, ARGS, CallContext(run_id="r1", call_id="c4"))
    assert value == "refunded 100 on A1"
    approvals = [(e.type, e.call_id) for e in await recorded(ledger) if "approval." in e.type]
    assert approvals == [
        ("approval.requested", "c1"),
        ("approval.pending", "c1"),
        ("approval.answered", "c1"),
        ("approval.requested", "c2"),
        ("approval.consumed", "c2"),
        ("approval.denied", "c2"),
        ("approval.requested", "c3"),
        ("approval.pending", "c3"),
        ("approval.answered", "c3"),
        ("approval.requested", "c4"),
        ("approval.consumed", "c4"),
        ("approval.granted", "c4"),
    ]


async def test_a_timeout_raises_and_leaves_the_request_open(clock: Any) -> None:
    """Past its timeout the wait raises TimeoutError naming the request; nothing is recorded
    and the request is still pending."""
    ledger, _, deferred, _, request_id = await setup(clock)
    before = await recorded(ledger)
    with pytest.raises(TimeoutError) as caught:
        await deferred.wait(request_id, timeout=0.2, poll_s=0.05)
    assert str(caught.value) == (
        f"approval request {request_id!r} (refund, run r1) is still pending after 0.2 s; "
        "nothing was recorded"
    )
    assert await recorded(ledger) == before
    assert [p.request_id for p in await deferred.pending()] == [request_id]


async def test_a_bounded_wait_polls_at_most_duration_over_poll_s_plus_one(clock: Any) -> None:
    """Waiting 1 s with a 0.1 s poll reads the ledger at most 11 times: no busy loop."""
    _, counting, deferred, _, request_id = await setup(clock)
    start = counting.reads
    with pytest.raises(TimeoutError):
        await deferred.wait(request_id, timeout=1.0, poll_s=0.1)
    polls = counting.reads - start
    assert 1 <= polls <= 1.0 / 0.1 + 1


async def test_a_cancelled_wait_records_nothing_and_leaves_the_port_usable(clock: Any) -> None:
    """Cancelling a wait propagates CancelledError, records nothing, and the port still answers
    and waits afterwards."""
    ledger, counting, deferred, _, request_id = await setup(clock)
    before = await recorded(ledger)
    waiter = asyncio.create_task(deferred.wait(request_id, poll_s=3600))
    await counting.at_least(counting.reads + 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert await recorded(ledger) == before
    await deferred.answer(request_id, approved=True, reviewer="erin")
    assert await asyncio.wait_for(deferred.wait(request_id), 60) == Decision(
        approved=True, reviewer="erin", digest=D
    )


async def test_waiting_on_an_unknown_request_or_with_bad_seconds_is_a_usage_error(
    clock: Any,
) -> None:
    """An id the ledger does not hold, or a poll_s/timeout that is not a number of seconds, is a
    ToolUsageError with a one-line message; nothing is recorded."""
    ledger, _, deferred, _, request_id = await setup(clock)
    before = await recorded(ledger)
    cases: list[tuple[str, dict[str, Any]]] = [
        ("nope", {}),
        (request_id, {"poll_s": 0}),
        (request_id, {"poll_s": -1.0}),
        (request_id, {"poll_s": float("nan")}),
        (request_id, {"poll_s": True}),
        (request_id, {"timeout": -1}),
        (request_id, {"timeout": float("inf")}),
        (request_id, {"timeout": "5"}),
    ]
    messages = []
    for rid, options in cases:
        with pytest.raises(ToolUsageError) as caught:
            await deferred.wait(rid, **options)
        messages.append(str(caught.value))
    assert messages == [
        "no approval request 'nope' in this ledger",
        "poll_s must be a positive number of seconds, not 0",
        "poll_s must be a positive number of seconds, not -1.0",
        "poll_s must be a positive number of seconds, not nan",
        "poll_s must be a positive number of seconds, not True",
        "timeout must be a number of seconds (0 or more) or None, not -1",
        "timeout must be a number of seconds (0 or more) or None, not inf",
        "timeout must be a number of seconds (0 or more) or None, not '5'",
    ]
    assert await recorded(ledger) == before


async def test_the_wait_is_woken_by_another_process_answer(tmp_path: Path) -> None:
    """A reviewer process answers while this process waits on the SQLite file: the wait returns
    the decision, having read the ledger at most duration / poll_s + 1 times, and the next call
    runs the tool once under it."""
    path = tmp_path / "l.db"
    registry, ran = make()
    async with SQLiteLedger(path) as ledger:
        counting = CountingLedger(ledger)
        deferred = DeferredApproval(counting)
        executor = await Executor.open(registry, ledger=ledger, approval=deferred)
        request_id = await pending_request(executor)
        reviewer = await Child.start("answer-on-go", str(path), request_id)
        try:
            await reviewer.expect("ready")
            start, started = counting.reads, time.monotonic()
            waiter = asyncio.create_task(deferred.wait(request_id, timeout=60, poll_s=0.05))
            # Two looks: the first found no answer, so the answer below comes while it waits.
            await counting.at_least(start + 2)
            assert not waiter.done()
            await reviewer.send("go")
            decision = await waiter
            elapsed = time.monotonic() - started
            await reviewer.expect("answered")
            assert await reviewer.wait() == 0
        finally:
            await reviewer.close()
        assert decision == Decision(approved=True, reviewer="alice", reason="checked", digest=D)
        assert counting.reads - start <= elapsed / 0.05 + 1
        spec = registry.get("refund")
        value = await executor.run_spec(spec, ARGS, CallContext(run_id="r1", call_id="c2"))
        assert value == "refunded 500 on A1"
        assert ran == [ARGS]
        assert [(e.type, e.call_id) async for e in ledger.read()] == [
            ("call.requested", "c1"),
            ("call.validated", "c1"),
            ("approval.requested", "c1"),
            ("approval.pending", "c1"),
            ("call.pending", "c1"),
            ("approval.answered", "c1"),
            ("call.requested", "c2"),
            ("call.validated", "c2"),
            ("approval.requested", "c2"),
            ("approval.consumed", "c2"),
            ("approval.granted", "c2"),
            ("effect.claimed", "c2"),
            ("call.started", "c2"),
            ("call.succeeded", "c2"),
        ]
        await executor.close()
