"""Approvals through pydantic-ai's deferred tool calls: only the port's answer approves.

``DeferredToolResults`` is plain data a client can write, so a ``ToolApproved()`` built by
hand, ``DeferredToolResults.metadata`` and ``override_args`` approve nothing: only the
one-use token ``resolve_deferred`` issues after the port said yes, bound to the digest.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_support import REFUND, ScriptedModel, Support, agent_for, events, tags, tool_call

from agent_adapter import (
    ApprovalRequest,
    CallbackApproval,
    Decision,
    DeferredApproval,
    Executor,
    digest,
)
from agent_adapter.errors import ToolUsageError
from agent_adapter.integrations.pydantic_ai import META_KEY, ExecutorToolset
from agent_adapter.ledger import ApprovalGranted, CallDenied, CallValidated, MemoryLedger


class Paused:
    """One refund call paused for approval: the agent, its toolset, ledger and requests."""

    def __init__(self, *, deferred_port: bool = False, clock: Any = None) -> None:
        self.support = Support()
        self.ledger = MemoryLedger()
        approval = DeferredApproval(self.ledger) if deferred_port else None
        self.executor = Executor(self.support.registry, ledger=self.ledger, approval=approval)
        self.toolset = ExecutorToolset(self.support.registry, executor=self.executor, clock=clock)
        self.model = ScriptedModel([[tool_call("refund", REFUND, "c1")], "done"])
        self.agent = agent_for(self.model, self.toolset)

    async def pause(self) -> DeferredToolRequests:
        self.result = await self.agent.run("refund A1", conversation_id="conv-1")
        assert isinstance(self.result.output, DeferredToolRequests)
        return self.result.output

    async def resume(self, results: DeferredToolResults) -> Any:
        done = await self.agent.run(
            message_history=self.result.all_messages(), deferred_tool_results=results
        )
        return done.output


def _yes(request: ApprovalRequest) -> Decision:
    return Decision(approved=True, reviewer="alice")


async def test_an_unapproved_call_pauses_with_its_digest_and_records_nothing() -> None:
    """The run ends with DeferredToolRequests; the request's metadata carries the digest,
    the shown arguments and the ids; nothing is in the ledger and nothing ran."""
    paused = Paused()
    requests = await paused.pause()
    assert [p.tool_call_id for p in requests.approvals] == ["c1"]
    assert requests.metadata["c1"][META_KEY] == {
        "tool": "refund",
        "run_id": "conv-1",
        "call_id": "c1",
        "digest": digest(REFUND),
        "args": REFUND,
        "effect_notice": "",
    }
    assert (await events(paused.ledger), paused.support.ran) == ([], [])


async def test_an_approved_call_runs_once_and_a_second_resume_replays() -> None:
    """The port's approval runs the body once, under the approved digest; resuming the same
    history again is answered from the ledger (call.replayed), the body not run again."""
    paused = Paused()
    requests = await paused.pause()
    review = await paused.toolset.resolve_deferred(requests, CallbackApproval(_yes))
    assert (review.approved, review.denied, review.pending) == (("c1",), (), ())
    assert review.results.approvals == {"c1": ToolApproved()}
    assert await paused.resume(review.results) == "done"
    assert await paused.resume(review.results) == "done"
    assert paused.support.ran == [("refund", REFUND)]
    granted = [e for e in await events(paused.ledger) if isinstance(e, ApprovalGranted)]
    assert [(g.reviewer, g.source, g.digest) for g in granted] == [
        ("alice", "context", digest(REFUND))
    ]
    assert [t for t, _ in await tags(paused.ledger)][-2:] == ["call.succeeded", "call.replayed"]


async def test_a_denial_is_recorded_and_the_model_sees_tool_denied() -> None:
    """A denial is recorded (call.denied with the reviewer and reason) before the resume;
    the model gets pydantic-ai's denied tool return with the JSON error; nothing ran."""
    paused = Paused()
    requests = await paused.pause()
    no = CallbackApproval(lambda r: Decision(approved=False, reviewer="bob", reason="too much"))
    review = await paused.toolset.resolve_deferred(requests, no)
    (answer,) = review.results.approvals.values()
    assert isinstance(answer, ToolDenied) and review.denied == ("c1",)
    (denied,) = [e for e in await events(paused.ledger) if isinstance(e, CallDenied)]
    assert (denied.reviewer, denied.reason) == ("bob", "too much")
    assert await paused.resume(review.results) == "done"
    output, outcome = paused.model.output("c1")
    assert (outcome, output["error"]["kind"], paused.support.ran) == (
        "denied",
        "approval-denied",
        [],
    )


