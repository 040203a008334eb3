"""Several real processes on one Postgres ledger: appends, effect keys, kills, approvals.

The Postgres equivalents of test_multiprocess.py and test_shared_ledger.py: every
process has its own ``PostgresLedger`` on one schema of the session's server, and the
parent synchronises on the lines the children print (``_pg_worker.py``), never on time.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import _ledger_worker as worker
import pytest
from _child import Child
from _helpers import timeline

from agent_adapter import DeferredApproval, Executor, Registry
from agent_adapter.errors import (
    ApprovalPending,
    DuplicateEffect,
    EffectInFlight,
    ToolError,
)
from agent_adapter.ledger import (
    ApprovalConsumed,
    CallStarted,
    PostgresLedger,
    Verification,
    replay,
)

PG_WORKER = Path(__file__).resolve().parents[1] / "_pg_worker.py"


class PgChild(Child):
    """A ``_pg_worker.py`` process."""

    @classmethod
    async def start(cls, *args: str) -> Child:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(PG_WORKER),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(proc)


@pytest.fixture(autouse=True)
def bodies() -> Iterator[list[tuple[str, str]]]:
    """The tool bodies that ran in this (the parent) process during the test."""
    worker.BODIES.clear()
    yield worker.BODIES
    worker.BODIES.clear()


def _acked(lines: list[str]) -> list[tuple[int, str, str]]:
    """(seq, call_id, hash) of every ``acked`` line."""
    found = []
    for line in lines:
        if line.startswith("acked "):
            _, seq, call_id, hash_ = line.split()
            found.append((int(seq), call_id, hash_))
    return found


async def _stored(dsn: str, schema: str) -> tuple[list[tuple[int, str, str]], Verification]:
    async with PostgresLedger(dsn, schema=schema, readonly=True) as ledger:
        events = [(e.seq, e.call_id, e.hash) async for e in ledger.read()]
        return events, await ledger.verify()


async def test_four_processes_with_sixteen_appenders_each(
    postgres_dsn: str, pg_schema: str
) -> None:
    """4 processes x 16 concurrent appenders on one schema: seq gap-free from 1, the chain
    valid, and every acknowledged append stored with the seq and hash it was given."""
    n = 400
    async with PostgresLedger(postgres_dsn, schema=pg_schema):
        pass  # the schema exists before the children race to open it
    children = [
        await PgChild.start("append-n", postgres_dsn, pg_schema, tag, str(n), "16")
        for tag in ("p", "q", "r", "s")
    ]
    try:
        for child in children:
            await child.expect("ready")
        for child in children:  # released together: their transactions interleave
            await child.send("go")
        for child in children:
            await child.expect("done")
            assert await child.wait() == 0
    finally:
        for child in children:
            await child.close()
    acked = sorted(a for child in children for a in _acked(child.lines))
    stored, verification = await _stored(postgres_dsn, pg_schema)
    assert [s[0] for s in stored] == list(range(1, 4 * n + 1))
    assert acked == stored
    assert verification == Verification(ok=True, checked=4 * n)


async def test_four_processes_racing_for_the_same_200_keys_run_each_once(
    postgres_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    """4 executors in 4 processes, released together, each calling the refunds of the
    same 200 orders concurrently: every body runs exactly once across the fleet."""
    runs = tmp_path / "runs.txt"
    runs.touch()
    async with PostgresLedger(postgres_dsn, schema=pg_schema):
        pass
    names = ("a", "b", "c", "d")
    children = [
        await PgChild.start("race", postgres_dsn, pg_schema, name, str(runs), "200")
        for name in names
    ]
    try:
        for child in children:
            await child.expect("ready")
        for child in children:
            await child.send("go")
        outcomes = [await child.expect("outcomes ") for child in children]
        for child in children:
            assert await child.wait() == 0
    finally:
        for child in children:
            await child.close()
    ran = sorted(line.split()[0] for line in runs.read_text().splitlines())
    assert ran == sorted(f"o{i}" for i in range(200)), outcomes
    succeeded = 0
    for line in outcomes:
        counts = dict(item.split("=") for item in line.split()[1:])
        # A key another replica is running is in flight (its holder alive), never run.
        assert set(counts) <= {"value", "duplicate-effect", "effect-in-flight"}, line
        succeeded += int(counts.get("value", 0))
    assert succeeded == 200
    async with PostgresLedger(postgres_dsn, schema=pg_schema, readonly=True) as ledger:
        events = [e async for e in ledger.read()]
        assert await ledger.verify() == Verification(ok=True, checked=len(events))
    started = sorted(e.effect_key for e in events if isinstance(e, CallStarted))
    assert started == sorted(f"refund:o{i}" for i in range(200))
    assert replay(events).problems() == []


async def test_a_writer_killed_mid_stream_loses_nothing_acknowledged(
    postgres_dsn: str, pg_schema: str
) -> None:
    """SIGKILL a process appending from 16 tasks: every append it was told was committed
    is stored, the chain is valid, and the next writer appends after it."""
    child = await PgChild.start("append-stream", postgres_dsn, pg_schema, "16")
    try:
        await child.expect("ready")
        for _ in range(300):
            await child.expect("acked ")
        await child.kill()
        await child.rest()
    finally:
        await child.close()
    acked = _acked(child.lines)
    stored, verification = await _stored(postgres_dsn, pg_schema)
    assert set(acked) <= set(stored)
    assert [s[0] for s in stored] == list(range(1, len(stored) + 1))
    assert verification == Verification(ok=True, checked=len(stored))
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        from agent_adapter.ledger import CallRequested

        after = await ledger.append(CallRequested(run_id="next", call_id="n1", tool="t"))
        assert after.seq == len(stored) + 1
        assert await ledger.verify() == Verification(ok=True, checked=len(stored) + 1)


async def test_a_decision_answered_in_one_process_is_consumed_in_another(
    postgres_dsn: str, pg_schema: str, bodies: list[tuple[str, str]]
) -> None:
    """A request left pending here is answered by a second process and used by a third,
    once: the next call with the same arguments waits for review again."""
    async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
        deferred = DeferredApproval(ledger)
        executor = await Executor.open(worker.build_registry(), ledger=ledger, approval=deferred)
        with pytest.raises(ApprovalPending) as caught:
            await executor.call("deploy", {"env": "prod"}, run_id="r1", call_id="c1")
        request_id = caught.value.request_id

        answering = await PgChild.start("answer", postgres_dsn, pg_schema, request_id)
        try:
            await answering.expect("answered")
            assert await answering.wait() == 0
        finally:
            await answering.close()
        assert await deferred.pending() == []

        deploying = await PgChild.start("deploy", postgres_dsn, pg_schema, "c2")
        try:
            await deploying.expect("ready")
            await deploying.send("go")
            assert await deploying.expect("result ") == "result deployed-prod deploy:prod"
            assert await deploying.wait() == 0
        finally:
            await deploying.close()

        # This executor heard of the consumption: the decision is spent here too.
        with pytest.raises(ApprovalPending) as again:
            await executor.call("deploy", {"env": "prod"}, run_id="r1", call_id="c3")
        assert again.value.request_id != request_id
        assert bodies == []
        consumed = [e.call_id async for e in ledger.read() if isinstance(e, ApprovalConsumed)]
        assert consumed == ["c2"]
        await executor.close()


def _refunds(runs: list[str], gate: asyncio.Event | None = None) -> Registry:
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str, amount: float) -> str:
        runs.append(order_id)
        if gate is not None:
            await gate.wait()
        return f"refunded {amount}"

    return registry


@pytest.mark.parametrize("b_wrote", [False, True], ids=["b-new", "b-wrote-before"])
async def test_a_key_claimed_by_another_replica_is_refused_then_a_duplicate(
    postgres_dsn: str, pg_schema: str, b_wrote: bool
) -> None:
    """Replica B opened before A claimed: B's claim is refused in the write transaction
    (in flight while A runs), a duplicate once A finished; A's body ran once. With B
    having written before (its head known, so its claim goes on the head A moved), the
    refusal comes with A's claim, which B hears before it decides: in flight, not a
    claim refused for want of news."""
    runs: list[str] = []
    gate, started = asyncio.Event(), asyncio.Event()
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str, amount: float) -> str:
        runs.append(order_id)
        started.set()
        await gate.wait()
        return f"refunded {amount}"

    a = await Executor.open(registry, ledger=PostgresLedger(postgres_dsn, schema=pg_schema))
    b_ledger = PostgresLedger(postgres_dsn, schema=pg_schema)
    if b_wrote:
        # B's NOTIFY of A's claim lost (a hint, as when its LISTEN connection is down):
        # B first hears of A's claim when its own claim is refused.
        b_ledger._on_notify = lambda *_: None  # type: ignore[method-assign]
    b = await Executor.open(_refunds(runs), ledger=b_ledger)
    try:
        if b_wrote:
            assert await b.call("refund", {"order_id": "o0", "amount": 1.0}, run_id="rb") == (
                "refunded 1.0"
            )
        first = asyncio.create_task(
            a.call("refund", {"order_id": "o1", "amount": 5.0}, run_id="ra", call_id="a1")
        )
        await started.wait()  # A's claim is durable and its body is running
        with pytest.raises(EffectInFlight) as running:
            await b.call("refund", {"order_id": "o1", "amount": 5.0}, run_id="rb", call_id="b1")
        gate.set()
        assert await first == "refunded 5.0"
        with pytest.raises(DuplicateEffect) as done:
            await b.call("refund", {"order_id": "o1", "amount": 5.0}, run_id="rb", call_id="b2")
        assert (runs[b_wrote:], running.value.key) == (["o1"], "refund:o1")
        assert (done.value.run_id, done.value.call_id) == ("ra", "a1")
    finally:
        await a.close()
        await b.close()
    async with PostgresLedger(postgres_dsn, schema=pg_schema, readonly=True) as ledger:
        types = [e.type async for e in ledger.read(call_id="b1")]
        assert types == timeline("call.ambiguous")
        assert (await ledger.verify()).ok
        assert replay([e async for e in ledger.read()]).problems() == []


async def test_a_key_freed_by_another_replica_can_be_claimed_again(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A's body said it did nothing (ToolError): the claims table lets B claim the key."""
    runs: list[str] = []
    registry = Registry()

    @registry.tool(effect="pay:{ref}")
    async def pay(ref: str, fail: bool) -> str:
        runs.append(ref)
        if fail:
            raise ToolError("card declined before anything was charged")
        return "paid"

    a = await Executor.open(registry, ledger=PostgresLedger(postgres_dsn, schema=pg_schema))
    b = await Executor.open(registry, ledger=PostgresLedger(postgres_dsn, schema=pg_schema))
    try:
        with pytest.raises(ToolError):
            await a.call("pay", {"ref": "p1", "fail": True}, run_id="ra", call_id="a1")
        paid = await b.call("pay", {"ref": "p1", "fail": False}, run_id="rb", call_id="b1")
        # And A itself, once B's claim is committed, gets a duplicate, not a second run.
        with pytest.raises(DuplicateEffect):
            await a.call("pay", {"ref": "p1", "fail": False}, run_id="ra", call_id="a2")
    finally:
        await a.close()
        await b.close()
    assert (paid, runs) == ("paid", ["p1", "p1"])


