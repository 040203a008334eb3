"""A real SQLite ledger under LangGraph: approvals answered from another process, resumes
repeated and old checkpoints restored, and no body ever running twice."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from langgraph_support import REFUND, Support, agent, answer, ask, calls, thread, types

from agent_adapter import DeferredApproval, Executor
from agent_adapter.integrations.langgraph import review_interrupts
from agent_adapter.ledger import SQLiteLedger

pytestmark = pytest.mark.usefixtures("bounded")

DEADLINE_S = 60.0


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``agent-adapter ARGS`` in a fresh process."""
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        env=env,
        check=False,
    )


def restored(saver: InMemorySaver) -> InMemorySaver:
    """A copy of a checkpointer's contents, as a backup restored into a new process."""
    copied = InMemorySaver()
    copied.storage = copy.deepcopy(saver.storage)
    copied.writes = copy.deepcopy(saver.writes)
    copied.blobs = copy.deepcopy(saver.blobs)
    return copied


def done_turns() -> list[AIMessage]:
    """A resumed graph's model: it only says it is done (the tool call was made before)."""
    return [AIMessage(content="done")]


async def test_an_approval_left_pending_is_answered_by_the_cli_and_resumed_by_a_fresh_executor(
    tmp_path: Path,
) -> None:
    """The refund pauses; a DeferredApproval holds it open; ``agent-adapter approvals
    approve`` answers it from another process; a fresh executor on the same file reviews
    the thread's interrupts again, and the body runs once with the approved digest."""
    db = tmp_path / "ledger.db"
    saver = InMemorySaver()
    support = Support()
    ledger = SQLiteLedger(str(db))
    async with Executor(support.registry, ledger=ledger) as executor:
        graph, _ = agent(
            executor, support.registry, [calls(("refund", REFUND, "c1"))], checkpointer=saver
        )
        first = await graph.ainvoke(ask(), thread("t1"))
        review = await review_interrupts(first, DeferredApproval(ledger))
        (request_id,) = review.pending
        assert (review.resume, support.ran) == ({}, [])

    answered = cli("approvals", "approve", request_id, "--db", str(db), "--reviewer", "alice")
    assert (answered.returncode, answered.stdout) == (
        0,
        f"approved request {request_id} (refund, run t1) as alice\n",
    )

    ledger = SQLiteLedger(str(db))
    async with Executor(support.registry, ledger=ledger) as fresh:
        graph, _ = agent(fresh, support.registry, done_turns(), checkpointer=saver)
        review = await review_interrupts(
            await graph.aget_state(thread("t1")), DeferredApproval(ledger)
        )
        assert review.pending == ()
        done = await graph.ainvoke(review.command, thread("t1"))
        events = await types(fresh)
        verified = await ledger.verify()
    assert (done["messages"][-1].content, support.ran, verified.ok) == (
        "done",
        [("refund", REFUND)],
        True,
    )
    assert events == [
        ("approval.pending", "c1"),
        ("approval.answered", "c1"),
        ("approval.consumed", "c1"),
        ("call.requested", "c1"),
        ("call.validated", "c1"),
        ("approval.requested", "c1"),
        ("approval.granted", "c1"),
        ("effect.claimed", "c1"),
        ("call.started", "c1"),
        ("call.succeeded", "c1"),
    ]


async def test_a_resume_run_twice_never_runs_the_body_twice(tmp_path: Path) -> None:
    """Resuming the same paused checkpoint a second time (time travel to it) reruns the
    tool's task: the call is answered from the ledger (call.replayed), not asked again,
    and the body ran once."""
    support = Support()
    async with Executor(support.registry, ledger=SQLiteLedger(str(tmp_path / "l.db"))) as executor:
        graph, _ = agent(executor, support.registry, [calls(("refund", REFUND, "c1"))])
        (paused,) = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        at_pause = (await graph.aget_state(thread("t1"))).config
        resume = Command(resume={paused.id: answer(paused)})
        first = await graph.ainvoke(resume, thread("t1"))
        again = await graph.ainvoke(resume, at_pause)
        replayed = [c for t, c in await types(executor) if t == "call.replayed"]
    assert (
        first["messages"][2].content,
        again["messages"][2].content,
        "__interrupt__" in again,
        support.ran,
        replayed,
    ) == ("refunded 500 on A1", "refunded 500 on A1", False, [("refund", REFUND)], ["c1"])


@pytest.mark.parametrize("resume_with", ["the-answer", "nothing"])
async def test_an_older_checkpoint_restored_after_a_restart_never_runs_the_body_twice(
    tmp_path: Path, resume_with: str
) -> None:
    """The checkpointer is backed up while the refund waits; the refund is approved and
    runs; the process restarts (a new executor on the same SQLite file) with the backup
    restored, and the thread is resumed again (with the answer, or with nothing): the
    tool's task reruns, the ledger answers it (call.replayed), the body ran once."""
    db = str(tmp_path / "ledger.db")
    support = Support()
    saver = InMemorySaver()
    async with Executor(support.registry, ledger=SQLiteLedger(db)) as executor:
        graph, _ = agent(
            executor, support.registry, [calls(("refund", REFUND, "c1"))], checkpointer=saver
        )
        (paused,) = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        backup = restored(saver)
        await graph.ainvoke(Command(resume={paused.id: answer(paused)}), thread("t1"))

    async with Executor(support.registry, ledger=SQLiteLedger(db)) as restarted:
        graph, _ = agent(restarted, support.registry, done_turns(), checkpointer=backup)
        assert (await graph.aget_state(thread("t1"))).next == ("tools",)
        value: Any = (
            Command(resume={paused.id: answer(paused)}) if resume_with == "the-answer" else None
        )
        done = await graph.ainvoke(value, thread("t1"))
        events = await types(restarted)
    assert (done["messages"][2].content, "__interrupt__" in done, support.ran) == (
        "refunded 500 on A1",
        False,
        [("refund", REFUND)],
    )
    assert [t for t, _ in events].count("call.started") == 1
    assert [t for t, _ in events if t == "call.replayed"] == ["call.replayed"]
