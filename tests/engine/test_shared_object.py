"""Several executors on one ledger object (one SQLiteLedger, or one MemoryLedger).

Each executor is its own follower of the object: before any of its appends returns it
has been handed every event the others (and other processes) committed, and a claim of
an effect key another one claimed after what it had heard is refused in the write.
Before this, a second executor on one SQLiteLedger object was refused at open ("already
followed by another executor"), and two executors on one MemoryLedger never heard of
each other's calls: both ran the same refund.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
from _helpers import own_pid_start, timeline

from agent_adapter import (
    CallContext,
    Decision,
    DeferredApproval,
    Executor,
    Registry,
    RunLimits,
    digest,
)
from agent_adapter.engine import host_identity
from agent_adapter.errors import (
    AmbiguousEffect,
    ApprovalPending,
    DuplicateEffect,
    LedgerError,
    RunLimitExceeded,
    ToolUsageError,
)
from agent_adapter.ledger import (
    CallAmbiguous,
    CallDuplicate,
    CallLimited,
    CallReplayed,
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallValidated,
    EffectClaimed,
    Event,
    Ledger,
    MemoryLedger,
    SQLiteLedger,
    replay,
)
from agent_adapter.ledger._follow import EffectTaken

if TYPE_CHECKING:
    from agent_adapter.ledger._follow import Follow

ARGS = {"order_id": "o1", "amount": 5}


def _clock() -> float:
    return 1000.0  # every event at one time: whole events compare equal


DIGEST = digest(ARGS)


class _Refusals(SQLiteLedger):
    """A SQLiteLedger that keeps the claims its writer refused (EffectTaken)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.refused: list[tuple[str, int]] = []

    async def append_many(self, events: Any) -> Any:
        try:
            return await super().append_many(events)
        except EffectTaken as taken:
            self.refused.append((taken.key, taken.seq))
            raise


@pytest.fixture(params=["memory", "sqlite"])
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Ledger]:
    """One ledger object, shared by the test's executors; closed after the test."""
    store: Ledger = MemoryLedger() if request.param == "memory" else _Refusals(tmp_path / "l.db")
    yield store
    await store.close()


class Refunds:
    """A refund tool (effect key ``refund:{order_id}``) whose bodies the test can hold."""

    def __init__(self, *, confirm: bool = False) -> None:
        self.registry = Registry()
        self.ran: list[tuple[str, str]] = []
        self.entered = asyncio.Event()
        self.gate: asyncio.Event | None = None

        @self.registry.tool(effect="refund:{order_id}", confirm=confirm)
        async def refund(order_id: str, amount: int) -> str:
            self.ran.append((order_id, str(amount)))
            self.entered.set()
            if self.gate is not None and len(self.ran) > 1:
                self.gate.set()  # a second body: the test fails (ran twice), never hangs
            if self.gate is not None:
                await self.gate.wait()
            return f"refunded {amount}"

        @self.registry.tool
        async def lookup(order_id: str) -> str:
            self.ran.append((order_id, "lookup"))
            return f"order {order_id}"


async def _open(tools: Refunds, ledger: Ledger, **options: Any) -> Executor:
    return await Executor.open(tools.registry, ledger=ledger, clock=_clock, **options)


async def _events(ledger: Ledger, call_id: str) -> list[Event]:
    """One call's events as stored, with the chain fields cleared (to compare whole)."""
    out = []
    async for event in ledger.read(call_id=call_id):
        out.append(msgspec.structs.replace(event, seq=0, prev="", hash=""))
    return out


def _head(run_id: str, call_id: str, args: Any = ARGS, tool: str = "refund") -> list[Event]:
    ids = {"ts": 1000.0, "run_id": run_id, "call_id": call_id, "tool": tool}
    return [CallRequested(**ids, args=args), CallValidated(**ids, digest=digest(args))]


