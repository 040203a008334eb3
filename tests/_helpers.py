"""Helpers shared by the engine tests: reading a ledger back as comparable values."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import msgspec
import pytest

from agent_adapter.ledger import OUTCOME_TAGS, Event, MemoryLedger, Verification, redecided


class Batches(MemoryLedger):
    """A MemoryLedger that keeps the event types of each ``append_many`` (one commit
    each). An override: the executor then awaits it instead of ``append_now``."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    async def append_many(self, events: Sequence[Event]) -> list[Event]:
        self.batches.append([e.type for e in events])
        return await super().append_many(events)


async def recorded(ledger: Any, **filters: Any) -> list[Event]:
    """Every event in ``ledger`` (decoded from stored bytes), chain fields cleared.

    With the chain fields cleared, events compare equal to events built by hand.
    """
    out = []
    async for event in ledger.read(**filters):
        event.prev = ""
        event.hash = ""
        out.append(event)
    return out


async def shape(ledger: Any) -> list[tuple[str, str]]:
    """The ledger as ``[(type, call_id), ...]``."""
    return [(e.type, e.call_id) for e in await recorded(ledger)]


async def types(ledger: Any, call_id: str | None = None) -> list[str]:
    """The event types of one call (or all), in ledger order."""
    events = await recorded(ledger, call_id=call_id) if call_id else await recorded(ledger)
    return [e.type for e in events]


def fields(event: Event) -> dict[str, Any]:
    """An event's fields as a dict, without the chain fields."""
    out = msgspec.structs.asdict(event)
    out.pop("prev")
    out.pop("hash")
    return out


async def outcomes_per_call(ledger: Any) -> dict[tuple[str, str], int]:
    """How many outcome events each requested call has (it must be exactly one)."""
    events = await recorded(ledger)
    requested = {(e.run_id, e.call_id) for e in events if e.type == "call.requested"}
    counts = Counter((e.run_id, e.call_id) for e in events if e.is_outcome)
    return {key: counts.get(key, 0) for key in requested}


async def assert_one_outcome_each(ledger: Any) -> None:
    """Every requested call has exactly one outcome, and no outcome lacks a request."""
    events = await recorded(ledger)
    # One outcome per call.requested: a call id asked again after an in-flight refusal
    # (not final) is a new attempt, with its own request and outcome.
    requested = Counter((e.run_id, e.call_id) for e in events if e.type == "call.requested")
    counts = Counter((e.run_id, e.call_id) for e in events if e.is_outcome)
    final = Counter((e.run_id, e.call_id) for e in events if e.is_outcome and not redecided(e))
    assert set(counts) == set(requested)
    assert all(counts[k] <= n and final[k] <= 1 for k, n in requested.items())


