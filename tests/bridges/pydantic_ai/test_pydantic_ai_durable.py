"""A pause that outlives its process: SQLite ledger, the CLI answers, a fresh executor resumes.

Process A pauses a refund for approval (DeferredApproval on a SQLite file) and stores the
message history and the requests as JSON. ``agent-adapter approvals approve`` runs as a
real subprocess. A fresh executor on the same file, with a fresh registry (as a new
process has), loads the JSON and resumes; resuming the same history again, even from
another fresh executor, never runs the body a second time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved
from pydantic_support import REFUND, ScriptedModel, Support, agent_for, events, tool_call

from agent_adapter import DeferredApproval, Executor
from agent_adapter.integrations.pydantic_ai import ExecutorToolset
from agent_adapter.ledger import SQLiteLedger, replay

REQUESTS = TypeAdapter(DeferredToolRequests)
DEADLINE_S = 60


def _model() -> ScriptedModel:
    return ScriptedModel([[tool_call("refund", REFUND, "call-1")], "Refunded order A1."])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )


async def _pause(db: Path) -> tuple[bytes, bytes, str, list[Any]]:
    """Process A: run until the refund pauses; its request left pending at the port."""
    support = Support()
    ledger = SQLiteLedger(db)
    executor = await Executor.open(support.registry, ledger=ledger)
    try:
        toolset = ExecutorToolset(support.registry, executor=executor)
        result = await agent_for(_model(), toolset).run("Refund A1", conversation_id="conv-7")
        requests = result.output
        assert isinstance(requests, DeferredToolRequests)
        review = await toolset.resolve_deferred(requests, DeferredApproval(ledger))
        assert (review.results.approvals, len(review.pending)) == ({}, 1)
        history = ModelMessagesTypeAdapter.dump_json(result.all_messages())
        return history, REQUESTS.dump_json(requests), review.pending[0], support.ran
    finally:
        await executor.close()


async def _resume(
    db: Path, history: bytes, requests_json: bytes, *, resolve: bool, decided: tuple[str, ...] = ()
) -> Any:
    """A fresh process: a new registry and executor on the file, the history from JSON.

    ``resolve`` asks the ledger's DeferredApproval (the CLI's answer) for the results, and
    ``decided`` is what that pass must have approved; otherwise the results are a
    hand-built ToolApproved(), as a host replaying a stored resume would send.
    """
    support = Support()
    ledger = SQLiteLedger(db)
    executor = await Executor.open(support.registry, ledger=ledger)
    try:
        toolset = ExecutorToolset(support.registry, executor=executor)
        requests = REQUESTS.validate_json(requests_json)
        if resolve:
            review = await toolset.resolve_deferred(requests, DeferredApproval(ledger))
            assert (review.approved, review.pending) == (decided, ())
            results = review.results
        else:
            results = DeferredToolResults(approvals={"call-1": ToolApproved()})
        model = _model()
        done = await agent_for(model, toolset).run(
            message_history=ModelMessagesTypeAdapter.validate_json(history),
            deferred_tool_results=results,
        )
        return done.output, model.output("call-1"), support.ran
    finally:
        await executor.close()


async def test_the_cli_answers_and_a_fresh_executor_resumes_once(tmp_path: Path) -> None:
    """Approved from another process, resumed by a fresh executor from JSON: the refund
    runs once; resuming again (more fresh executors, resolving again or not) is answered
    from the ledger."""
    db = tmp_path / "ledger.db"
    history, requests_json, request_id, ran_a = await _pause(db)
    assert ran_a == []

    listed = _cli("approvals", "list", "--db", str(db))
    assert (listed.returncode, request_id in listed.stdout) == (0, True)
    answered = _cli("approvals", "approve", request_id, "--db", str(db), "--reviewer", "alice")
    assert (answered.returncode, answered.stderr) == (0, "")
    assert answered.stdout == f"approved request {request_id} (refund, run conv-7) as alice\n"

    output, seen, ran_b = await _resume(
        db, history, requests_json, resolve=True, decided=("call-1",)
    )
    assert (output, seen, ran_b) == (
        "Refunded order A1.",
        ("refunded 500 on A1", "success"),
        [("refund", REFUND)],
    )
    # Again from the stored JSON, twice: resolved again (the ledger shows the call done, so
    # nobody is asked and the spent answer is not looked for), and with a hand-built answer.
    for resolve in (True, False):
        output, seen, ran_c = await _resume(db, history, requests_json, resolve=resolve)
        assert (output, seen, ran_c) == (
            "Refunded order A1.",
            ("refunded 500 on A1", "success"),
            [],
        )

    ledger = SQLiteLedger(db)
    try:
        recorded = await events(ledger)
        audit = replay(recorded, await ledger.verify())
    finally:
        await ledger.close()
    of_call = [e.type for e in recorded if e.call_id == "call-1" and e.type.startswith("call.")]
    assert of_call == [
        "call.requested",
        "call.validated",
        "call.started",
        "call.succeeded",
        "call.replayed",
        "call.replayed",
    ]
    assert {e.run_id for e in recorded} == {"conv-7"}
    assert audit.problems() == []
