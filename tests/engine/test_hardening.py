"""Guarantees found missing in review: arguments that run are the digested ones, a failed
write-ahead leaves no claim behind, after_tool sees cancellations, redacted values stay out
of recorded error text."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _helpers import timeline

from agent_adapter import CallContext, Executor, Registry, current_call
from agent_adapter.errors import GuardrailBlocked, LedgerError, ToolFailed, ToolUsageError
from agent_adapter.ledger import MemoryLedger


def payout_registry(ran: list[Any]) -> Registry:
    registry = Registry()

    @registry.tool(effect="payout:{to}")
    async def payout(to: str, legs: Any) -> str:  # untyped: validation passes it through
        ran.append(legs)
        return "paid"

    return registry


async def test_the_callers_dict_cannot_change_what_runs() -> None:
    """A caller's nested objects are not shared with the call: changing them mid-call changes
    nothing the body sees."""
    ran: list[Any] = []
    legs = [{"cents": 500}]

    class Meddler:
        def on_event(self, event: Any) -> None:
            if event.type == "call.started":
                legs[0]["cents"] = 9_999_999  # the caller's own object

    executor = Executor(payout_registry(ran), hooks=[Meddler()])
    assert await executor.call("payout", {"to": "acct-1", "legs": legs}) == "paid"
    assert ran == [[{"cents": 500}]]


async def test_arguments_changed_during_the_write_ahead_do_not_run() -> None:
    """An observer that changes the running call's arguments before the body: the call fails
    with ToolUsageError and the body never runs."""
    ran: list[Any] = []

    class Meddler:
        def on_event(self, event: Any) -> None:
            call = current_call()
            if event.type == "call.started" and call is not None:
                call.args["legs"][0]["cents"] = 9_999_999

    ledger = MemoryLedger()
    executor = Executor(payout_registry(ran), ledger=ledger, hooks=[Meddler()])
    with pytest.raises(ToolUsageError):
        await executor.call("payout", '{"to": "acct-1", "legs": [{"cents": 500}]}')
    assert ran == []
    assert [e.type async for e in ledger.read()][-1] == "call.failed"
    # The body never ran, and the outcome says so: the key is free (no manual resolve),
    # for this executor and for one that replays the ledger.
    replayed = await Executor.open(payout_registry(ran), ledger=ledger)
    assert (executor.state.effects, replayed.state.effects) == ({}, {})
    assert await replayed.call("payout", {"to": "acct-1", "legs": [{"cents": 500}]}) == "paid"
    assert ran == [[{"cents": 500}]]


class FailingOnce(MemoryLedger):
    """A memory ledger whose first batch holding ``call.started`` fails, like a busy disk."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def append_many(self, events: Any) -> Any:
        if not self.failed and any(e.type == "call.started" for e in events):
            self.failed = True
            raise LedgerError("ledger test.db: appending: the disk is full")
        return await super().append_many(events)


async def test_a_failed_write_ahead_leaves_no_claim_behind() -> None:
    """The batch before the body fails: the body does not run, the effect key is not held,
    and the same call runs once the ledger works again."""
    ran: list[Any] = []
    ledger = FailingOnce()
    executor = Executor(payout_registry(ran), ledger=ledger)
    ctx = CallContext(run_id="r1", call_id="c1")
    spec = executor.registry.get("payout")
    args = {"to": "acct-1", "legs": [{"cents": 500}]}
    with pytest.raises(LedgerError):
        await executor.run_spec(spec, args, ctx)
    assert (ran, executor.state.effects, executor.ambiguous_effects()) == ([], {}, {})
    assert await executor.run_spec(spec, args, ctx) == "paid"
    assert ran == [[{"cents": 500}]]
    assert [e.type async for e in ledger.read()] == timeline("call.succeeded", effect=True)


