"""The plain call's straight path (``Plan.straight``) records what the full path records.

A call with nothing to decide (an async body; no cache, effect key, timeout, output
guard, ``on_event`` or ``after_tool`` hook) skips the steps that would do nothing, and a
MemoryLedger is written with ``append_now`` (no coroutine). An ``after_tool`` hook that
does nothing sends the same call down the full path: both must append the same events,
in the same batches, and end with the same error.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _helpers import Batches, timeline

from agent_adapter import CallContext, Executor, Registry
from agent_adapter.engine import _executor
from agent_adapter.errors import AdapterError, ToolError
from agent_adapter.ledger import Event, MemoryLedger

# Fields that differ between two runs of the same call (times, chain positions).
_VARYING = {"ts", "duration_ms", "seq", "prev", "hash"}


class NoOpAfter:
    async def after_tool(self, call: Any, outcome: Any) -> None:
        return None


def _registry(gate: asyncio.Event | None = None) -> Registry:
    registry = Registry()

    @registry.tool
    async def ok(n: int) -> dict[str, int]:
        """Succeeds."""
        return {"n": n}

    @registry.tool
    async def boom(n: int) -> str:
        """Raises a plain exception."""
        raise ValueError(f"bad {n}")

    @registry.tool
    async def refuse(n: int) -> str:
        """Says it did nothing."""
        raise ToolError("nothing done")

    @registry.tool
    async def unstorable(n: int) -> str:
        """Returns a lone surrogate: the ledger cannot store it."""
        return "\udc80"

    @registry.tool(durability="outcome")
    async def peek(n: int) -> int:
        """Read-only, committed with its outcome."""
        return n

    @registry.tool
    async def hang(n: int) -> str:
        """Waits for the test to cancel it."""
        assert gate is not None
        gate.set()
        await asyncio.Event().wait()
        return "never"

    return registry


def _shape(event: Event) -> dict[str, Any]:
    import msgspec

    fields = msgspec.structs.asdict(event)
    return {k: v for k, v in fields.items() if k not in _VARYING} | {"type": event.type}


async def _run(
    tool: str, args: Any, monkeypatch: pytest.MonkeyPatch, *, full: bool
) -> tuple[list[dict[str, Any]], str, int]:
    """Events (without times and chain fields), the error kind ("" for a value), and how
    many times the straight path ran."""
    gate = asyncio.Event()
    registry = _registry(gate)
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[NoOpAfter()] if full else [])
    execute = _executor._execute
    taken = 0

    async def counted(pipe: Any, run: Any, call: Any, plan: Any) -> Any:
        # The straight path: a plan with nothing to decide, for a call whose arguments
        # no code saw, on an executor nobody observes.
        nonlocal taken
        taken += plan.straight and not (run.exposed or pipe.observed)
        return await execute(pipe, run, call, plan)

    monkeypatch.setattr(_executor, "_execute", counted)
    ctx = CallContext(run_id="run-1", call_id="call-1")
    kind = ""
    if tool == "hang":
        task = asyncio.ensure_future(executor.run_spec(registry.get(tool), args, ctx))
        await gate.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        kind = "cancelled"
    else:
        try:
            await executor.run_spec(registry.get(tool), args, ctx)
        except AdapterError as exc:
            kind = exc.kind
    assert (await ledger.verify()).ok
    return [_shape(e) async for e in ledger.read()], kind, taken


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("ok", '{"n": 1}'),
        ("ok", {"n": 2}),
        ("ok", '{"n": "not a number"}'),
        ("boom", '{"n": 3}'),
        ("refuse", '{"n": 4}'),
        ("unstorable", '{"n": 5}'),
        ("peek", '{"n": 6}'),
        ("hang", '{"n": 7}'),
    ],
)
async def test_the_plain_path_records_what_the_full_path_records(
    tool: str, args: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    events, kind, taken = await _run(tool, args, monkeypatch, full=False)
    full_events, full_kind, full_taken = await _run(tool, args, monkeypatch, full=True)
    assert (events, kind) == (full_events, full_kind)
    reached_body = "call.started" in [e["type"] for e in events]
    assert (taken, full_taken) == (1 if reached_body else 0, 0)
    assert len([e for e in events if e["type"] == "call.requested"]) == 1


async def test_an_overridden_append_many_sees_every_append_of_a_plain_call() -> None:
    """``append_now`` is used only when neither append method is overridden."""
    ledger = Batches()
    registry = _registry()
    executor = Executor(registry, ledger=ledger)
    await executor.run_spec(registry.get("ok"), '{"n": 1}', CallContext(run_id="r", call_id="a"))
    await executor.run_spec(registry.get("peek"), '{"n": 1}', CallContext(run_id="r", call_id="b"))
    assert ledger.batches == [
        ["call.requested", "call.validated", "call.started"],
        ["call.succeeded"],
        timeline("call.succeeded"),
    ]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_subscriber_that_arrives_while_the_body_runs_sees_the_outcome(
    store: str, tmp_path: Any
) -> None:
    """subscribe() holds "from this call on": a plain call whose body is running when
    someone subscribes still hands its outcome to the subscriber, as the full path's
    Executor._end does (MemoryLedger's append_now and a durable ledger alike)."""
    from agent_adapter.ledger import SQLiteLedger

    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(order_id: str) -> str:
        entered.set()
        await release.wait()
        return "done"

    registry = Registry()
    spec = registry.tool(slow)
    ledger = MemoryLedger() if store == "memory" else SQLiteLedger(tmp_path / "l.db")
    async with Executor(registry, ledger=ledger) as executor:
        call = asyncio.ensure_future(
            executor.run_spec(spec, {"order_id": "o1"}, CallContext(run_id="r", call_id="c1"))
        )
        await entered.wait()
        live = executor.subscribe()
        release.set()
        assert await call == "done"
        seen = await asyncio.wait_for(anext(aiter(live)), timeout=30)
        assert (seen.type, seen.call_id) == ("call.succeeded", "c1")
        await live.aclose()
