"""A child process for the crash and multi-process tests: ``python _ledger_worker.py CMD ...``.

Each command prints a line when something the parent waits for has happened (an append
acknowledged, a tool body started, a phase done), so the parent synchronises on those
lines and never on time. Commands that model a crash block until the parent kills them.

The registry and the scripted run are here too, so the parent process rebuilds exactly
the same tools and steps after a restart.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

from agent_adapter import (
    CallContext,
    DeferredApproval,
    Executor,
    Registry,
    RunLimits,
)
from agent_adapter.errors import AdapterError
from agent_adapter.ledger import CallRequested, SQLiteLedger

#: Bodies that ran in this process, in order: (tool, argument).
BODIES: list[tuple[str, str]] = []
#: What the effect tool's body does: return, or announce itself and hang (a crash test).
HANG_IN_CHARGE = False


def say(line: str) -> None:
    """One line to the parent, flushed at once (the parent waits for it)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def build_registry() -> Registry:
    """The tools of the scripted run: a cached lookup, an effect, a plain tool, a gated one."""
    registry = Registry()

    @registry.tool(cache=60)
    async def lookup(q: str) -> str:
        """A read-only lookup, cached for 60 s by event time."""
        BODIES.append(("lookup", q))
        return f"result-{q}"

    @registry.tool(effect="charge:{order_id}")
    async def charge(order_id: str) -> str:
        """A side effect, idempotent by its effect key."""
        BODIES.append(("charge", order_id))
        if HANG_IN_CHARGE:
            say("body-started")
            await asyncio.Event().wait()  # the parent kills the process here
        return f"charged-{order_id}"

    @registry.tool
    async def noop() -> str:
        """Does nothing."""
        BODIES.append(("noop", ""))
        return "ok"

    @registry.tool(confirm=True)
    async def deploy(env: str) -> str:
        """Needs approval every time."""
        BODIES.append(("deploy", env))
        return f"deployed-{env}"

    return registry


LIMITS = RunLimits(max_calls=4)

#: The scripted run: (clock, run_id, call_id, tool, args). Phase A runs in a child that
#: is then killed; phase B runs after the restart.
PHASE_A: list[tuple[float, str, str, str, dict[str, Any]]] = [
    (1000.0, "r1", "c1", "lookup", {"q": "x"}),
    (1000.0, "r1", "c2", "charge", {"order_id": "A1"}),
]
PHASE_B: list[tuple[float, str, str, str, dict[str, Any]]] = [
    (1010.0, "r1", "c1", "lookup", {"q": "x"}),  # a repeat of a finished call: replayed
    (1010.0, "r1", "c3", "lookup", {"q": "x"}),  # cached (10 s old)
    (1010.0, "r1", "c4", "charge", {"order_id": "A1"}),  # effect committed: duplicate
    (1010.0, "r1", "c5", "noop", {}),  # max_calls=4 reached
    (1070.0, "r2", "c6", "lookup", {"q": "x"}),  # the cache entry is 70 s old: runs
]


