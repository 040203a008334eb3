"""The audit of ``call.exchanged``: a record inside a started call, a problem elsewhere."""

from __future__ import annotations

from agent_adapter.ledger import (
    CallExchanged,
    CallRequested,
    CallStarted,
    CallSucceeded,
    Event,
    MemoryLedger,
    Problem,
    replay,
)


def exchanged(call_id: str, method: str = "elicitation/create") -> CallExchanged:
    return CallExchanged(
        run_id="r", call_id=call_id, tool="t", method=method, request={"q": 1}, response="a"
    )


def call(call_id: str, *middle: Event, after: tuple[Event, ...] = ()) -> list[Event]:
    """A call's events: requested, the ``middle`` ones, started..succeeded around none."""
    ids = {"run_id": "r", "call_id": call_id, "tool": "t"}
    return [
        CallRequested(**ids),
        *middle,
        CallStarted(**ids),
        exchanged(call_id),
        CallSucceeded(**ids, result="ok"),
        *after,
    ]


async def chained(events: list[Event]) -> list[Event]:
    """The events as a store appends them: with seq, prev and hash."""
    ledger = MemoryLedger()
    return list(await ledger.append_many(events))


async def test_an_exchange_inside_a_started_call_is_a_record_not_a_problem() -> None:
    """Kept in the call's record, in order; the outcome is the call's one outcome."""
    events = await chained(call("c1"))
    audit = replay(events)
    assert audit.problems() == []
    record = audit.call("r", "c1")
    assert [e.seq for e in record.exchanges] == [3]
    assert (record.outcome, record.outcomes) == ("call.succeeded", 1)


async def test_exchanges_before_the_start_after_the_outcome_or_of_no_call_are_named() -> None:
    """Only a running body records one: each misplaced exchange is its own problem."""
    events = await chained(
        [
            *call("c1", exchanged("c1", "early"), after=(exchanged("c1", "late"),)),
            exchanged(""),
        ]
    )
    assert replay(events).problems() == [
        Problem(
            kind="misplaced-exchange",
            message="seq 2: call.exchanged of call c1 (t) comes before the call started (no "
            "call.started precedes it); only a running body records what it exchanged",
            run_id="r",
            call_id="c1",
            seq=2,
        ),
        Problem(
            kind="misplaced-exchange",
            message="seq 6: call.exchanged of call c1 (t) comes after its outcome "
            "(call.succeeded); only a running body records what it exchanged",
            run_id="r",
            call_id="c1",
            seq=6,
        ),
        Problem(
            kind="misplaced-exchange",
            message="seq 7: call.exchanged of tool t names no call; only a running body "
            "records what it exchanged",
            run_id="r",
            call_id="",
            seq=7,
        ),
    ]