def _claimed(holder: Executor, ids: dict[str, Any]) -> EffectClaimed:
    """The claim ``holder`` writes: it names the executor and leases the key from now."""
    return EffectClaimed(
        **ids,
        key="refund:o1",
        digest=DIGEST,
        holder=holder.executor_id,
        pid=os.getpid(),
        host=host_identity(),
        lease_until=1000.0 + holder.lease_s,
        pid_start=own_pid_start(),
    )


def _ran(holder: Executor, run_id: str, call_id: str, result: str) -> list[Event]:
    ids = {"ts": 1000.0, "run_id": run_id, "call_id": call_id, "tool": "refund"}
    return [
        *_head(run_id, call_id),
        _claimed(holder, ids),
        CallStarted(**ids, digest=DIGEST, effect_key="refund:o1"),
        CallSucceeded(**ids, duration_ms=0.0, result=result),
    ]


def _claim_seq(events: list[Event]) -> int:
    return next(e.seq for e in events if isinstance(e, EffectClaimed))


async def _refused(ledger: Ledger) -> list[tuple[str, int]]:
    return list(getattr(ledger, "refused", []))


async def test_both_open_and_a_committed_key_is_a_duplicate_for_the_other(ledger: Ledger) -> None:
    """A ran the refund; B, on the same ledger object, is told it is a duplicate, at once."""
    tools = Refunds()
    a = await _open(tools, ledger)
    b = await _open(tools, ledger)
    assert await a.call("refund", ARGS, run_id="ra", call_id="a1") == "refunded 5"
    other = {"order_id": "o1", "amount": 9}
    with pytest.raises(DuplicateEffect) as dup:
        await b.call("refund", other, run_id="rb", call_id="b1")
    assert (dup.value.run_id, dup.value.call_id, dup.value.same_args) == ("ra", "a1", False)
    assert tools.ran == [("o1", "5")]
    ids = {"ts": 1000.0, "run_id": "rb", "call_id": "b1", "tool": "refund"}
    assert await _events(ledger, "b1") == [
        *_head("rb", "b1", other),
        CallDuplicate(
            **ids,
            duration_ms=0.0,
            key="refund:o1",
            by_run_id="ra",
            by_call_id="a1",
            same_args=False,
        ),
    ]
    assert await _events(ledger, "a1") == _ran(a, "ra", "a1", "refunded 5")
    assert await _refused(ledger) == []  # B knew of A's claim: nothing to refuse


async def test_a_key_in_flight_in_one_is_ambiguous_for_the_other_then_a_duplicate(
    ledger: Ledger,
) -> None:
    """A's body is running: B's call of the key is ambiguous (no second body), and once
    A finished, a duplicate naming A's call."""
    tools = Refunds()
    tools.gate = asyncio.Event()
    a = await _open(tools, ledger)
    b = await _open(tools, ledger)
    first = asyncio.create_task(a.call("refund", ARGS, run_id="ra", call_id="a1"))
    await tools.entered.wait()  # A's claim is durable and its body is running
    with pytest.raises(AmbiguousEffect) as running:
        await b.call("refund", ARGS, run_id="rb", call_id="b1")
    # The claim is live in another executor: nothing may advise resolving it by hand,
    # and resolve_effect refuses it (its body is still running).
    assert "resolve" not in str(running.value)
    with pytest.raises(ToolUsageError, match="not ambiguous"):
        await b.resolve_effect("refund:o1", outcome="failed", reviewer="ops")
    tools.gate.set()
    assert await first == "refunded 5"
    with pytest.raises(DuplicateEffect):
        await b.call("refund", ARGS, run_id="rb", call_id="b2")
    assert tools.ran == [("o1", "5")]
    ids = {"ts": 1000.0, "run_id": "rb", "call_id": "b1", "tool": "refund"}
    assert await _events(ledger, "b1") == [
        *_head("rb", "b1"),
        CallAmbiguous(
            **ids, duration_ms=0.0, key="refund:o1", reason=str(running.value), in_flight=True
        ),
    ]
    assert [e.type for e in await _events(ledger, "b2")] == timeline("call.duplicate")


