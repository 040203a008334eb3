"""Effect claims with a holder and a lease: a live holder's key is in flight, never
resolvable without force; an expired one is ambiguous (issue 11, item 1)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agent_adapter import Executor, Registry
from agent_adapter.cli import main
from agent_adapter.errors import EffectInFlight, ToolUsageError
from agent_adapter.ledger import (
    CallStarted,
    EffectClaimed,
    EffectRenewed,
    EffectResolved,
    MemoryLedger,
    Problem,
    SQLiteLedger,
    replay,
)

_HOLDER = textwrap.dedent(
    """
    import asyncio, os, sys
    from agent_adapter import Executor, Registry
    from agent_adapter.ledger import SQLiteLedger

    db, runs = sys.argv[1:3]
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        with open(runs, "a") as f:
            f.write("A\\n")
        print("entered", os.getpid(), flush=True)
        await asyncio.Event().wait()  # runs until killed
        return "refunded"

    async def main() -> None:
        executor = await Executor.open(registry, ledger=SQLiteLedger(db))
        await executor.call("refund", {"order_id": "o1"}, run_id="ra", call_id="a1")

    asyncio.run(main())
    """
)


def _refunds(runs: list[str]) -> Registry:
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        runs.append(order_id)
        return "refunded"

    return registry


def _later() -> float:
    """The reader's clock an hour on: the killed holder's 30 s lease has expired."""
    return time.time() + 3_600.0


async def test_a_live_holders_key_is_never_resolvable_and_an_expired_one_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Replica A's refund runs in a real process: replica B's call is refused as in flight
    (naming A's pid), `effects list` shows it in flight, `effects resolve --failed` is
    refused; once A is SIGKILLed and its lease expired, the key is ambiguous and resolves."""
    db, runs_file = tmp_path / "shared.db", tmp_path / "runs"
    async with SQLiteLedger(db):
        pass  # created before either replica opens it
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, str(db), str(runs_file), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        line = (await child.stdout.readline()).decode().split()
        assert line == ["entered", str(child.pid)]
        runs: list[str] = []
        async with await Executor.open(_refunds(runs), ledger=SQLiteLedger(db)) as b:
            with pytest.raises(EffectInFlight) as info:
                await b.call("refund", {"order_id": "o1"}, run_id="rb", call_id="b1")
            assert (info.value.pid, "resolve" in str(info.value)) == (child.pid, False)
            assert f"(pid {child.pid} on host " in str(info.value)
            with pytest.raises(ToolUsageError, match="in flight, not ambiguous"):
                await b.resolve_effect("refund:o1", outcome="failed", reviewer="ops")
        capsys.readouterr()
        code = await asyncio.to_thread(main, ["--no-color", "effects", "list", "--db", str(db)])
        out = capsys.readouterr().out.splitlines()
        assert (code, out[1].split()[:6]) == (
            0,
            ["refund:o1", "in", "flight", "ra", "a1", "executor"],
        )
        assert f"(pid {child.pid} on host" in out[1]
        argv = ["effects", "resolve", "refund:o1", "--failed", "--reviewer", "x", "--db", str(db)]
        code = await asyncio.to_thread(main, argv)
        assert code != 0
        assert "is in flight, not ambiguous" in capsys.readouterr().err
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert runs_file.read_text() == "A\n" and runs == []  # the refund body ran once
    # A was killed: once its lease has expired (the reader's clock an hour on), the key
    # is ambiguous, resolvable, and the audit reports no resolution in flight.
    async with await Executor.open(_refunds(runs), ledger=SQLiteLedger(db), clock=_later) as b:
        assert (b.ambiguous_effects(), b.in_flight_effects()) == ({"refund:o1": ("ra", "a1")}, {})
        await b.resolve_effect("refund:o1", outcome="failed", reviewer="ops", reason="PSP: none")
        assert await b.call("refund", {"order_id": "o1"}, run_id="rb", call_id="b2") == "refunded"
    async with SQLiteLedger(db) as ledger:
        problems = replay([e async for e in ledger.read()]).problems()
    assert problems == []


