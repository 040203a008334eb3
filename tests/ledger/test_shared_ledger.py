"""Several executors on one SQLite ledger: an effect key runs once across all of them.

Each executor (a process, or here a second ledger object on the same file; several
executors on one ledger object are in test_shared_object.py) hears
the others' events at each of its commits, and the writer refuses a claim of a key
another writer claimed first. Before this, two processes that had each replayed the
ledger both ran the same refund.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _helpers import timeline

from agent_adapter import Executor, Registry
from agent_adapter.errors import AmbiguousEffect, DuplicateEffect
from agent_adapter.ledger import EffectClaimed, MemoryLedger, SQLiteLedger, replay
from agent_adapter.ledger._follow import EffectTaken


def _refunds(runs: list[str], gate: asyncio.Event | None = None) -> Registry:
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str, amount: float) -> str:
        runs.append(order_id)
        if gate is not None:
            await gate.wait()
        return f"refunded {amount}"

    return registry


async def _types(path: Path, call_id: str) -> list[str]:
    async with SQLiteLedger(path, readonly=True) as ledger:
        return [e.type async for e in ledger.read(call_id=call_id)]


async def _until(predicate: Any) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_a_key_claimed_by_another_writer_is_refused_then_reported_committed(
    tmp_path: Path,
) -> None:
    """B opened before A claimed: B's claim is refused in the write, nothing of it runs."""
    path = tmp_path / "shared.db"
    runs: list[str] = []
    gate = asyncio.Event()
    a = await Executor.open(_refunds(runs, gate), ledger=SQLiteLedger(path))
    b = await Executor.open(_refunds(runs), ledger=SQLiteLedger(path))
    try:
        first = asyncio.create_task(
            a.call("refund", {"order_id": "o1", "amount": 5.0}, run_id="ra", call_id="a1")
        )
        await _until(lambda: runs)  # A's claim is durable and its body is running
        with pytest.raises(AmbiguousEffect) as running:
            await b.call("refund", {"order_id": "o1", "amount": 5.0}, run_id="rb", call_id="b1")
        gate.set()
        assert await first == "refunded 5.0"
        # B's news of A is from before A finished: B catches up before it answers.
        with pytest.raises(DuplicateEffect) as done:
            await b.call("refund", {"order_id": "o1", "amount": 5.0}, run_id="rb", call_id="b2")
        outcome = (done.value.run_id, done.value.call_id, done.value.same_args)
        assert (runs, running.value.key, outcome) == (["o1"], "refund:o1", ("ra", "a1", True))
        assert await _types(path, "b1") == timeline("call.ambiguous")
        assert await _types(path, "b2") == timeline("call.duplicate")
    finally:
        await a.close()
        await b.close()
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert (await ledger.verify()).ok
        audit = replay([e async for e in ledger.read()])
    assert audit.problems() == []


async def test_another_writers_finished_claim_is_a_duplicate_at_once(tmp_path: Path) -> None:
    """A claimed and committed after B opened; B's first try is a duplicate, not a run."""
    path = tmp_path / "shared.db"
    runs: list[str] = []
    a = await Executor.open(_refunds(runs), ledger=SQLiteLedger(path))
    b = await Executor.open(_refunds(runs), ledger=SQLiteLedger(path))
    try:
        await a.call("refund", {"order_id": "o2", "amount": 1.0}, run_id="ra", call_id="a1")
        with pytest.raises(DuplicateEffect) as other_args:
            await b.call("refund", {"order_id": "o2", "amount": 9.0}, run_id="rb", call_id="b1")
        # B's run limits and outcome index heard of A's call too: a repeat of A's ids in B
        # is a replay of A's recorded value, not a second run.
        again = await b.call("refund", {"order_id": "o2", "amount": 1.0}, run_id="ra", call_id="a1")
    finally:
        await a.close()
        await b.close()
    assert (runs, other_args.value.same_args, again) == (["o2"], False, "refunded 1.0")


