"""A child process for the Postgres fleet tests: ``python _pg_worker.py CMD DSN SCHEMA ...``.

As ``_ledger_worker.py`` for SQLite: each command prints a line when something the
parent waits for has happened, so the parent synchronises on lines, never on time.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any

import _ledger_worker as base

from agent_adapter import DeferredApproval, Executor, Registry
from agent_adapter.errors import AdapterError, LedgerError
from agent_adapter.ledger import CallRequested, PostgresLedger

say = base.say


async def append_n(dsn: str, schema: str, tag: str, count: str, tasks: str) -> None:
    """Wait for ``go``, append ``count`` events from ``tasks`` tasks; print each ack's
    ``acked SEQ CALL_ID HASH``, then ``done``."""
    n, k = int(count), int(tasks)
    async with PostgresLedger(dsn, schema=schema) as ledger:
        say("ready")
        await asyncio.to_thread(sys.stdin.readline)

        async def appender(j: int) -> None:
            for i in range(j, n, k):
                event = await ledger.append(
                    CallRequested(ts=1.0, run_id=tag, call_id=f"{tag}-{i}", tool="t")
                )
                say(f"acked {event.seq} {event.call_id} {event.hash}")

        await asyncio.gather(*(appender(j) for j in range(k)))
        say("done")


async def append_stream(dsn: str, schema: str, tasks: str, timeout_s: str = "30") -> None:
    """Append forever from ``tasks`` tasks, printing ``acked SEQ CALL_ID HASH`` after each,
    ``failed CALL_ID KIND`` for an append that raised (and goes on)."""
    async with PostgresLedger(dsn, schema=schema, timeout_s=float(timeout_s)) as ledger:
        say("ready")

        async def appender(j: int) -> None:
            for i in range(10**9):
                call_id = f"w{j}-{i}"
                try:
                    event = await ledger.append(
                        CallRequested(ts=float(i), run_id=f"w{j}", call_id=call_id, tool="t")
                    )
                except LedgerError as exc:
                    say(f"failed {call_id} {exc.kind} {' '.join(str(exc).split())}")
                    continue
                say(f"acked {event.seq} {event.call_id} {event.hash}")

        await asyncio.gather(*(appender(j) for j in range(int(tasks))))


def _refunds(name: str, runs: str) -> Registry:
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        """Records that its body ran (one line per run, in a file the parent reads)."""
        # One write(2) of one short line in append mode: lines of racing processes never mix.
        fd = os.open(runs, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, f"{order_id} {name}\n".encode())
        finally:
            os.close(fd)
        return "refunded"

    return registry


async def race(dsn: str, schema: str, name: str, runs: str, keys: str) -> None:
    """Open an executor, print ``ready``, wait for ``go``, then call the refund of every
    one of ``keys`` orders concurrently; print ``outcomes SUCCEEDED DUPLICATE AMBIGUOUS``."""
    ledger = PostgresLedger(dsn, schema=schema)
    executor = await Executor.open(_refunds(name, runs), ledger=ledger)
    say("ready")
    await asyncio.to_thread(sys.stdin.readline)
    counts = {"value": 0}

    async def one(i: int) -> None:
        try:
            await executor.call("refund", {"order_id": f"o{i}"}, run_id=name, call_id=f"{name}-{i}")
            kind = "value"
        except AdapterError as exc:
            kind = exc.kind
        counts[kind] = counts.get(kind, 0) + 1

    try:
        await asyncio.gather(*(one(i) for i in range(int(keys))))
    finally:
        await executor.close()
    say("outcomes " + " ".join(f"{k}={v}" for k, v in sorted(counts.items())))


async def deploy(dsn: str, schema: str, call_id: str) -> None:
    """Wait for ``go``, call the gated tool through a DeferredApproval; print the result."""
    async with PostgresLedger(dsn, schema=schema) as ledger:
        executor = await Executor.open(
            base.build_registry(), ledger=ledger, approval=DeferredApproval(ledger)
        )
        say("ready")
        await asyncio.to_thread(sys.stdin.readline)
        try:
            value = await executor.call("deploy", {"env": "prod"}, run_id="r1", call_id=call_id)
        except AdapterError as exc:
            say(f"result {exc.kind}")
        else:
            say(f"result {value} {' '.join(f'{t}:{e}' for t, e in base.BODIES)}")


async def answer(dsn: str, schema: str, request_id: str) -> None:
    """Approve a deferred request from this process; print ``answered``."""
    async with PostgresLedger(dsn, schema=schema) as ledger:
        await DeferredApproval(ledger).answer(
            request_id, approved=True, reviewer="alice", reason="checked"
        )
    say("answered")


COMMANDS: dict[str, Callable[..., Any]] = {
    "append-n": append_n,
    "append-stream": append_stream,
    "race": race,
    "deploy": deploy,
    "answer": answer,
}

if __name__ == "__main__":
    asyncio.run(COMMANDS[sys.argv[1]](*sys.argv[2:]))
