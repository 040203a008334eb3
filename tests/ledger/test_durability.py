"""``Registry.tool(durability="outcome")``: a read-only call committed once, with its outcome.

What it may lose is the point of these tests: a crash during such a body leaves no
record that the call started (so a restart runs it again), while a write-ahead call's
start is on disk before its body runs. Tools with an effect key or ``confirm`` cannot
use it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import _ledger_worker as worker
import pytest
from _child import Child
from _helpers import Batches

from agent_adapter import Executor, Registry
from agent_adapter.errors import AmbiguousEffect, ToolFailed, ToolUsageError
from agent_adapter.ledger import SQLiteLedger, Verification


def tools(registry: Registry) -> None:
    """``peek`` (outcome) and ``look`` (write-ahead), both read-only; ``broken`` fails."""

    @registry.tool(durability="outcome")
    async def peek(q: str) -> str:
        """Read-only."""
        return f"seen-{q}"

    @registry.tool
    async def look(q: str) -> str:
        """Read-only, write-ahead."""
        return f"seen-{q}"

    @registry.tool(durability="outcome")
    async def broken(q: str) -> str:
        """Fails."""
        raise RuntimeError("no")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"effect": "peek:{q}"},
            'tool peek: durability="outcome" is refused for a tool with an effect key: its '
            "claim must be durable before the body runs",
        ),
        (
            {"confirm": True},
            'tool peek: durability="outcome" is refused for a tool with confirm: its '
            "approval must be durable before the approved arguments run",
        ),
        (
            {"confirm": lambda call, ctx: False},
            'tool peek: durability="outcome" is refused for a tool with confirm: its '
            "approval must be durable before the approved arguments run",
        ),
        (
            {"durability": "fsync"},
            'tool peek: durability must be "write-ahead" or "outcome", not \'fsync\'',
        ),
    ],
)
def test_outcome_durability_is_refused_where_a_crash_could_repeat_an_effect(
    options: dict[str, object], message: str
) -> None:
    """An effect key or confirm needs its write-ahead: refused at registration, nothing
    registered (for both ways of registering a tool)."""
    kwargs: dict[str, object] = {"durability": "outcome", **options}
    registry = Registry()

    async def peek(q: str) -> str:
        return q

    with pytest.raises(ToolUsageError) as caught:
        registry.tool(peek, **kwargs)  # type: ignore[call-overload]
    assert str(caught.value) == message
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    with pytest.raises(ToolUsageError) as caught:
        registry.add_schema_tool("peek", schema, peek, **kwargs)  # type: ignore[arg-type]
    assert str(caught.value) == message
    assert len(registry) == 0


async def test_an_outcome_call_is_one_commit_and_a_write_ahead_call_two() -> None:
    """The same four events in both modes; outcome appends them in one batch."""
    registry = Registry()
    tools(registry)
    ledger = Batches()
    async with Executor(registry, ledger=ledger) as executor:
        assert await executor.call("peek", {"q": "a"}, run_id="r", call_id="c1") == "seen-a"
        assert await executor.call("look", {"q": "a"}, run_id="r", call_id="c2") == "seen-a"
        with pytest.raises(ToolFailed):
            await executor.call("broken", {"q": "a"}, run_id="r", call_id="c3")
        # A repeat of a finished outcome call replays it (its events are all on record).
        assert await executor.call("peek", {"q": "a"}, run_id="r", call_id="c1") == "seen-a"
    started = ["call.requested", "call.validated", "call.started"]
    assert ledger.batches == [
        [*started, "call.succeeded"],
        started,
        ["call.succeeded"],
        [*started, "call.failed"],
        ["call.replayed"],
    ]
    assert [(e.seq, e.call_id, e.type) async for e in ledger.read()] == [
        (1, "c1", "call.requested"),
        (2, "c1", "call.validated"),
        (3, "c1", "call.started"),
        (4, "c1", "call.succeeded"),
        (5, "c2", "call.requested"),
        (6, "c2", "call.validated"),
        (7, "c2", "call.started"),
        (8, "c2", "call.succeeded"),
        (9, "c3", "call.requested"),
        (10, "c3", "call.validated"),
        (11, "c3", "call.started"),
        (12, "c3", "call.failed"),
        (13, "c1", "call.replayed"),
    ]
    assert await ledger.verify() == Verification(ok=True, checked=13)


async def test_while_an_outcome_body_runs_nothing_of_it_is_on_disk(tmp_path: Path) -> None:
    """Read through a second connection while both bodies wait: the write-ahead call's
    start is committed, the outcome call's is not; both are once they finish."""
    path = tmp_path / "l.db"
    registry = Registry()
    entered = {"c1": asyncio.Event(), "c2": asyncio.Event()}
    go = asyncio.Event()

    async def wait(q: str) -> str:
        entered[q].set()
        await go.wait()
        return q

    registry.tool(wait, name="peek", durability="outcome")
    registry.tool(wait, name="look")
    async with await Executor.open(registry, ledger=SQLiteLedger(path)) as executor:
        both = asyncio.gather(
            executor.call("peek", {"q": "c1"}, run_id="r", call_id="c1"),
            executor.call("look", {"q": "c2"}, run_id="r", call_id="c2"),
        )
        await entered["c1"].wait()
        await entered["c2"].wait()
        async with SQLiteLedger(path, readonly=True) as reader:
            during = [(e.call_id, e.type) async for e in reader.read()]
        go.set()
        assert await both == ["c1", "c2"]
        async with SQLiteLedger(path, readonly=True) as reader:
            after = sorted([(e.call_id, e.type) async for e in reader.read()])
    assert during == [("c2", "call.requested"), ("c2", "call.validated"), ("c2", "call.started")]
    assert after == sorted(
        (call_id, kind)
        for call_id in ("c1", "c2")
        for kind in ("call.requested", "call.validated", "call.started", "call.succeeded")
    )


async def test_sigkill_during_an_outcome_body_loses_only_that_it_started(
    tmp_path: Path,
) -> None:
    """Killed while an outcome call (c2) and a write-ahead call (c3) run: c3's start is on
    disk (a restart refuses to run it again: ambiguous), c2 left nothing (a restart runs
    it as a new call); c1, finished before, is whole. The chain verifies."""
    path = tmp_path / "l.db"
    child = await Child.start("durability-bodies", str(path))
    try:
        await child.expect("c1-done")
        seen = {await child.expect("body-started "), await child.expect("body-started ")}
        assert seen == {"body-started c2", "body-started c3"}
        await child.kill()
    finally:
        await child.close()
    async with SQLiteLedger(path) as ledger:
        stored = [(e.seq, e.call_id, e.type) async for e in ledger.read()]
        assert await ledger.verify() == Verification(ok=True, checked=7)
    assert stored == [
        (1, "c1", "call.requested"),
        (2, "c1", "call.validated"),
        (3, "c1", "call.started"),
        (4, "c1", "call.succeeded"),
        (5, "c3", "call.requested"),
        (6, "c3", "call.validated"),
        (7, "c3", "call.started"),
    ]
    worker.BODIES.clear()
    registry = worker.durability_registry(False)
    async with await Executor.open(registry, ledger=SQLiteLedger(path)) as executor:
        assert await executor.call("peek", {"call_id": "c2"}, run_id="r1", call_id="c2") == (
            "seen-c2"
        )
        with pytest.raises(AmbiguousEffect):
            await executor.call("look", {"call_id": "c3"}, run_id="r1", call_id="c3")
    assert worker.BODIES == [("peek", "c2")]
    worker.BODIES.clear()