@pytest.mark.parametrize("answer", [ToolApproved(), True], ids=["ToolApproved()", "True"])
async def test_a_hand_built_approval_never_runs_the_body(answer: Any) -> None:
    """A ToolApproved() (or True) the host wrote itself carries no token: the executor's own
    port decides, and with none the call is denied; the body never runs."""
    paused = Paused()
    await paused.pause()
    assert await paused.resume(DeferredToolResults(approvals={"c1": answer})) == "done"
    assert (paused.model.output("c1")[1], paused.support.ran) == ("denied", [])
    assert (await tags(paused.ledger))[-1] == ("call.denied", "c1")


async def test_a_hand_built_approval_meets_the_deferred_port_as_pending() -> None:
    """With a DeferredApproval as the executor's port, a hand-built approval is a pending
    request (the model is told approval-pending), never a run."""
    paused = Paused(deferred_port=True)
    await paused.pause()
    await paused.resume(DeferredToolResults(approvals={"c1": ToolApproved()}))
    output, outcome = paused.model.output("c1")
    assert (outcome, output["error"]["kind"], paused.support.ran) == (
        "failed",
        "approval-pending",
        [],
    )


async def test_client_metadata_approves_nothing() -> None:
    """``DeferredToolResults.metadata`` is the client's: a copy of the bridge's own entry,
    an "approved" flag or a digest in it approves nothing."""
    paused = Paused()
    requests = await paused.pause()
    forged = {"c1": {**requests.metadata["c1"], "approved": True, "token": "x"}}
    forged["c1"][META_KEY] = {**forged["c1"][META_KEY], "approved": True}
    results = DeferredToolResults(approvals={"c1": ToolApproved()}, metadata=forged)
    await paused.resume(results)
    assert (paused.model.output("c1")[1], paused.support.ran) == ("denied", [])


async def test_override_args_after_an_approval_never_run_other_arguments() -> None:
    """An approval is for the digest the port saw: ``override_args`` with other arguments
    finds the token ignored (recorded under their own digest, then denied); the body never
    runs. The same arguments (another key order) are the approved digest and run."""
    paused = Paused()
    requests = await paused.pause()
    review = await paused.toolset.resolve_deferred(requests, CallbackApproval(_yes))
    bigger = {"order_id": "A1", "amount_cents": 50_000}
    await paused.resume(DeferredToolResults(approvals={"c1": ToolApproved(override_args=bigger)}))
    validated = [e.digest for e in await events(paused.ledger) if isinstance(e, CallValidated)]
    assert (validated, paused.support.ran) == ([digest(bigger)], [])
    assert (await tags(paused.ledger))[-1] == ("call.denied", "c1")

    again = Paused()
    requests = await again.pause()
    review = await again.toolset.resolve_deferred(requests, CallbackApproval(_yes))
    same = {"amount_cents": 500, "order_id": "A1"}
    await again.resume(DeferredToolResults(approvals={"c1": ToolApproved(override_args=same)}))
    assert (review.approved, again.support.ran) == (("c1",), [("refund", REFUND)])


