"""The Ledger contract: one suite that every store backend runs (memory, SQLite file,
PostgreSQL schema)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from _pg_fixtures import fresh_schema

from agent_adapter.ledger import (
    CallFailed,
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallValidated,
    Event,
    Ledger,
    MemoryLedger,
    SQLiteLedger,
    UnknownEvent,
    Verification,
    chain_hash,
    encode_event,
)

KEY = b"contract-test-key"

LedgerFactory = Callable[..., Ledger]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> LedgerFactory:
    """A factory for the backend under test (a fresh file per SQLite ledger, a fresh
    schema per Postgres one, on the session's server)."""
    counter = iter(range(1_000))
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else ""

    def make(*, key: bytes | None = None) -> Ledger:
        if request.param == "memory":
            return MemoryLedger(key=key)
        if request.param == "postgres":
            from agent_adapter.ledger import PostgresLedger

            return PostgresLedger(dsn, schema=fresh_schema(), key=key)
        return SQLiteLedger(tmp_path / f"ledger-{next(counter)}.db", key=key)

    return make


@pytest.fixture
async def ledger(make_ledger: LedgerFactory) -> AsyncIterator[Ledger]:
    """An empty ledger of the backend under test, closed after the test."""
    store = make_ledger()
    yield store
    await store.close()


def requested(call_id: str, run_id: str = "r1", ts: float = 1.0) -> CallRequested:
    """A ``call.requested`` event with small arguments."""
    return CallRequested(
        ts=ts, run_id=run_id, call_id=call_id, tool="refund", args={"order_id": call_id}
    )


async def read_all(store: Ledger, **kwargs: object) -> list[Event]:
    """Every event ``read(**kwargs)`` yields."""
    return [event async for event in store.read(**kwargs)]  # type: ignore[arg-type]


async def test_satisfies_protocol(ledger: Ledger) -> None:
    """Every backend is a Ledger by the runtime-checkable protocol."""
    assert isinstance(ledger, Ledger)


async def test_append_assigns_seq_prev_and_hash(ledger: Ledger) -> None:
    """The first append gets seq 1, an empty prev, and the hash of its stored bytes."""
    event = requested("c1")
    stored = await ledger.append(event)
    payload = encode_event(requested("c1"))
    assert stored is event
    assert (stored.seq, stored.prev, stored.hash) == (1, "", chain_hash(1, "", payload))


async def test_read_returns_equal_events_in_order(ledger: Ledger) -> None:
    """Read decodes events equal to those appended (chain fields included), in seq order."""
    events = [
        requested("c1"),
        CallValidated(ts=2.0, run_id="r1", call_id="c1", tool="refund", digest="d1"),
        CallStarted(ts=3.0, run_id="r1", call_id="c1", tool="refund", digest="d1"),
        CallSucceeded(ts=4.0, run_id="r1", call_id="c1", tool="refund", result={"ok": [1, 2]}),
    ]
    for event in events:
        await ledger.append(event)
    assert await read_all(ledger) == events
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert [e.prev for e in events[1:]] == [e.hash for e in events[:-1]]


async def test_read_after(ledger: Ledger) -> None:
    """``read(after=n)`` yields exactly the events with seq greater than n."""
    events = await ledger.append_many([requested(f"c{i}") for i in range(5)])
    assert await read_all(ledger, after=3) == events[3:]
    assert await read_all(ledger, after=5) == []
    assert await read_all(ledger, after=0) == events


async def test_read_filters_by_run_and_call(ledger: Ledger) -> None:
    """run_id and call_id filter alone and together, keeping seq order."""
    a1 = requested("a", run_id="r1")
    b2 = requested("b", run_id="r2")
    a1_done = CallFailed(ts=2.0, run_id="r1", call_id="a", tool="refund", error="boom")
    a2 = requested("a", run_id="r2")
    await ledger.append_many([a1, b2, a1_done, a2])
    assert await read_all(ledger, run_id="r1") == [a1, a1_done]
    assert await read_all(ledger, call_id="a") == [a1, a1_done, a2]
    assert await read_all(ledger, run_id="r2", call_id="a") == [a2]
    assert await read_all(ledger, run_id="r2", call_id="a", after=a2.seq) == []
    assert await read_all(ledger, run_id="nope") == []


async def test_append_many_is_contiguous_and_returns_events(ledger: Ledger) -> None:
    """append_many stores its events in order with consecutive seqs and returns them."""
    await ledger.append(requested("first"))
    batch = [requested(f"c{i}") for i in range(3)]
    stored = await ledger.append_many(batch)
    assert stored == batch
    assert [e.seq for e in stored] == [2, 3, 4]
    assert await ledger.append_many([]) == []


async def test_verify_empty_and_full(ledger: Ledger) -> None:
    """verify() is ok on an empty ledger and counts every record of a full one."""
    assert await ledger.verify() == Verification(ok=True, checked=0)
    await ledger.append_many([requested(f"c{i}") for i in range(7)])
    assert await ledger.verify() == Verification(ok=True, checked=7)


async def test_deep_verify_of_an_intact_ledger_is_ok(ledger: Ledger) -> None:
    """verify(deep=True), which also checks what the store keeps beside its records (a
    file's structure and indexes), is ok on an intact ledger, as verify() is."""
    assert await ledger.verify(deep=True) == Verification(ok=True, checked=0)
    await ledger.append_many([requested(f"c{i}", run_id=f"r{i % 2}") for i in range(7)])
    assert [await ledger.verify(), await ledger.verify(deep=True)] == 2 * [
        Verification(ok=True, checked=7)
    ]


async def test_many_concurrent_appends_are_gap_free(ledger: Ledger) -> None:
    """Hundreds of concurrent appends get distinct seqs 1..n and a valid chain."""
    events = await asyncio.gather(*(ledger.append(requested(f"c{i}")) for i in range(300)))
    assert sorted(e.seq for e in events) == list(range(1, 301))
    stored = await read_all(ledger)
    assert [e.seq for e in stored] == list(range(1, 301))
    assert sorted(e.call_id for e in stored) == sorted(f"c{i}" for i in range(300))
    assert await ledger.verify() == Verification(ok=True, checked=300)


async def test_concurrent_batches_stay_contiguous(ledger: Ledger) -> None:
    """Concurrent append_many calls never interleave: each batch keeps consecutive seqs."""

    async def batch(n: int) -> list[Event]:
        return await ledger.append_many([requested(f"b{n}-{i}", run_id=f"b{n}") for i in range(5)])

    batches = await asyncio.gather(*(batch(n) for n in range(40)))
    for events in batches:
        first = events[0].seq
        assert [e.seq for e in events] == list(range(first, first + 5))
        assert [e.call_id for e in events] == [f"{events[0].run_id}-{i}" for i in range(5)]
    assert await ledger.verify() == Verification(ok=True, checked=200)


async def test_keyed_chain_uses_hmac(make_ledger: LedgerFactory) -> None:
    """With a key every hash is the HMAC of the stored bytes, and verify() passes."""
    store = make_ledger(key=KEY)
    try:
        event = await store.append(requested("c1"))
        payload = encode_event(requested("c1"))
        assert event.hash == chain_hash(1, "", payload, KEY)
        assert event.hash != chain_hash(1, "", payload)
        assert await store.verify() == Verification(ok=True, checked=1)
    finally:
        await store.close()


async def test_events_of_unknown_types_are_kept(ledger: Ledger) -> None:
    """An event of a type this version does not know reads back as UnknownEvent."""
    event = UnknownEvent(ts=5.0, run_id="r", call_id="c", original_type="x.y", data={"a": 1})
    await ledger.append(event)
    [back] = await read_all(ledger)
    assert isinstance(back, UnknownEvent)
    assert back == event


async def test_close_is_idempotent(make_ledger: LedgerFactory) -> None:
    """close() may be called twice."""
    store = make_ledger()
    await store.append(requested("c1"))
    await store.close()
    await store.close()


async def test_exchanges_mid_call_are_stored_chained_and_replayed(ledger: Ledger) -> None:
    """call.exchanged through an executor: between call.started and the outcome, read
    back whole and in order, the chain and the audit clean, and a repeat of the call by
    a second executor on the store gives the recorded value without asking again."""
    from agent_adapter import CallContext, Executor, Registry
    from agent_adapter.engine import record_exchange
    from agent_adapter.ledger import CallExchanged, replay

    registry = Registry()
    ran: list[str] = []

    @registry.tool()
    async def ask(question: str) -> str:
        ran.append(question)
        for n in range(3):
            await record_exchange(
                "elicitation/create", request={"message": question, "n": n}, response={"n": n}
            )
        return "answered"

    ctx = CallContext(run_id="r1", call_id="c1")
    first = await Executor.open(registry, ledger=ledger)
    assert await first.run_spec(registry.get("ask"), {"question": "é?"}, ctx) == "answered"
    # (Executors share the store object; closing one closes it: read before that.)
    second = await Executor.open(registry, ledger=ledger)
    assert await second.run_spec(registry.get("ask"), {"question": "é?"}, ctx) == "answered"
    events = await read_all(ledger, run_id="r1", call_id="c1")
    assert [e.type for e in events] == [
        "call.requested",
        "call.validated",
        "call.started",
        "call.exchanged",
        "call.exchanged",
        "call.exchanged",
        "call.succeeded",
        "call.replayed",
    ]
    exchanged = [e for e in events if isinstance(e, CallExchanged)]
    assert [(e.request, e.response) for e in exchanged] == [
        ({"message": "é?", "n": n}, {"n": n}) for n in range(3)
    ]
    assert ran == ["é?"]
    verification = await ledger.verify()
    assert verification.ok
    assert replay(events, verification).problems() == []
    await second.close()
    await first.close()
