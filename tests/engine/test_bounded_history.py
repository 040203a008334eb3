"""The run history in memory is bounded (``remember``); cold runs come back from the ledger.

Every finished call leaves its outcome in the executor's index (step 0 refuses to run a
finished call again without asking the ledger) and counts against its run. Past
``remember`` calls, the least recently finished runs go cold and are recalled from the
ledger when one of their calls comes again: the answers are the same as if nothing had
been forgotten.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent_adapter import Executor, Registry, RunLimits
from agent_adapter.errors import (
    AmbiguousEffect,
    DuplicateEffect,
    LedgerError,
    RunLimitExceeded,
    ToolUsageError,
)
from agent_adapter.ledger import MemoryLedger, SQLiteLedger


def _tools(ran: list[str]) -> Registry:
    registry = Registry()

    @registry.tool
    async def echo(x: int) -> int:
        ran.append(f"echo {x}")
        return x

    @registry.tool(effect="pay:{ref}")
    async def pay(ref: str) -> str:
        ran.append(f"pay {ref}")
        return f"paid {ref}"

    return registry


async def _runs(executor: Executor, runs: range, calls: int) -> None:
    for r in runs:
        for c in range(calls):
            await executor.call("echo", {"x": c}, run_id=f"run{r}", call_id=f"c{c}")


async def test_old_runs_go_cold_and_come_back_the_same() -> None:
    ran: list[str] = []
    executor = Executor(_tools(ran), remember=10, limits=RunLimits(max_calls=6))
    await _runs(executor, range(4), 5)  # 20 calls: the first runs go cold
    state = executor.state
    assert "run0" in state.cold and "run3" not in state.cold
    assert not any(run == "run0" for run, _ in state.outcomes)
    assert "run0" not in state.run_calls and len(state.outcomes) <= 10
    before = len(ran)
    # A finished call of a cold run is replayed, not run again...
    assert await executor.call("echo", {"x": 1}, run_id="run0", call_id="c1") == 1
    assert len(ran) == before
    kinds = [e.type async for e in executor.ledger.read(run_id="run0", call_id="c1")]
    assert kinds[-1] == "call.replayed"
    # ...and its run limit counts the calls it made before it went cold.
    assert await executor.call("echo", {"x": 9}, run_id="run0", call_id="c9") == 9
    with pytest.raises(RunLimitExceeded):
        await executor.call("echo", {"x": 10}, run_id="run0", call_id="c10")
    assert "run0" not in state.cold


async def test_an_executor_opened_on_a_long_ledger_keeps_only_the_bound(tmp_path: Path) -> None:
    ran: list[str] = []
    path = tmp_path / "long.db"
    async with Executor(_tools(ran), ledger=SQLiteLedger(path)) as first:
        await _runs(first, range(50), 4)
        await first.call("pay", {"ref": "p1"}, run_id="run0", call_id="pay")
    async with Executor(_tools(ran), ledger=SQLiteLedger(path), remember=20) as second:
        assert len(second.state.outcomes) <= 20 and "run0" in second.state.cold
        # Effect keys are never forgotten: the refund of a cold run is still a duplicate.
        with pytest.raises(DuplicateEffect):
            await second.call("pay", {"ref": "p1"}, run_id="run49", call_id="pay-again")
        replayed = await second.call("pay", {"ref": "p1"}, run_id="run0", call_id="pay")
    assert (replayed, ran.count("pay p1")) == ("paid p1", 1)


async def test_memory_stays_bounded_over_many_calls() -> None:
    executor = Executor(_tools([]), remember=1_000)
    await _runs(executor, range(2_000), 10)  # 20,000 calls
    state = executor.state
    assert len(state.outcomes) <= 1_000 and len(state.run_calls) <= 101
    assert len(state.history) <= 101 and len(state.cold) >= 1_899


class _CountingReads(MemoryLedger):
    def __init__(self) -> None:
        super().__init__()
        self.run_reads: list[str] = []

    def read(self, after: int = 0, *, run_id: str | None = None, call_id: str | None = None):  # type: ignore[no-untyped-def]
        if run_id is not None and call_id is None:
            self.run_reads.append(run_id)
        return super().read(after, run_id=run_id, call_id=call_id)


async def test_concurrent_calls_of_a_cold_run_recall_it_once() -> None:
    ledger = _CountingReads()
    executor = Executor(_tools([]), ledger=ledger, remember=5)
    await _runs(executor, range(3), 5)
    assert "run0" in executor.state.cold
    results = await asyncio.gather(
        *(executor.call("echo", {"x": x}, run_id="run0", call_id=f"new{x}") for x in range(8))
    )
    assert (results, ledger.run_reads) == (list(range(8)), ["run0"])


async def test_a_run_with_a_call_in_flight_stays_warm() -> None:
    gate = asyncio.Event()
    registry = _tools([])

    @registry.tool
    async def slow(x: int) -> int:
        await gate.wait()
        return x

    executor = Executor(registry, remember=5)
    await executor.call("echo", {"x": 0}, run_id="busy", call_id="first")
    waiting = asyncio.create_task(executor.call("slow", {"x": 1}, run_id="busy", call_id="second"))
    await asyncio.sleep(0)
    await _runs(executor, range(10), 3)
    assert "busy" not in executor.state.cold and ("busy", "first") in executor.state.outcomes
    gate.set()
    assert await waiting == 1


async def test_a_cold_run_recalled_on_a_shared_ledger_sees_the_other_writers_calls(
    tmp_path: Path,
) -> None:
    """Another process finished a call of a run this executor had let go cold."""
    ran: list[str] = []
    path = tmp_path / "shared.db"
    a = await Executor.open(_tools(ran), ledger=SQLiteLedger(path))
    b = await Executor.open(_tools(ran), ledger=SQLiteLedger(path), remember=4)
    try:
        await b.call("echo", {"x": 0}, run_id="shared", call_id="b0")
        await _runs(b, range(3), 3)  # "shared" goes cold in b
        assert "shared" in b.state.cold
        await a.call("echo", {"x": 7}, run_id="shared", call_id="a7")
        before = len(ran)
        assert await b.call("echo", {"x": 7}, run_id="shared", call_id="a7") == 7
        assert len(ran) == before  # replayed from a's outcome, not run again
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "many"])
def test_remember_must_be_a_positive_number_of_calls(bad: Any) -> None:
    with pytest.raises(ToolUsageError, match="remember must be a positive number"):
        Executor(remember=bad)


class _SlowOutcomes(MemoryLedger):
    """A ledger whose outcome appends take a while (a disk, a network)."""

    async def append_many(self, events: Any) -> Any:
        if any(e.is_outcome for e in events):
            await asyncio.sleep(0.05)
        return await super().append_many(events)


async def test_a_run_is_not_sent_cold_before_its_outcome_is_written() -> None:
    """A retry that arrives while the outcome is still being written must not recall a ledger
    without it (and run the body again)."""
    ran: list[str] = []
    gate = asyncio.Event()
    registry = _tools(ran)

    @registry.tool
    async def wait() -> int:
        await gate.wait()
        return 0

    executor = Executor(registry, ledger=_SlowOutcomes(), remember=1)
    busy = asyncio.create_task(executor.call("wait", {}, run_id="B", call_id="w"))
    await asyncio.sleep(0.01)
    await executor.call("echo", {"x": 1}, run_id="X", call_id="c1")
    first = asyncio.create_task(executor.call("echo", {"x": 2}, run_id="X", call_id="c2"))
    await asyncio.sleep(0.02)  # c2's outcome is applied, its append still running
    with pytest.raises(AmbiguousEffect, match="still being written"):
        await executor.call("echo", {"x": 2}, run_id="X", call_id="c2")
    assert await first == 2
    assert await executor.call("echo", {"x": 2}, run_id="X", call_id="c2") == 2  # replayed
    gate.set()
    await busy
    assert ran.count("echo 2") == 1


async def test_another_writers_events_read_by_a_recall_count_once(tmp_path: Path) -> None:
    """The recall reads another process's call before that process's events are handed
    over at this executor's next commit: the run's count must not take it twice."""
    path = tmp_path / "shared.db"
    one = Executor(_tools([]), ledger=SQLiteLedger(path), remember=3, limits=RunLimits(max_calls=4))
    other = Executor(_tools([]), ledger=SQLiteLedger(path))
    await one.start()
    await other.start()
    try:
        await one.call("echo", {"x": 0}, run_id="R", call_id="a")
        await _runs(one, range(4), 1)  # R goes cold in `one`
        assert "R" in one.state.cold
        await other.call("echo", {"x": 1}, run_id="R", call_id="b")
        await one.call("echo", {"x": 2}, run_id="R", call_id="c")  # recall reads a, b
        await one.ledger.catch_up()  # type: ignore[attr-defined]  # b is handed over now
        assert one.state.run_calls["R"] == 3
        assert await one.call("echo", {"x": 3}, run_id="R", call_id="d") == 3  # 4th: allowed
        with pytest.raises(RunLimitExceeded):
            await one.call("echo", {"x": 4}, run_id="R", call_id="f")
    finally:
        await one.close()
        await other.close()


class _YieldingReads(MemoryLedger):
    async def read(self, after: int = 0, *, run_id: str | None = None, call_id: str | None = None):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0)
        async for event in super().read(after, run_id=run_id, call_id=call_id):
            yield event


async def test_a_recall_next_to_a_busy_run_finishes() -> None:
    """A busy run holding most of the bound cannot make the recalled run go cold at once
    (the call would recall it forever)."""
    gate = asyncio.Event()
    registry = _tools([])

    @registry.tool
    async def wait() -> int:
        await gate.wait()
        return 0

    # A ledger whose reads yield (as a real one does): a recall loop would then end in
    # the wait_for timeout below instead of blocking the event loop for good.
    executor = Executor(registry, ledger=_YieldingReads(), remember=4)
    await _runs(executor, range(1), 6)  # run0: 6 calls
    await executor.call("echo", {"x": 0}, run_id="S", call_id="c0")  # run0 goes cold
    busy = asyncio.create_task(executor.call("wait", {}, run_id="B", call_id="w"))
    await asyncio.sleep(0.01)
    assert "run0" in executor.state.cold
    result = await asyncio.wait_for(
        executor.call("echo", {"x": 9}, run_id="run0", call_id="c9"), timeout=5
    )
    gate.set()
    await busy
    assert result == 9


class _WriterQueue(MemoryLedger):
    """Like SQLiteLedger: an append is handed to a writer; a caller cancelled while it waits
    does not stop the write, and catch_up() returns once everything handed over is written."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: set[asyncio.Future[Any]] = set()
        self.slow = False

    async def append_many(self, events: Any) -> Any:
        async def write() -> Any:
            if self.slow and any(e.is_outcome for e in events):
                await asyncio.sleep(0.1)
            return await MemoryLedger.append_many(self, events)

        task = asyncio.ensure_future(write())
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
        return await asyncio.shield(task)

    async def catch_up(self) -> None:
        while self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)