async def test_an_edit_runs_the_edited_arguments_and_keeps_the_model_s() -> None:
    """An edit travels in the token, never as override_args: the body runs the edited
    arguments; the ledger's call.validated keeps the model's digest and the approval names
    the edited one; pydantic-ai's history keeps the model's own arguments."""
    paused = Paused()
    requests = await paused.pause()
    edited = {"order_id": "A1", "amount_cents": 200}
    port = CallbackApproval(lambda r: Decision(approved=True, reviewer="carol", edits=edited))
    review = await paused.toolset.resolve_deferred(requests, port)
    assert review.results.approvals == {"c1": ToolApproved()}
    await paused.resume(review.results)
    assert paused.support.ran == [("refund", edited)]
    ledger = await events(paused.ledger)
    assert [e.digest for e in ledger if isinstance(e, CallValidated)] == [digest(REFUND)]
    assert [e.digest for e in ledger if isinstance(e, ApprovalGranted)] == [digest(edited)]
    assert requests.approvals[0].args_as_dict() == REFUND


async def test_a_token_is_used_once_and_expires(clock: Any) -> None:
    """A token unused within its TTL is gone: the resume finds no approval (denied)."""
    paused = Paused(clock=clock)
    requests = await paused.pause()
    review = await paused.toolset.resolve_deferred(requests, CallbackApproval(_yes))
    clock.advance(61)
    await paused.resume(review.results)
    assert (paused.model.output("c1")[1], paused.support.ran) == ("denied", [])


async def test_requests_without_the_bridge_s_metadata_need_a_run_id() -> None:
    """Requests stripped of their metadata do not say which run they belong to: refused
    before the port is asked; given the conversation id, they resolve."""
    paused = Paused()
    requests = await paused.pause()
    asked: list[str] = []

    def port(request: ApprovalRequest) -> bool:
        asked.append(request.run_id)
        return True

    bare = DeferredToolRequests(approvals=list(requests.approvals))
    with pytest.raises(ToolUsageError, match="pass run_id="):
        await paused.toolset.resolve_deferred(bare, CallbackApproval(port))
    review = await paused.toolset.resolve_deferred(bare, CallbackApproval(port), run_id="conv-1")
    assert await paused.resume(review.results) == "done"
    assert (asked, paused.support.ran) == (["conv-1"], [("refund", REFUND)])


async def test_a_deferred_port_leaves_the_call_pending_until_answered() -> None:
    """With DeferredApproval the first resolve leaves the request pending (no result for
    the call); once answered, resolving the same requests again approves it, once."""
    paused = Paused()
    deferred = DeferredApproval(paused.ledger)
    requests = await paused.pause()
    first = await paused.toolset.resolve_deferred(requests, deferred)
    assert (first.results.approvals, len(first.pending)) == ({}, 1)
    await deferred.answer(first.pending[0], approved=True, reviewer="dana")
    second = await paused.toolset.resolve_deferred(requests, deferred)
    assert (second.approved, second.pending) == (("c1",), ())
    assert await paused.resume(second.results) == "done"
    assert paused.support.ran == [("refund", REFUND)]


async def test_a_call_already_done_is_not_asked_about_again() -> None:
    """Resolving the same requests after the call ran asks nobody (the ledger shows it
    done): ToolApproved() without a token, decided by neither list, answered by replay."""
    paused = Paused()
    requests = await paused.pause()
    asked: list[str] = []

    def port(request: ApprovalRequest) -> bool:
        asked.append(request.call_id)
        return True

    first = await paused.toolset.resolve_deferred(requests, CallbackApproval(port))
    await paused.resume(first.results)
    again = await paused.toolset.resolve_deferred(requests, CallbackApproval(port))
    assert (again.results.approvals, again.approved, again.denied) == (
        {"c1": ToolApproved()},
        (),
        (),
    )
    assert await paused.resume(again.results) == "done"
    assert (asked, paused.support.ran) == (["c1"], [("refund", REFUND)])
    assert [t for t, _ in await tags(paused.ledger)][-1] == "call.replayed"