async def test_two_claims_of_one_key_in_one_group_commit_run_the_body_once(
    ledger: Ledger,
) -> None:
    """A and B claim the same key in the same loop turn. On SQLite both write-aheads go
    into one transaction: the first wins, the second is refused inside it (nothing of it
    written) and B decides again from A's claim. On a MemoryLedger B hears of A's claim
    within A's append."""
    tools = Refunds()
    tools.gate = asyncio.Event()
    a = await _open(tools, ledger)
    b = await _open(tools, ledger)
    first = asyncio.create_task(a.call("refund", ARGS, run_id="ra", call_id="a1"))
    second = asyncio.create_task(b.call("refund", ARGS, run_id="rb", call_id="b1"))
    with pytest.raises(AmbiguousEffect):
        await second
    tools.gate.set()
    assert await first == "refunded 5"
    assert tools.ran == [("o1", "5")]
    a1 = [e async for e in ledger.read(call_id="a1")]
    expected = [("refund:o1", _claim_seq(a1))] if isinstance(ledger, SQLiteLedger) else []
    assert await _refused(ledger) == expected
    assert [e.type for e in await _events(ledger, "b1")] == timeline("call.ambiguous")
    assert await _events(ledger, "a1") == _ran(a, "ra", "a1", "refunded 5")
    audit = replay([e async for e in ledger.read()])
    assert audit.problems() == []


async def test_run_limits_and_the_outcome_index_see_the_other_executors_calls(
    ledger: Ledger,
) -> None:
    """B's calls count against A's run limits, and a call id B finished is a replay in A."""
    tools = Refunds()
    a = await _open(tools, ledger, limits=RunLimits(max_calls=2))
    b = await _open(tools, ledger)
    assert await b.call("lookup", {"order_id": "o7"}, run_id="r", call_id="c1") == "order o7"
    # The same ids in A: replayed from B's outcome, the body does not run again.
    assert await a.call("lookup", {"order_id": "o7"}, run_id="r", call_id="c1") == "order o7"
    assert await a.call("lookup", {"order_id": "o8"}, run_id="r", call_id="c2") == "order o8"
    with pytest.raises(RunLimitExceeded):
        await a.call("lookup", {"order_id": "o9"}, run_id="r", call_id="c3")
    assert tools.ran == [("o7", "lookup"), ("o8", "lookup")]
    c1 = [e async for e in ledger.read(call_id="c1")]
    outcome_seq = next(e.seq for e in c1 if isinstance(e, CallSucceeded))
    ids = {"ts": 1000.0, "run_id": "r", "tool": "lookup"}
    assert (await _events(ledger, "c1"))[-1] == CallReplayed(
        **ids, call_id="c1", digest=digest({"order_id": "o7"}), outcome_seq=outcome_seq
    )
    assert await _events(ledger, "c3") == [
        *_head("r", "c3", {"order_id": "o9"}, tool="lookup"),
        CallLimited(**ids, call_id="c3", duration_ms=0.0, reason="run r reached max_calls=2"),
    ]


async def test_a_deferred_approval_answered_through_one_is_seen_by_the_other(
    ledger: Ledger,
) -> None:
    """A's call waits for review; the reviewer answers through B's port; A's next ask runs
    it, and B, which saw A's refund run, refuses the key as a duplicate."""
    tools = Refunds(confirm=True)
    a = await _open(tools, ledger, approval=DeferredApproval(ledger, clock=_clock))
    through_b = DeferredApproval(ledger, clock=_clock)
    b = await _open(tools, ledger, limits=RunLimits(max_calls=10), approval=through_b)
    with pytest.raises(ApprovalPending) as pending:
        await a.call("refund", ARGS, run_id="ra", call_id="a1")
    assert [p.request_id for p in await through_b.pending()] == [pending.value.request_id]
    await through_b.answer(pending.value.request_id, approved=True, reviewer="alice")
    assert await a.call("refund", ARGS, run_id="ra", call_id="a2") == "refunded 5"
    assert await through_b.pending() == []
    approved = CallContext(
        run_id="rb", call_id="b1", approval=Decision(approved=True, reviewer="bob", digest=DIGEST)
    )
    with pytest.raises(DuplicateEffect):
        await b.run_spec(tools.registry.get("refund"), ARGS, approved)
    assert tools.ran == [("o1", "5")]
    a2 = [e.type for e in await _events(ledger, "a2")]
    assert a2 == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "approval.consumed",
        "approval.granted",
        "effect.claimed",
        "call.started",
        "call.succeeded",
    ]


