"""A call id another process finished while this executor had not heard of it yet.

Replica B opens the file, replica A (another SQLiteLedger object on the same file) runs
call (r, c) with an effect key to its outcome, then B is asked for the same (r, c): its
claim of the key is refused in the write, it catches up and finds that this very call
is finished. It answers from the ledger (call.replayed), as step 0 would have, and the
body does not run again. Before, the catch-up removed the call's in-flight entry and B
failed with a bare KeyError.
"""

from __future__ import annotations

from pathlib import Path

from agent_adapter import Executor, Registry
from agent_adapter.ledger import SQLiteLedger, replay


def _refunds(ran: list[str]) -> Registry:
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        ran.append(order_id)
        return f"refunded {order_id}"

    return registry


async def test_a_call_finished_by_another_replica_is_answered_from_the_ledger(
    tmp_path: Path,
) -> None:
    db = tmp_path / "shared.db"
    ran: list[str] = []
    async with await Executor.open(_refunds(ran), ledger=SQLiteLedger(db)) as b:
        async with await Executor.open(_refunds(ran), ledger=SQLiteLedger(db)) as a:
            assert await a.call("refund", {"order_id": "o1"}, run_id="r", call_id="c") == (
                "refunded o1"
            )
        assert await b.call("refund", {"order_id": "o1"}, run_id="r", call_id="c") == (
            "refunded o1"
        )
    assert ran == ["o1"]
    async with SQLiteLedger(db, readonly=True) as ledger:
        events = [e async for e in ledger.read()]
        verification = await ledger.verify()
    assert [(e.type, e.call_id) for e in events] == [
        ("call.requested", "c"),
        ("call.validated", "c"),
        ("effect.claimed", "c"),
        ("call.started", "c"),
        ("call.succeeded", "c"),
        ("call.replayed", "c"),
    ]
    assert replay(events, verification).problems() == []