async def test_an_idle_replica_hears_others_through_notify(
    postgres_dsn: str, pg_schema: str
) -> None:
    """A follower that appends nothing is handed another replica's events all the same
    (LISTEN/NOTIFY wakes it; the events are read from the table)."""
    heard: list[int] = []
    arrived = asyncio.Event()
    idle = PostgresLedger(postgres_dsn, schema=pg_schema)
    busy = PostgresLedger(postgres_dsn, schema=pg_schema)
    try:
        await idle.open()

        def apply(event: object) -> None:
            heard.append(event.seq)  # type: ignore[attr-defined]
            if len(heard) == 3:
                arrived.set()

        follower = idle.follow(apply, 0)
        from agent_adapter.ledger import CallRequested

        await busy.append_many(
            [CallRequested(run_id="r", call_id=f"c{i}", tool="t") for i in range(3)]
        )
        await asyncio.wait_for(arrived.wait(), 30)
        assert heard == [1, 2, 3]
        follower.close()
    finally:
        await idle.close()
        await busy.close()


async def test_limits_and_cache_are_shared_by_the_replicas(
    postgres_dsn: str, pg_schema: str
) -> None:
    """Run limits and cache entries are folds of the one ledger: after ``catch_up()``, a
    call counted by one replica counts in the other, and a result cached by one is a
    hit in the other. (An executor decides a cache hit before its first append of the
    call folds the others' events, as on SQLite: hence the explicit catch_up.)"""
    from agent_adapter import RunLimits
    from agent_adapter.errors import RunLimitExceeded

    ran: list[str] = []
    registry = Registry()

    @registry.tool(cache=600)
    async def lookup(q: str) -> str:
        ran.append(q)
        return f"result-{q}"

    limits = RunLimits(max_calls=3)
    la = PostgresLedger(postgres_dsn, schema=pg_schema)
    lb = PostgresLedger(postgres_dsn, schema=pg_schema)
    a = await Executor.open(registry, ledger=la, limits=limits)
    b = await Executor.open(registry, ledger=lb, limits=limits)
    try:
        assert await a.call("lookup", {"q": "x"}, run_id="r", call_id="c1") == "result-x"
        await lb.catch_up()
        assert await b.call("lookup", {"q": "x"}, run_id="r", call_id="c2") == "result-x"
        assert await b.call("lookup", {"q": "y"}, run_id="r", call_id="c3") == "result-y"
        await la.catch_up()
        with pytest.raises(RunLimitExceeded):
            await a.call("lookup", {"q": "z"}, run_id="r", call_id="c4")
    finally:
        await a.close()
        await b.close()
    assert ran == ["x", "y"]
    async with PostgresLedger(postgres_dsn, schema=pg_schema, readonly=True) as ledger:
        outcomes = [
            (e.call_id, e.type)
            async for e in ledger.read()
            if e.type in ("call.succeeded", "call.cached", "call.limited")
        ]
    assert outcomes == [
        ("c1", "call.succeeded"),
        ("c2", "call.cached"),
        ("c3", "call.succeeded"),
        ("c4", "call.limited"),
    ]