async def test_a_claim_running_when_the_other_replayed_settles_when_it_finishes(
    tmp_path: Path,
) -> None:
    """B opened while A's call was running (replay: in flight, A's lease is live); A's
    outcome reaches B."""
    path = tmp_path / "shared.db"
    runs: list[str] = []
    gate = asyncio.Event()
    a = await Executor.open(_refunds(runs, gate), ledger=SQLiteLedger(path))
    first = asyncio.create_task(
        a.call("refund", {"order_id": "o3", "amount": 2.0}, run_id="ra", call_id="a1")
    )
    await _until(lambda: runs)
    b = await Executor.open(_refunds(runs), ledger=SQLiteLedger(path))
    try:
        assert (b.ambiguous_effects(), list(b.in_flight_effects())) == ({}, ["refund:o3"])
        gate.set()
        await first
        with pytest.raises(DuplicateEffect):
            await b.call("refund", {"order_id": "o3", "amount": 2.0}, run_id="rb", call_id="b1")
        assert (b.ambiguous_effects(), runs) == ({}, ["o3"])
    finally:
        await a.close()
        await b.close()


async def test_a_key_freed_by_the_other_writer_can_be_claimed(tmp_path: Path) -> None:
    """A's body said it did nothing (ToolError): the key is free for B, which runs it."""
    from agent_adapter.errors import ToolError

    path = tmp_path / "shared.db"
    runs: list[str] = []
    registry = Registry()

    @registry.tool(effect="pay:{ref}")
    async def pay(ref: str, fail: bool) -> str:
        runs.append(ref)
        if fail:
            raise ToolError("card declined before anything was charged")
        return "paid"

    a = await Executor.open(registry, ledger=SQLiteLedger(path))
    b = await Executor.open(registry, ledger=SQLiteLedger(path))
    try:
        with pytest.raises(ToolError):
            await a.call("pay", {"ref": "p1", "fail": True}, run_id="ra", call_id="a1")
        assert await b.call("pay", {"ref": "p1", "fail": False}, run_id="rb", call_id="b1") == (
            "paid"
        )
    finally:
        await a.close()
        await b.close()
    assert runs == ["p1", "p1"]


async def test_two_replicas_running_the_same_call_id_run_it_once(tmp_path: Path) -> None:
    """A host error (one call id sent to two replicas at once) still runs the body once:
    undoing B's refused claim leaves A's claim, which has B's very ids, in place."""
    path = tmp_path / "shared.db"
    runs: list[str] = []
    gate = asyncio.Event()
    a = await Executor.open(_refunds(runs, gate), ledger=SQLiteLedger(path))
    b = await Executor.open(_refunds(runs), ledger=SQLiteLedger(path))
    try:
        first = asyncio.create_task(
            a.call("refund", {"order_id": "o4", "amount": 1.0}, run_id="r", call_id="c")
        )
        await _until(lambda: runs)
        with pytest.raises(AmbiguousEffect):
            await b.call("refund", {"order_id": "o4", "amount": 1.0}, run_id="r", call_id="c")
        gate.set()
        await first
    finally:
        await a.close()
        await b.close()
    assert runs == ["o4"]


