"""Crash tests: real child processes killed with SIGKILL, then the ledger file reopened."""

from __future__ import annotations

import ast
import time
from collections.abc import Iterator
from pathlib import Path

import _ledger_worker as worker
import msgspec
import pytest
from _child import Child

from agent_adapter import Executor
from agent_adapter.errors import AmbiguousEffect, DuplicateEffect, EffectInFlight
from agent_adapter.ledger import (
    CallAmbiguous,
    CallDuplicate,
    EffectClaimed,
    EffectRecord,
    EffectResolution,
    EffectResolved,
    Event,
    MemoryLedger,
    Problem,
    SQLiteLedger,
    Verification,
    replay,
)


def later() -> float:
    """The reader's clock an hour on: a killed holder's 30 s lease has expired by then."""
    return time.time() + 3_600.0


def without_holders(events: list[Event]) -> list[Event]:
    """``events`` with each claim's holder (a random executor id, the writer's pid and its
    start) and the chain fields (which cover them) blanked, for comparing two runs' ledgers."""
    out: list[Event] = []
    for e in events:
        if isinstance(e, EffectClaimed):
            assert e.holder and e.pid and e.host and e.lease_until == e.ts + 30.0
            e = msgspec.structs.replace(e, holder="", pid=0, pid_start=0)
        out.append(msgspec.structs.replace(e, prev="", hash=""))
    return out


@pytest.fixture(autouse=True)
def bodies() -> Iterator[list[tuple[str, str]]]:
    """The tool bodies that ran in this (the parent) process during the test."""
    worker.BODIES.clear()
    yield worker.BODIES
    worker.BODIES.clear()


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
async def test_acknowledged_appends_survive_sigkill(tmp_path: Path, synchronous: str) -> None:
    """Every append that returned before the kill is in the reopened file; the chain verifies.

    A killed process is a process crash: NORMAL survives it as well as FULL (only a power
    cut tells them apart, which a test cannot cause).
    """
    path = tmp_path / "l.db"
    child = await Child.start("append-stream", str(path), "8", synchronous)
    try:
        for _ in range(400):
            await child.expect("acked ")
        await child.kill()
        lines = child.lines + await child.rest()
    finally:
        await child.close()
    acked = sorted(
        (int(seq), call_id, digest)
        for _, seq, call_id, digest in (line.split() for line in lines if line.startswith("acked "))
    )
    assert len(acked) >= 400
    async with SQLiteLedger(path) as ledger:
        stored = [event async for event in ledger.read()]
        assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
        by_seq = {e.seq: (e.seq, e.call_id, e.hash) for e in stored}
        assert [by_seq.get(seq) for seq, _, _ in acked] == acked
        assert await ledger.verify() == Verification(ok=True, checked=len(stored))
        # The file takes appends again, continuing the chain.
        more = await ledger.append(stored[0].__copy__())
        assert (more.seq, more.prev) == (len(stored) + 1, stored[-1].hash)


async def kill_during_effect(path: Path) -> None:
    """Run the effect tool in a child and SIGKILL it while the body runs."""
    child = await Child.start("effect-body", str(path))
    try:
        await child.expect("body-started")
        await child.kill()
    finally:
        await child.close()


async def test_kill_during_effect_body_leaves_an_ambiguous_call(
    tmp_path: Path, bodies: list[tuple[str, str]]
) -> None:
    """A body killed mid-run is reported ambiguous, and its key refuses to run again."""
    path = tmp_path / "l.db"
    await kill_during_effect(path)
    async with SQLiteLedger(path) as ledger:
        events = [event async for event in ledger.read()]
        verification = await ledger.verify()
    # Write-ahead: everything that authorized the body was durable before it ran.
    assert [e.type for e in events] == [
        "call.requested",
        "call.validated",
        "effect.claimed",
        "call.started",
    ]
    claim = events[2]
    assert isinstance(claim, EffectClaimed)
    until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(claim.lease_until))
    assert replay(events, verification).problems() == [
        Problem(
            kind="ambiguous",
            message="effect charge:A1: call c1 (charge) started and has no outcome: its "
            f"holder, executor {claim.holder} (pid {claim.pid} on host {claim.host}), leased "
            f"the key until {until}; until then it may still be running, after that its "
            "process died; the effect may or may not have happened, and no effect.resolved "
            "says which",
            run_id="r1",
            call_id="c1",
            seq=1,
            key="charge:A1",
        )
    ]
    # The claim names its holder's process by pid and start time (/proc, field 22).
    assert claim.pid_start > 0
    # Read at once on the same host, its lease still live: the killed holder's pid is gone,
    # so the key is ambiguous at once, not "in flight, retry later" for the whole lease.
    async with await Executor.open(worker.build_registry(), ledger=SQLiteLedger(path)) as executor:
        assert (executor.ambiguous_effects(), list(executor.in_flight_effects())) == (
            {"charge:A1": ("r1", "c1")},
            [],
        )
        with pytest.raises(AmbiguousEffect) as at_once:
            await executor.call("charge", {"order_id": "A1"}, run_id="r3", call_id="c3")
        assert not isinstance(at_once.value, EffectInFlight)
        assert "is no longer running (its process is gone)" in str(at_once.value)
    # Once its lease has expired (the reader's clock an hour on), the key is ambiguous.
    async with await Executor.open(
        worker.build_registry(), ledger=SQLiteLedger(path), clock=later
    ) as executor:
        assert executor.ambiguous_effects() == {"charge:A1": ("r1", "c1")}
        with pytest.raises(AmbiguousEffect) as caught:
            await executor.call("charge", {"order_id": "A1"}, run_id="r2", call_id="c2")
        assert caught.value.key == "charge:A1"
        # The killed call's own ids do not run again either.
        with pytest.raises(AmbiguousEffect):
            await executor.call("charge", {"order_id": "A1"}, run_id="r1", call_id="c1")
        [refused] = [e async for e in executor.ledger.read(call_id="c2")][-1:]
        assert isinstance(refused, CallAmbiguous)
        assert refused.key == "charge:A1"
    assert bodies == []


