"""Several real processes on one ledger file: appends, reads and deferred approvals."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import _ledger_worker as worker
import pytest
from _child import Child

from agent_adapter import DeferredApproval, Executor
from agent_adapter.errors import ApprovalPending
from agent_adapter.ledger import (
    ApprovalConsumed,
    ApprovalGranted,
    CallRequested,
    CallStarted,
    SQLiteLedger,
    Verification,
)


@pytest.fixture(autouse=True)
def bodies() -> Iterator[list[tuple[str, str]]]:
    """The tool bodies that ran in this (the parent) process during the test."""
    worker.BODIES.clear()
    yield worker.BODIES
    worker.BODIES.clear()


async def test_two_processes_append_concurrently(tmp_path: Path) -> None:
    """Two processes appending at once to one file leave a gap-free, valid chain."""
    path = tmp_path / "l.db"
    n = 1500
    children = [await Child.start("append-n", str(path), tag, str(n)) for tag in ("p", "q")]
    try:
        for child in children:
            await child.expect("ready")
        for child in children:  # released together, so their transactions interleave
            await child.send("go")
        for child in children:
            await child.expect("done")
            assert await child.wait() == 0
    finally:
        for child in children:
            await child.close()
    async with SQLiteLedger(path) as ledger:
        events = [event async for event in ledger.read()]
        assert [e.seq for e in events] == list(range(1, 2 * n + 1))
        assert sorted(e.call_id for e in events) == sorted(
            f"{tag}-{i}" for tag in ("p", "q") for i in range(n)
        )
        assert await ledger.verify() == Verification(ok=True, checked=2 * n)


async def test_reader_in_another_process_sees_commits(tmp_path: Path) -> None:
    """A reader process sees exactly what this process has committed, as it commits."""
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        await ledger.open()
        child = await Child.start("read-on-demand", str(path))
        try:
            await child.expect("ready")
            await child.send("read")
            assert await child.expect("seen ") == "seen 0 0 -"
            first = await ledger.append_many(
                [CallRequested(run_id="r", call_id=f"c{i}", tool="t") for i in range(5)]
            )
            await child.send("read")
            assert await child.expect("seen ") == f"seen 5 5 {first[-1].hash}"
            last = await ledger.append(CallRequested(run_id="r", call_id="c5", tool="t"))
            await child.send("read")
            assert await child.expect("seen ") == f"seen 6 6 {last.hash}"
            await child.send("exit")
            assert await child.wait() == 0
        finally:
            await child.close()


async def answer_in_child(path: Path, request_id: str, approved: str = "yes") -> None:
    """Answer a deferred request from another process (as the CLI would)."""
    child = await Child.start("answer", str(path), request_id, approved)
    try:
        await child.expect("answered")
        assert await child.wait() == 0
    finally:
        await child.close()


async def test_deferred_approval_answered_by_another_process(
    tmp_path: Path, bodies: list[tuple[str, str]]
) -> None:
    """A decision recorded by another process is seen on the next ask and used once."""
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        deferred = DeferredApproval(ledger)
        executor = await Executor.open(worker.build_registry(), ledger=ledger, approval=deferred)
        with pytest.raises(ApprovalPending) as caught:
            await executor.call("deploy", {"env": "prod"}, run_id="r1", call_id="c1")
        request_id = caught.value.request_id
        assert [p.request_id for p in await deferred.pending()] == [request_id]

        await answer_in_child(path, request_id)

        assert await executor.call("deploy", {"env": "prod"}, run_id="r1", call_id="c2") == (
            "deployed-prod"
        )
        assert bodies == [("deploy", "prod")]
        granted = [e async for e in ledger.read(call_id="c2") if isinstance(e, ApprovalGranted)]
        assert [(g.reviewer, g.source, g.reason) for g in granted] == [("alice", "port", "checked")]
        # One decision authorizes one execution: the same arguments again wait for review.
        with pytest.raises(ApprovalPending) as again:
            await executor.call("deploy", {"env": "prod"}, run_id="r1", call_id="c3")
        assert again.value.request_id != request_id
        assert bodies == [("deploy", "prod")]


async def test_pending_request_survives_a_restart(
    tmp_path: Path, bodies: list[tuple[str, str]]
) -> None:
    """A request left pending by one executor is listed, answered and used after a restart."""
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        executor = await Executor.open(
            worker.build_registry(), ledger=ledger, approval=DeferredApproval(ledger)
        )
        with pytest.raises(ApprovalPending) as caught:
            await executor.call("deploy", {"env": "prod"}, run_id="r1", call_id="c1")
    request_id = caught.value.request_id

    async with SQLiteLedger(path) as ledger:  # the restarted process
        deferred = DeferredApproval(ledger)
        [pending] = await deferred.pending()
        assert (pending.request_id, pending.call_id, pending.args) == (
            request_id,
            "c1",
            {"env": "prod"},
        )
        await answer_in_child(path, request_id)
        assert await deferred.pending() == []
        executor = await Executor.open(worker.build_registry(), ledger=ledger, approval=deferred)
        value = await executor.call("deploy", {"env": "prod"}, run_id="r1", call_id="c2")
        assert value == "deployed-prod"
        assert bodies == [("deploy", "prod")]


async def test_one_decision_runs_once_across_processes(tmp_path: Path) -> None:
    """Two processes racing for one answered decision: exactly one of them runs the tool."""
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        deferred = DeferredApproval(ledger)
        executor = await Executor.open(worker.build_registry(), ledger=ledger, approval=deferred)
        with pytest.raises(ApprovalPending) as caught:
            await executor.call("deploy", {"env": "prod"}, run_id="r1", call_id="c1")
        await deferred.answer(caught.value.request_id, approved=True, reviewer="bob")

    children = [await Child.start("deploy", str(path), call_id) for call_id in ("c2", "c3")]
    try:
        for child in children:
            await child.expect("ready")
        for child in children:
            await child.send("go")
        results = sorted([await child.expect("result ") for child in children])
        for child in children:
            assert await child.wait() == 0
    finally:
        for child in children:
            await child.close()
    assert results == ["result approval-pending", "result deployed-prod"]

    async with SQLiteLedger(path) as ledger:
        events = [event async for event in ledger.read()]
        assert await ledger.verify() == Verification(ok=True, checked=len(events))
    consumed = [e for e in events if isinstance(e, ApprovalConsumed)]
    started = [e for e in events if isinstance(e, CallStarted)]
    assert len(started) == 1
    # The winner is the first consumption in seq order, and it is the call that ran.
    assert started[0].call_id == consumed[0].call_id


async def test_appends_from_tasks_and_a_process_interleave(tmp_path: Path) -> None:
    """This process's group commits and another process's commits share one valid chain."""
    path = tmp_path / "l.db"
    child = await Child.start("append-n", str(path), "q", "600")
    try:
        async with SQLiteLedger(path) as ledger:
            await ledger.open()
            await child.expect("ready")
            await child.send("go")
            mine = await asyncio.gather(
                *(
                    ledger.append(CallRequested(run_id="p", call_id=f"p-{i}", tool="t"))
                    for i in range(600)
                )
            )
            await child.expect("done")
            assert await child.wait() == 0
            events = [event async for event in ledger.read()]
            assert [e.seq for e in events] == list(range(1, 1201))
            assert sorted((e.seq, e.call_id) for e in mine) == [
                (e.seq, e.call_id) for e in events if e.run_id == "p"
            ]
            assert await ledger.verify() == Verification(ok=True, checked=1200)
    finally:
        await child.close()
