"""A claim whose holder writes its outcome and stops between two looks of this executor.

Replica B (another SQLiteLedger object on the same file) has heard of replica A's claim of
refund o1, but not of its outcome. Asked for the same refund under another call id, B
reads the ledger (nothing new yet); right after that read A finishes, commits the outcome
and its process is gone (its lease still runs). B must not take "holder gone, no outcome
heard" for "holder died mid-body": an end seen before news is read is proof, one seen
after it is not. It reads again, finds A's outcome and refuses the call as a duplicate.
Before, B recorded ``call.ambiguous`` and the key stayed ambiguous: the Postgres race of
four processes that exit as they finish showed it under load (66 of 200 keys).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import GatedRefund

from agent_adapter import Executor
from agent_adapter.errors import DuplicateEffect
from agent_adapter.ledger import SQLiteLedger, replay


def _dead_pid() -> int:
    """A pid whose process has ended (and been reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


async def test_a_holder_that_finished_then_stopped_leaves_a_duplicate_not_ambiguous(
    tmp_path: Path,
) -> None:
    db = tmp_path / "shared.db"
    tool = GatedRefund()
    a = await Executor.open(tool.registry, ledger=SQLiteLedger(db))
    a._pipe.pid = _dead_pid()  # its claims name a process that will be gone
    a._pipe.pid_start = 0
    a_call = asyncio.create_task(a.call("refund", {"order_id": "o1"}, run_id="ra", call_id="ca"))
    await asyncio.wait_for(tool.running.wait(), 60)  # A's claim and call.started are durable

    b_ledger = SQLiteLedger(db)
    real_catch_up = b_ledger.catch_up
    looks = 0

    async def catch_up() -> None:
        nonlocal looks
        looks += 1
        await real_catch_up()
        if looks == 1:  # right after B's first look: A finishes, and is gone
            tool.gate.set()
            assert await a_call == "refunded o1"

    b_ledger.catch_up = catch_up  # type: ignore[method-assign]
    async with await Executor.open(tool.registry, ledger=b_ledger) as b:
        assert b.state.effects["refund:o1"].status == "claimed"  # heard of the claim only
        with pytest.raises(DuplicateEffect) as refused:
            await b.call("refund", {"order_id": "o1"}, run_id="rb", call_id="cb")
        assert (refused.value.run_id, refused.value.call_id) == ("ra", "ca")
    await a.close()
    assert tool.ran == ["o1"]
    async with SQLiteLedger(db, readonly=True) as ledger:
        events = [e async for e in ledger.read()]
        verification = await ledger.verify()
    assert [e.type for e in events if e.call_id == "cb"][-1] == "call.duplicate"
    audit = replay(events, verification)
    assert audit.problems() == []