async def test_after_tool_sees_a_cancelled_call() -> None:
    """A call cancelled in its body is recorded as call.cancelled and after_tool sees it."""
    registry = Registry()
    entered = asyncio.Event()
    seen: list[str] = []

    @registry.tool
    async def slow() -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    class Watcher:
        def after_tool(self, call: Any, outcome: Any) -> None:
            seen.append(outcome.kind)

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[Watcher()])
    task = asyncio.create_task(executor.call("slow", {}))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]
    assert [e.type async for e in ledger.read()][-1] == "call.cancelled"


async def test_redacted_values_stay_out_of_recorded_error_text() -> None:
    """A tool's or guard's error that quotes a redacted value is recorded without it."""
    registry = Registry()

    def pin_is_numeric(call: Any) -> None:
        int(call.args["pin"])

    @registry.tool(redact=("card_number",))
    async def balance(card_number: str) -> int:
        return {}[card_number]  # type: ignore[no-any-return]

    @registry.tool(redact=("pin",), guards=[pin_is_numeric])
    async def unlock(user: str, pin: str) -> str:
        return "ok"

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    with pytest.raises(ToolFailed):
        await executor.call("balance", {"card_number": "4111111111111111"})
    with pytest.raises(GuardrailBlocked):
        await executor.call("unlock", {"user": "u", "pin": "hunter2"})
    leaked = [
        r.seq for r in ledger.records if b"4111111111111111" in r.payload or b"hunter2" in r.payload
    ]
    assert leaked == []
    failed = [e async for e in ledger.read() if e.type == "call.failed"]
    assert [e.error for e in failed] == ["balance failed: KeyError: [redacted]"]


async def test_a_timed_out_sync_body_still_running_holds_its_key() -> None:
    """A sync tool past its timeout keeps running in its thread: its ambiguous key cannot be
    resolved as failed (and run again) until the thread returns."""
    import threading

    registry = Registry()
    release = threading.Event()
    refunds: list[str] = []

    @registry.tool(effect="refund:{order_id}", timeout=0.05)
    def refund(order_id: str) -> str:
        release.wait(30)
        refunds.append(order_id)
        return "ok"

    executor = Executor(registry)
    from agent_adapter.errors import ToolTimeout

    with pytest.raises(ToolTimeout):
        await executor.call("refund", {"order_id": "A1"})
    with pytest.raises(ToolUsageError) as refused:
        await executor.resolve_effect("refund:A1", outcome="failed", reviewer="ops")
    assert "still running in a worker thread" in str(refused.value)
    release.set()
    deadline = asyncio.get_running_loop().time() + 30
    while "refund:A1" in executor._running_keys and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110 (a thread, not a coroutine, clears it)
        await asyncio.sleep(0.01)  # polling the thread's exit, bounded
    await executor.resolve_effect("refund:A1", outcome="committed", reviewer="ops")
    assert refunds == ["A1"]
    assert executor.state.effects["refund:A1"].status == "committed"


async def test_a_tool_error_from_a_nested_call_does_not_free_the_outer_key() -> None:
    """A body that did its effect, then called a tool that raised ToolError: the outer call
    failed unexpectedly (ToolFailed, key ambiguous), it did not 'do nothing'."""
    from agent_adapter.errors import AmbiguousEffect, ToolError

    registry = Registry()
    refunds: list[str] = []

    @registry.tool
    async def notify(order_id: str) -> str:
        raise ToolError("the mail service refused the message")

    executor = Executor(registry)

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        refunds.append(order_id)  # the money moved
        return str(await executor.call("notify", {"order_id": order_id}))

    with pytest.raises(ToolFailed) as failed:
        await executor.call("refund", {"order_id": "A1"})
    assert isinstance(failed.value.__cause__, ToolError)
    assert list(executor.ambiguous_effects()) == ["refund:A1"]
    with pytest.raises(AmbiguousEffect):
        await executor.call("refund", {"order_id": "A1"})
    assert refunds == ["A1"]