async def test_a_closed_executor_stops_following_and_the_other_keeps_the_ledger(
    ledger: Ledger,
) -> None:
    """A closes: it hears nothing more and takes no more calls; B keeps working on the
    still open ledger object, and the last executor to close closes it."""
    tools = Refunds()
    a = await _open(tools, ledger)
    b = await _open(tools, ledger)
    await a.call("lookup", {"order_id": "o1"}, run_id="r", call_id="c1")
    await a.close()
    heard = dict(a.state.outcomes)
    await b.call("lookup", {"order_id": "o2"}, run_id="r", call_id="c2")
    await b.call("refund", ARGS, run_id="r", call_id="c3")
    assert (
        a.state.outcomes == heard == {("r", "c1"): (digest({"order_id": "o1"}), "call.succeeded")}
    )
    assert set(b.state.outcomes) == {("r", "c1"), ("r", "c2"), ("r", "c3")}
    with pytest.raises(ToolUsageError, match="executor is closed"):
        await a.call("refund", ARGS, run_id="r", call_id="c4")
    assert tools.ran == [("o1", "lookup"), ("o2", "lookup"), ("o1", "5")]
    await b.close()
    if isinstance(ledger, SQLiteLedger):
        with pytest.raises(LedgerError, match="closed"):
            await ledger.append(CallRequested(run_id="r", call_id="late", tool="lookup"))


async def test_each_follower_is_handed_everything_but_its_own_in_seq_order(
    ledger: Ledger, tmp_path: Path
) -> None:
    """Three followers of one object, appends of nobody's, and (SQLite) a writer through
    another object (another process's view): before each follower's append returns it
    has been handed every event since it began following that is not its own, in seq
    order, once; never one of its own. catch_up() catches up every follower."""
    from agent_adapter.ledger._follow import appending  # (new with several followers)

    store: Any = ledger
    outside: Any = SQLiteLedger(tmp_path / "l.db") if isinstance(ledger, SQLiteLedger) else ledger
    heard: dict[str, list[int]] = {"f1": [], "f2": [], "f3": []}
    mine: dict[str, list[int]] = {name: [] for name in heard}
    since: dict[str, int] = {}
    followers: dict[str, Follow] = {}

    def follow(name: str, after: int) -> None:
        since[name] = after
        followers[name] = store.follow(lambda e: heard[name].append(e.seq), after)

    async def append(name: str, n: int) -> None:
        token = appending.set(followers[name])
        try:
            events = await ledger.append_many(
                [CallRequested(run_id=name, call_id=f"{name}-{i}", tool="t") for i in range(n)]
            )
        finally:
            appending.reset(token)
        mine[name].extend(e.seq for e in events)
        last = events[-1].seq
        others = [s for s in range(since[name] + 1, last + 1) if s not in mine[name]]
        assert [s for s in heard[name] if s <= last] == others, name

    try:
        follow("f1", 0)
        follow("f2", 0)
        await outside.append(CallRequested(run_id="x", call_id="x-0", tool="t"))  # 1
        await asyncio.gather(append("f1", 2), append("f2", 1))  # 2-3, 4 (one commit)
        follow("f3", 3)  # it has read up to seq 3
        await outside.append(CallRequested(run_id="x", call_id="x-1", tool="t"))  # 5
        await append("f3", 1)  # 6
        await ledger.append(CallRequested(run_id="y", call_id="nobody", tool="t"))  # 7
        await append("f1", 1)  # 8
        await store.catch_up()
        assert {name: sorted(heard[name] + mine[name]) for name in heard} == {
            "f1": list(range(1, 9)),
            "f2": list(range(1, 9)),
            "f3": list(range(4, 9)),
        }
        assert all(h == sorted(set(h)) for h in heard.values())  # in order, each once
    finally:
        if outside is not ledger:
            await outside.close()