async def test_a_call_waiting_for_approval_when_the_other_replayed_settles_its_key(
    tmp_path: Path,
) -> None:
    """B replays while A's call waits for its reviewer (requested, not started: replay
    forgets it); A's claim and outcome, heard later, still settle the key in B."""
    from agent_adapter import CallbackApproval
    from agent_adapter.errors import ToolError

    path = tmp_path / "shared.db"
    runs: list[str] = []
    registry = Registry()

    @registry.tool(effect="pay:{ref}", confirm=True)
    async def pay(ref: str, fail: bool) -> str:
        runs.append(ref)
        if fail:
            raise ToolError("declined, nothing charged")
        return "paid"

    review, asked = asyncio.Event(), asyncio.Event()

    async def reviewer(request: Any) -> bool:
        asked.set()  # approval.requested is durable before a port is asked
        await review.wait()
        return True

    a = await Executor.open(
        registry, ledger=SQLiteLedger(path), approval=CallbackApproval(reviewer)
    )
    first = asyncio.create_task(
        a.call("pay", {"ref": "p1", "fail": True}, run_id="ra", call_id="a1")
    )
    await asked.wait()
    yes = CallbackApproval(lambda request: True)
    b = await Executor.open(registry, ledger=SQLiteLedger(path), approval=yes)
    try:
        review.set()
        with pytest.raises(ToolError):
            await first  # A ran and said it did nothing: the key is free again
        paid = await b.call("pay", {"ref": "p1", "fail": False}, run_id="rb", call_id="b1")
    finally:
        await a.close()
        await b.close()
    assert (paid, runs) == ("paid", ["p1", "p1"])


class _AlwaysTaken:
    """A ledger whose writer refuses every claim, as if other writers kept claiming and
    freeing the key between each of this executor's tries."""

    def __init__(self) -> None:
        self.inner = MemoryLedger()
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def append_many(self, events: Any) -> Any:
        if any(isinstance(e, EffectClaimed) for e in events):
            self.refused += 1
            raise EffectTaken(events[-2].key, 1000 + self.refused)
        return await self.inner.append_many(events)


async def test_a_claim_refused_again_and_again_ends_ambiguous_after_three_tries() -> None:
    runs: list[str] = []
    ledger = _AlwaysTaken()
    executor = Executor(_refunds(runs), ledger=ledger)  # type: ignore[arg-type]
    with pytest.raises(AmbiguousEffect, match="each time this call tried"):
        await executor.call("refund", {"order_id": "o5", "amount": 1.0}, run_id="r", call_id="c")
    types = [e.type async for e in ledger.inner.read()]
    assert (runs, ledger.refused, types) == (
        [],
        3,
        timeline("call.ambiguous"),
    )
    # The projection is back where it stood: nothing claimed, the call not in flight.
    assert (executor.state.effects, executor.state.inflight) == ({}, {})


_RACER = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from agent_adapter import Executor, Registry
    from agent_adapter.errors import AmbiguousEffect, DuplicateEffect
    from agent_adapter.ledger import SQLiteLedger

    db, runs, barrier, name, order = sys.argv[1:6]
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        with open(runs, "a") as f:
            f.write(name + "\\n")
        await asyncio.sleep(0.05)
        return "refunded"

    async def main() -> None:
        executor = await Executor.open(registry, ledger=SQLiteLedger(db))
        print("ready", flush=True)
        while not os.path.exists(barrier):
            time.sleep(0.001)
        try:
            await executor.call("refund", {"order_id": order}, run_id=name, call_id=order)
            print("succeeded", flush=True)
        except DuplicateEffect:
            print("duplicate", flush=True)
        except AmbiguousEffect:
            print("ambiguous", flush=True)
        finally:
            await executor.close()

    asyncio.run(main())
    """
)


def test_two_processes_racing_for_one_key_run_it_once(tmp_path: Path) -> None:
    """Real processes, released together, each claiming the same keys: one body per key."""
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    db, runs = tmp_path / "race.db", tmp_path / "runs.txt"
    outcomes: list[list[str]] = []
    for round_ in range(6):
        barrier = tmp_path / f"go{round_}"
        order = f"o{round_}"
        procs = [
            subprocess.Popen(
                [sys.executable, str(script), str(db), str(runs), str(barrier), name, order],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in ("p1", "p2")
        ]
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        barrier.touch()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            results.append(out.strip())
        outcomes.append(sorted(results))
    lines = runs.read_text().splitlines()
    assert len(lines) == 6, lines  # one body per key, never two
    for result in outcomes:
        assert result[1] == "succeeded" and result[0] in ("ambiguous", "duplicate"), outcomes