class SteppedClock:
    """A clock the script sets per step."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def run_steps(
    executor: Executor,
    clock: SteppedClock,
    steps: list[tuple[float, str, str, str, dict[str, Any]]],
) -> list[tuple[str, Any]]:
    """Run ``steps``; each gives ("value", v) or (error kind, message)."""
    results: list[tuple[str, Any]] = []
    for now, run_id, call_id, tool, args in steps:
        clock.now = now
        spec = executor.registry.get(tool)
        try:
            value = await executor.run_spec(spec, args, CallContext(run_id=run_id, call_id=call_id))
        except AdapterError as exc:
            results.append((exc.kind, str(exc)))
        else:
            results.append(("value", value))
    return results


# -- commands -------------------------------------------------------------------------


async def append_stream(path: str, appenders: str, synchronous: str = "FULL") -> None:
    """Append forever from several tasks; print ``acked SEQ CALL_ID HASH`` after each."""
    async with SQLiteLedger(path, synchronous=synchronous) as ledger:

        async def appender(k: int) -> None:
            for i in range(10**9):
                event = await ledger.append(
                    CallRequested(ts=float(i), run_id=f"w{k}", call_id=f"w{k}-{i}", tool="t")
                )
                say(f"acked {event.seq} {event.call_id} {event.hash}")

        await asyncio.gather(*(appender(k) for k in range(int(appenders))))


async def effect_body(path: str) -> None:
    """Call the effect tool, whose body announces itself and hangs until killed."""
    global HANG_IN_CHARGE
    HANG_IN_CHARGE = True
    async with await Executor.open(build_registry(), ledger=SQLiteLedger(path)) as executor:
        await executor.call("charge", {"order_id": "A1"}, run_id="r1", call_id="c1")


def durability_registry(hang: bool) -> Registry:
    """Two read-only tools, one per durability; with ``hang`` their bodies announce
    themselves (``body-started CALL_ID``) and wait until the process is killed."""
    registry = Registry()

    async def body(call_id: str) -> str:
        BODIES.append(("peek", call_id))
        if hang:
            say(f"body-started {call_id}")
            await asyncio.Event().wait()  # the parent kills the process here
        return f"seen-{call_id}"

    @registry.tool(durability="outcome")
    async def peek(call_id: str) -> str:
        """Read-only: its pre-body events are committed with its outcome."""
        return await body(call_id)

    @registry.tool
    async def look(call_id: str) -> str:
        """Read-only, with the default write-ahead."""
        return await body(call_id)

    return registry


async def durability_bodies(path: str) -> None:
    """One finished outcome-durability call (c1), then c2 (outcome) and c3 (write-ahead)
    whose bodies hang together until the parent kills the process."""
    async with await Executor.open(durability_registry(False), ledger=SQLiteLedger(path)) as ex:
        await ex.call("peek", {"call_id": "c1"}, run_id="r1", call_id="c1")
    say("c1-done")
    registry = durability_registry(True)
    async with await Executor.open(registry, ledger=SQLiteLedger(path)) as executor:
        await asyncio.gather(
            executor.call("peek", {"call_id": "c2"}, run_id="r1", call_id="c2"),
            executor.call("look", {"call_id": "c3"}, run_id="r1", call_id="c3"),
        )


async def phase_a(path: str) -> None:
    """Run phase A of the scripted run, report, then hang (a restart mid-run)."""
    clock = SteppedClock()
    executor = await Executor.open(
        build_registry(), ledger=SQLiteLedger(path), limits=LIMITS, clock=clock
    )
    async with executor:
        results = await run_steps(executor, clock, PHASE_A)
        say(f"phase-a {results!r}")
        await asyncio.Event().wait()  # the parent kills the process here


async def append_n(path: str, tag: str, count: str) -> None:
    """Wait for ``go`` on stdin, then append ``count`` events from 8 tasks; print ``done``."""
    n = int(count)
    async with SQLiteLedger(path) as ledger:
        await ledger.open()
        say("ready")
        await asyncio.to_thread(sys.stdin.readline)

        async def appender(k: int) -> None:
            for i in range(k, n, 8):
                event = CallRequested(ts=1.0, run_id=tag, call_id=f"{tag}-{i}", tool="t")
                if i % 3 == 0:
                    await ledger.append_many([event])
                else:
                    await ledger.append(event)

        await asyncio.gather(*(appender(k) for k in range(8)))
        say("done")


async def read_on_demand(path: str) -> None:
    """On each ``read`` line from stdin, print ``seen COUNT LAST_SEQ LAST_HASH``."""
    async with SQLiteLedger(path) as ledger:
        await ledger.open()
        say("ready")
        while True:
            line = await asyncio.to_thread(sys.stdin.readline)
            if line.strip() != "read":
                return
            events = [event async for event in ledger.read()]
            last = events[-1] if events else None
            say(f"seen {len(events)} {last.seq if last else 0} {last.hash if last else '-'}")


async def answer(path: str, request_id: str, approved: str) -> None:
    """Answer a deferred approval request from this process; print ``answered``."""
    async with SQLiteLedger(path) as ledger:
        deferred = DeferredApproval(ledger)
        await deferred.answer(
            request_id, approved=approved == "yes", reviewer="alice", reason="checked"
        )
    say("answered")


async def answer_on_go(path: str, request_id: str) -> None:
    """Open the ledger, print ``ready``, wait for ``go``, approve the request; ``answered``."""
    async with SQLiteLedger(path) as ledger:
        await ledger.open()
        say("ready")
        await asyncio.to_thread(sys.stdin.readline)
        await DeferredApproval(ledger).answer(
            request_id, approved=True, reviewer="alice", reason="checked"
        )
    say("answered")


async def deploy(path: str, call_id: str) -> None:
    """Wait for ``go``, then call the gated tool through a DeferredApproval; print the result."""
    async with SQLiteLedger(path) as ledger:
        executor = await Executor.open(
            build_registry(), ledger=ledger, approval=DeferredApproval(ledger)
        )
        say("ready")
        await asyncio.to_thread(sys.stdin.readline)
        try:
            value = await executor.call("deploy", {"env": "prod"}, run_id="r1", call_id=call_id)
        except AdapterError as exc:
            say(f"result {exc.kind}")
        else:
            say(f"result {value}")


COMMANDS: dict[str, Callable[..., Any]] = {
    "append-stream": append_stream,
    "effect-body": effect_body,
    "durability-bodies": durability_bodies,
    "phase-a": phase_a,
    "append-n": append_n,
    "read-on-demand": read_on_demand,
    "answer": answer,
    "answer-on-go": answer_on_go,
    "deploy": deploy,
}

if __name__ == "__main__":
    asyncio.run(COMMANDS[sys.argv[1]](*sys.argv[2:]))