@pytest.fixture
def every_call_has_one_outcome(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """After the test, every MemoryLedger it made has exactly one outcome per requested call.

    A ledger standing for a crashed process opts out with ``ledger.allow_unfinished = True``.
    """
    created: list[MemoryLedger] = []
    original = MemoryLedger.__init__

    def init(self: MemoryLedger, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        created.append(self)

    monkeypatch.setattr(MemoryLedger, "__init__", init)
    yield
    for ledger in created:
        if getattr(ledger, "allow_unfinished", False):
            continue
        requested = Counter(
            (r.run_id, r.call_id) for r in ledger.records if r.type == "call.requested"
        )
        counts = Counter((r.run_id, r.call_id) for r in ledger.records if r.type in OUTCOME_TAGS)
        # One final outcome per call; an in-flight refusal is not final (the call id was
        # asked again, a new attempt with its own request), and no attempt has two.
        final = Counter(
            (r.run_id, r.call_id)
            for r in ledger.records
            if r.type in OUTCOME_TAGS and b'"in_flight":true' not in r.payload
        )
        assert set(counts) == set(requested), (requested, counts)
        assert all(counts[k] <= n and final[k] <= 1 for k, n in requested.items())


class CountingLedger:
    """A ledger that counts its reads (the polls of a waiting port) and passes all through.

    ``reads`` is the number of ``read`` calls so far; ``await at_least(n)`` returns once
    ``n`` reads have started, so a test can gate on "the waiter has looked n times".
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads = 0
        self._read = asyncio.Event()

    def read(
        self, after: int = 0, *, run_id: str | None = None, call_id: str | None = None
    ) -> AsyncIterator[Event]:
        self.reads += 1
        self._read.set()
        return self.inner.read(after, run_id=run_id, call_id=call_id)

    async def at_least(self, n: int, timeout_s: float = 60.0) -> None:
        """Wait (bounded: a broken test fails instead of hanging) for ``n`` reads."""
        async with asyncio.timeout(timeout_s):
            while self.reads < n:
                self._read.clear()
                await self._read.wait()

    async def append(self, event: Event) -> Event:
        return await self.inner.append(event)

    async def append_many(self, events: Sequence[Event]) -> list[Event]:
        return await self.inner.append_many(events)

    async def verify(self) -> Verification:
        return await self.inner.verify()

    async def close(self) -> None:
        await self.inner.close()


#: Outcomes that end a call before its body starts.
_BEFORE_BODY = frozenset(
    {"call.limited", "call.cached", "call.duplicate", "call.ambiguous", "call.pending"}
)


def timeline(
    outcome: str,
    *,
    guards: bool = False,
    approval: str | None = None,
    effect: bool = False,
    output_guards: bool = False,
) -> list[str]:
    """The event tags one call records, in pipeline order (DESIGN.md, "Executor.run_spec
    pipeline"), for the expected lists tests compare a call's events with.

    ``guards``: input guards ran (``guard.checked`` before approval); ``approval``:
    ``"granted"``, ``"denied"`` or ``"pending"`` (a deferred port: ``approval.pending``
    written by the port); ``effect``: the key was claimed before the body started;
    ``output_guards``: a ``guard.checked`` after the body (``call.blocked`` then ends a
    call whose body ran). ``outcome`` is the outcome tag (``"call.succeeded"``, ...).
    """
    tags = ["call.requested"]
    if outcome == "call.invalid":
        return [*tags, outcome]
    tags.append("call.validated")
    if guards:
        tags.append("guard.checked")
    if outcome == "call.blocked" and not output_guards:
        return [*tags, outcome]
    if outcome == "call.limited":
        return [*tags, outcome]
    if approval is not None:
        tags.append("approval.requested")
        if approval == "denied":
            return [*tags, "approval.denied", "call.denied"]
        if approval == "pending":
            return [*tags, "approval.pending", "call.pending"]
        tags.append(f"approval.{approval}")
    if outcome in _BEFORE_BODY:
        return [*tags, outcome]
    if effect:
        tags.append("effect.claimed")
    tags.append("call.started")
    if output_guards:
        tags.append("guard.checked")
    return [*tags, outcome]


def own_pid_start() -> int:
    """This process's start time as an effect claim records it (/proc/self/stat field 22)."""
    with open("/proc/self/stat") as f:
        raw = f.read()
    return int(raw[raw.rfind(")") + 2 :].split()[19])


class GatedRefund:
    """A registry whose ``refund`` effect (key ``refund:{order_id}``) runs until ``gate``
    is set: ``running`` is set once its body runs (its claim and ``call.started`` are
    durable by then), ``ran`` lists the orders whose body ran."""

    def __init__(self) -> None:
        from agent_adapter import Registry

        self.ran: list[str] = []
        self.running, self.gate = asyncio.Event(), asyncio.Event()
        self.registry = Registry()

        @self.registry.tool(effect="refund:{order_id}")
        async def refund(order_id: str) -> str:
            self.ran.append(order_id)
            self.running.set()
            await self.gate.wait()
            return f"refunded {order_id}"