async def test_a_claim_staged_before_another_followers_claim_was_applied_is_refused(
    tmp_path: Path,
) -> None:
    """F2 stages a claim of a key while F1's claim of it is being handed over (F2 has not
    applied it: its horizon has not moved): its batch, in a later transaction than F1's,
    is refused there, and nothing of it is written."""
    from agent_adapter.ledger._follow import appending  # (new with several followers)

    ledger = SQLiteLedger(tmp_path / "l.db")
    staged: list[asyncio.Future[None]] = []

    def claim(run_id: str, key: str = "refund:o1") -> EffectClaimed:
        return EffectClaimed(run_id=run_id, call_id="c", tool="refund", key=key, digest="d")

    def apply2(event: Event) -> None:
        if isinstance(event, EffectClaimed) and not staged:
            # As a call that checked the key just before this event reached it.
            token = appending.set(f2)
            try:
                staged.append(ledger._stage([claim("r2")]))
            finally:
                appending.reset(token)

    try:
        f1 = ledger.follow(lambda event: None, 0)
        f2 = ledger.follow(apply2, 0)
        token = appending.set(f1)
        try:
            await ledger.append(claim("r1"))
        finally:
            appending.reset(token)
        with pytest.raises(EffectTaken) as taken:
            await staged[0]
        assert (taken.value.key, taken.value.seq) == ("refund:o1", 1)
        assert [(e.seq, e.run_id) async for e in ledger.read()] == [(1, "r1")]
    finally:
        await ledger.close()


async def test_an_idle_follower_keeps_no_growing_list_of_the_others_claims(
    tmp_path: Path,
) -> None:
    """A follower that appends nothing while another claims many keys: what the writer
    keeps for it (claims its batches might not know yet) stays bounded."""
    from agent_adapter.ledger._follow import appending  # (new with several followers)

    ledger = SQLiteLedger(tmp_path / "l.db")
    try:
        busy = ledger.follow(lambda event: None, 0)
        idle = ledger.follow(lambda event: None, 0)
        token = appending.set(busy)
        try:
            for i in range(50):
                await ledger.append(
                    EffectClaimed(run_id="r", call_id=f"c{i}", tool="t", key=f"k{i}", digest="d")
                )
        finally:
            appending.reset(token)
        assert (len(idle.claims), idle.delivered, idle.horizon) == (1, 50, 50)
    finally:
        await ledger.close()


async def test_a_closed_followers_claim_is_refused_and_its_other_events_kept(
    ledger: Ledger,
) -> None:
    """An executor closed while a call of its was running: its projection no longer
    hears the others, so a claim in its name is refused; an outcome is written."""
    from agent_adapter.ledger._follow import appending  # (new with several followers)

    store: Any = ledger
    follower = store.follow(lambda event: None, 0)
    follower.close()
    token = appending.set(follower)
    try:
        with pytest.raises(LedgerError, match="was closed; its effect claim was not written"):
            await ledger.append_many(
                [EffectClaimed(run_id="r", call_id="c", tool="t", key="k", digest="d")]
            )
        await ledger.append(CallSucceeded(run_id="r", call_id="c0", tool="t", result=1))
    finally:
        appending.reset(token)
    assert [e.type async for e in ledger.read()] == ["call.succeeded"]
    assert store.followed is False