async def test_a_caller_cancelled_while_its_outcome_is_written_keeps_the_run_warm() -> None:
    ran: list[str] = []
    ledger = _WriterQueue()
    executor = Executor(_tools(ran), ledger=ledger, remember=1)
    await executor.call("echo", {"x": 1}, run_id="X", call_id="c1")
    ledger.slow = True
    first = asyncio.create_task(executor.call("echo", {"x": 2}, run_id="X", call_id="c2"))
    await asyncio.sleep(0.02)  # the outcome is with the writer
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    ledger.slow = False
    await executor.call("echo", {"x": 3}, run_id="Y", call_id="y1")  # an eviction pass
    assert "X" not in executor.state.cold  # still pinned: its outcome is not written yet
    with pytest.raises(AmbiguousEffect, match="still being written"):
        await executor.call("echo", {"x": 2}, run_id="X", call_id="c2")
    await ledger.catch_up()
    await asyncio.sleep(0)  # the unpin that waited for catch_up
    await executor.call("echo", {"x": 4}, run_id="Z", call_id="z1")  # X may go cold now
    assert await executor.call("echo", {"x": 2}, run_id="X", call_id="c2") == 2  # replayed
    assert (ran.count("echo 2"), executor.state.pinned) == (1, {})


class _OutcomeWriteFails(MemoryLedger):
    failed = False

    async def append_many(self, events: Any) -> Any:
        if not self.failed and any(e.is_outcome for e in events):
            self.failed = True
            raise LedgerError("ledger test.db: appending: the disk is full")
        return await super().append_many(events)