async def test_a_sync_body_that_never_left_the_queue_does_not_hold_its_key() -> None:
    """A sync effect body still queued for a worker when its deadline fires never runs:
    its key is ambiguous but not held by a running thread, so it can be resolved."""
    import concurrent.futures
    import threading

    from agent_adapter.errors import ToolTimeout

    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(pool)
    gate = threading.Event()
    busy = loop.run_in_executor(None, gate.wait, 30)  # the only worker is taken
    registry = Registry()
    ran: list[str] = []

    @registry.tool(effect="refund:{order_id}", timeout=0.05)
    def refund(order_id: str) -> str:
        ran.append(order_id)
        return "ok"

    executor = Executor(registry)
    with pytest.raises(ToolTimeout):
        await executor.call("refund", {"order_id": "A1"})
    gate.set()
    await busy
    await loop.run_in_executor(None, lambda: None)  # the queued item was skipped
    assert (ran, executor._running_keys) == ([], {})
    await executor.resolve_effect("refund:A1", outcome="failed", reviewer="ops")
    assert "refund:A1" not in executor.state.effects


async def test_a_failed_write_ahead_keeps_a_count_the_ledger_already_holds() -> None:
    """approval.requested was durable before the port was asked: when the next write fails,
    the call still counts, live as on replay."""
    from agent_adapter import CallbackApproval, RunLimits
    from agent_adapter.errors import RunLimitExceeded

    registry = Registry()

    @registry.tool(confirm=True)
    async def pay(order_id: str) -> str:
        return "paid " + order_id

    ledger = FailingOnce()
    port = CallbackApproval(lambda request: True)
    limits = RunLimits(max_calls=1)
    executor = Executor(registry, ledger=ledger, approval=port, limits=limits)
    with pytest.raises(LedgerError):
        await executor.call("pay", {"order_id": "A"}, run_id="r1", call_id="c1")
    with pytest.raises(RunLimitExceeded):
        await executor.call("pay", {"order_id": "B"}, run_id="r1", call_id="c2")
    replayed = await Executor.open(registry, ledger=ledger, approval=port, limits=limits)
    assert replayed.state.run_calls == executor.state.run_calls == {"r1": 1}


async def test_objects_a_guard_kept_cannot_change_what_the_body_runs() -> None:
    """A guard keeps the nested arguments and changes them while the body awaits: the body
    works on its own copy of the digested arguments."""
    held: list[Any] = []

    def guard(call: Any) -> None:
        held.append(call.args["lines"])

    registry = Registry()
    paid: list[int] = []
    body_started = asyncio.Event()
    changed = asyncio.Event()

    @registry.tool(guards=[guard], effect="refund:{order_id}")
    async def refund(order_id: str, lines: list[dict[str, int]]) -> str:
        body_started.set()
        await changed.wait()
        paid.append(sum(line["amount"] for line in lines))
        return "ok"

    executor = Executor(registry)
    task = asyncio.create_task(
        executor.call("refund", {"order_id": "A1", "lines": [{"amount": 5}]})
    )
    await body_started.wait()
    held[0][0]["amount"] = 1_000_000
    changed.set()
    assert await task == "ok"
    assert paid == [5]


async def test_redacted_containers_and_reprs_are_scrubbed_too() -> None:
    """A redacted dict argument, or a value quoted by repr with escapes, never reaches the
    recorded error text."""
    registry = Registry()

    @registry.tool(redact=("card",))
    async def charge(card: dict[str, str]) -> str:
        raise ValueError(f"declined: {card}")

    @registry.tool(redact=("password",))
    async def login(password: str) -> str:
        raise ValueError(f"bad password {password!r}")

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    with pytest.raises(ToolFailed):
        await executor.call("charge", {"card": {"number": "4111111111111111"}})
    with pytest.raises(ToolFailed):
        await executor.call("login", {"password": "s3cr3t\\x"})
    errors = [e.error async for e in ledger.read() if e.type == "call.failed"]
    assert errors == [
        "charge failed: ValueError: declined: [redacted]",
        "login failed: ValueError: bad password [redacted]",
    ]