@pytest.mark.parametrize("outcome", ["failed", "committed"])
async def test_resolving_an_ambiguous_effect(
    tmp_path: Path, bodies: list[tuple[str, str]], outcome: str
) -> None:
    """resolve_effect is recorded; "failed" frees the key, "committed" makes it a duplicate."""
    path = tmp_path / "l.db"
    await kill_during_effect(path)
    async with await Executor.open(
        worker.build_registry(), ledger=SQLiteLedger(path), clock=later
    ) as executor:
        await executor.resolve_effect(
            "charge:A1", outcome=outcome, reviewer="ops", reason="checked the PSP"
        )
        [resolved] = [e async for e in executor.ledger.read(after=4)]
        assert resolved == EffectResolved(
            seq=5,
            ts=resolved.ts,
            run_id="r1",
            call_id="c1",
            key="charge:A1",
            outcome=outcome,
            reviewer="ops",
            reason="checked the PSP",
            prev=resolved.prev,
            hash=resolved.hash,
        )
    # The resolution is in the file: a new executor (a restart) sees it too, and the audit
    # reports the key as resolved, the killed call as neither ambiguous nor unfinished.
    async with SQLiteLedger(path) as ledger:
        events = [e async for e in ledger.read()]
        audit = replay(events, await ledger.verify())
    [claim] = [e for e in events if isinstance(e, EffectClaimed)]
    assert (audit.problems(), audit.effects) == (
        [],
        {
            "charge:A1": EffectRecord(
                key="charge:A1",
                run_id="r1",
                call_id="c1",
                tool="charge",
                digest=audit.call("r1", "c1").digest,
                seq=3,
                outcome=None,
                status="free" if outcome == "failed" else "committed",
                resolution=EffectResolution(
                    outcome=outcome, reviewer="ops", reason="checked the PSP", seq=5
                ),
                holder=claim.holder,
                pid=claim.pid,
                host=claim.host,
                lease_until=claim.lease_until,
            )
        },
    )
    async with await Executor.open(
        worker.build_registry(), ledger=SQLiteLedger(path), clock=later
    ) as executor:
        assert executor.ambiguous_effects() == {}
        if outcome == "failed":
            value = await executor.call("charge", {"order_id": "A1"}, run_id="r3", call_id="c3")
            assert value == "charged-A1"
            assert bodies == [("charge", "A1")]
        else:
            with pytest.raises(DuplicateEffect) as caught:
                await executor.call("charge", {"order_id": "A1"}, run_id="r3", call_id="c3")
            assert (caught.value.key, caught.value.call_id) == ("charge:A1", "c1")
            [refused] = [e async for e in executor.ledger.read(call_id="c3")][-1:]
            assert isinstance(refused, CallDuplicate)
            assert bodies == []


async def test_restart_mid_run_continues_as_before(
    tmp_path: Path, bodies: list[tuple[str, str]]
) -> None:
    """Killed mid-run and reopened, limits, cache and effects go on exactly as without the kill.

    The restarted ledger, chain included, equals that of the same run done in one process.
    """
    path = tmp_path / "l.db"
    child = await Child.start("phase-a", str(path))
    try:
        line = await child.expect("phase-a ")
        await child.kill()
    finally:
        await child.close()
    results_a = ast.literal_eval(line.removeprefix("phase-a "))

    clock = worker.SteppedClock()
    executor = await Executor.open(
        worker.build_registry(), ledger=SQLiteLedger(path), limits=worker.LIMITS, clock=clock
    )
    async with executor:
        results_b = await worker.run_steps(executor, clock, worker.PHASE_B)
        restarted = [event async for event in executor.ledger.read()]
    assert bodies == [("lookup", "x")]  # only the expired cache entry ran again
    assert [kind for kind, _ in results_b] == [
        "value",  # c1 repeated: the recorded value
        "value",  # c3: cache hit
        "duplicate-effect",  # c4: charge:A1 was committed by c2 before the kill
        "run-limit-exceeded",  # c5: the fifth call of r1 (max_calls=4)
        "value",  # c6 in r2, 70 s later: the cache entry expired by event time
    ]

    bodies.clear()
    clock = worker.SteppedClock()
    reference = Executor(
        worker.build_registry(), ledger=MemoryLedger(), limits=worker.LIMITS, clock=clock
    )
    async with reference:
        expected_a = await worker.run_steps(reference, clock, worker.PHASE_A)
        expected_b = await worker.run_steps(reference, clock, worker.PHASE_B)
        uninterrupted = [event async for event in reference.ledger.read()]
    assert (results_a, results_b) == (expected_a, expected_b)
    assert without_holders(restarted) == without_holders(uninterrupted)