async def test_an_outcome_that_was_never_written_is_in_flight_after_a_recall() -> None:
    """Memory had the outcome, the ledger only call.started: once the run went cold and
    came back, the call is in flight (as after a restart), so a repeat is refused."""
    ran: list[str] = []
    executor = Executor(_tools(ran), ledger=_OutcomeWriteFails(), remember=1)
    with pytest.raises(LedgerError):
        await executor.call("echo", {"x": 1}, run_id="X", call_id="c1")
    await _runs(executor, range(2), 1)  # X goes cold
    assert "X" in executor.state.cold
    with pytest.raises(AmbiguousEffect, match="already started and has no outcome"):
        await executor.call("echo", {"x": 1}, run_id="X", call_id="c1")
    assert ran.count("echo 1") == 1


async def test_a_run_whose_only_call_died_before_it_started_goes_cold_too() -> None:
    """Counted (approval asked) but never finished: after a restart replay forgets the call,
    and the run's count must still leave memory with the other idle runs, and come back."""
    from agent_adapter.ledger import ApprovalRequested, CallRequested, CallValidated

    ledger = MemoryLedger()
    ids = {"run_id": "died", "call_id": "d1", "tool": "echo"}
    await ledger.append_many(
        [
            CallRequested(args={"x": 1}, **ids),
            CallValidated(digest="0" * 64, **ids),
            ApprovalRequested(request_id="q", digest="0" * 64, **ids),  # counts the call
        ]
    )
    executor = await Executor.open(
        _tools([]), ledger=ledger, remember=5, limits=RunLimits(max_calls=2)
    )
    assert executor.state.run_calls == {"died": 1}
    await _runs(executor, range(10), 1)
    assert "died" in executor.state.cold and "died" not in executor.state.run_calls
    await executor.call("echo", {"x": 2}, run_id="died", call_id="d2")  # recalled: 2nd call
    with pytest.raises(RunLimitExceeded):
        await executor.call("echo", {"x": 3}, run_id="died", call_id="d3")