async def test_a_forced_resolution_of_a_live_key_is_an_audit_problem() -> None:
    """resolve_effect(force=True) on an in-flight key is recorded as forced, and the audit
    reports it as resolved-in-flight (the effect may have run twice)."""
    gate, entered = asyncio.Event(), asyncio.Event()
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        entered.set()
        await gate.wait()
        return "refunded"

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=lambda: 1_000.0)
    first = asyncio.create_task(
        executor.call("refund", {"order_id": "o1"}, run_id="r", call_id="c")
    )
    await entered.wait()
    await executor.resolve_effect("refund:o1", outcome="failed", reviewer="ops", force=True)
    gate.set()
    assert await first == "refunded"
    events = [e async for e in ledger.read()]
    [resolved] = [e for e in events if e.type == "effect.resolved"]
    assert (resolved.forced, resolved.seq) == (True, 5)  # type: ignore[attr-defined]
    assert replay(events).problems() == [
        Problem(
            kind="resolved-in-flight",
            message=(
                "effect refund:o1: resolved as failed forced past the lease by ops (seq 5) "
                f"while call c (refund) was in flight: its holder, executor "
                f"{executor.executor_id} (pid {os.getpid()} on host {events[2].host}), held "  # type: ignore[attr-defined]
                "a lease until 1970-01-01 00:17:10 UTC; its body may have been running, so the "
                "effect may "
                "have run twice"
            ),
            run_id="r",
            call_id="c",
            seq=5,
            key="refund:o1",
        )
    ]


async def test_the_cli_resolves_a_live_key_only_with_force_and_the_audit_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`effects resolve --failed` refuses a key whose holder runs now, saying why and never
    advising to resolve it; `--force` records it as forced, and `ledger audit` then fails
    with resolved-in-flight."""
    db = tmp_path / "ledger.db"
    gate, entered = asyncio.Event(), asyncio.Event()
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        entered.set()
        await gate.wait()
        return "refunded"

    argv = ["--no-color", "effects", "resolve", "refund:o1", "--failed", "--reviewer", "ops"]
    async with await Executor.open(registry, ledger=SQLiteLedger(db)) as executor:
        first = asyncio.create_task(
            executor.call("refund", {"order_id": "o1"}, run_id="r", call_id="c")
        )
        await entered.wait()
        capsys.readouterr()
        refused = await asyncio.to_thread(main, [*argv, "--db", str(db)])
        err = capsys.readouterr().err
        assert (refused, err.count("\n")) == (1, 1)
        assert "is in flight, not ambiguous" in err and executor.executor_id in err
        forced = await asyncio.to_thread(main, [*argv, "--force", "--db", str(db)])
        capsys.readouterr()
        gate.set()
        assert await first == "refunded"
    async with SQLiteLedger(db, readonly=True) as ledger:
        [resolved] = [e async for e in ledger.read() if isinstance(e, EffectResolved)]
    assert (forced, resolved.outcome, resolved.forced, resolved.reviewer) == (
        0,
        "failed",
        True,
        "ops",
    )
    audited = await asyncio.to_thread(main, ["--no-color", "ledger", "audit", "--db", str(db)])
    out = capsys.readouterr().out
    assert (audited, out.count("resolved-in-flight (seq")) == (1, 1)


async def test_the_holder_renews_its_lease_while_the_body_runs() -> None:
    """A body that outlives a third of the lease appends effect.renewed; the lease moves."""
    gate, entered = asyncio.Event(), asyncio.Event()
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        entered.set()
        await gate.wait()
        return "refunded"

    ledger = MemoryLedger()
    ticks = iter(range(10_000))
    executor = Executor(registry, ledger=ledger, lease_s=0.03, clock=lambda: float(next(ticks)))
    events = executor.subscribe()
    first = asyncio.create_task(
        executor.call("refund", {"order_id": "o1"}, run_id="r", call_id="c")
    )
    await entered.wait()
    async for event in events:  # gated by the event itself, not by sleeping
        if isinstance(event, EffectRenewed):
            break
    assert (event.key, event.call_id, event.lease_until) == ("refund:o1", "c", event.ts + 0.03)
    assert executor.state.effects["refund:o1"].lease_until == event.lease_until
    gate.set()
    assert await first == "refunded"
    types = [e.type for e in [x async for x in ledger.read()]]
    # No renewal lands after the outcome.
    assert types[-1] == "call.succeeded" and "effect.renewed" in types


async def test_a_claim_without_a_lease_is_ambiguous_once_replayed() -> None:
    """An older version's claim (no holder, no lease) with no outcome: ambiguous, as before."""
    ledger = MemoryLedger()
    await ledger.append_many(
        [
            EffectClaimed(ts=1.0, run_id="r", call_id="c", tool="refund", key="refund:o1"),
            CallStarted(ts=1.0, run_id="r", call_id="c", tool="refund", effect_key="refund:o1"),
        ]
    )
    async with await Executor.open(_refunds([]), ledger=ledger) as executor:
        assert (executor.ambiguous_effects(), executor.in_flight_effects()) == (
            {"refund:o1": ("r", "c")},
            {},
        )
        await executor.resolve_effect("refund:o1", outcome="failed", reviewer="ops")
