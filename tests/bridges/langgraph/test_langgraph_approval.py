"""Approval through LangGraph's own interrupt and resume, bound to the digest shown."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langgraph.types import Command, Interrupt
from langgraph_support import REFUND, Support, agent, answer, ask, calls, thread, types

from agent_adapter import CallbackApproval, Decision, Executor, digest
from agent_adapter.errors import ToolUsageError
from agent_adapter.integrations.langgraph import INTERRUPT_TYPE, Review, review_interrupts
from agent_adapter.ledger import ApprovalGranted, CallRequested, MemoryLedger
from agent_adapter.testing.langgraph import ScriptedChatModel

pytestmark = pytest.mark.usefixtures("bounded")


def tool_messages(result: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(tool_call_id, status, content) of each ToolMessage in a result."""
    return [
        (m.tool_call_id, m.status, m.content)
        for m in result["messages"]
        if isinstance(m, ToolMessage)
    ]


async def test_an_approved_call_interrupts_once_and_runs_once() -> None:
    """The refund pauses the thread with what the reviewer must see; the approval resumes
    it, the body runs once with the approved digest, and the model reads the result."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        graph, model = agent(executor, support.registry, [calls(("refund", REFUND, "c1"))])
        first = await graph.ainvoke(ask(), thread("t1"))
        (paused,) = first["__interrupt__"]
        assert (paused.value, support.ran) == (
            {
                "type": INTERRUPT_TYPE,
                "tool": "refund",
                "args": REFUND,
                "digest": digest(REFUND),
                "run_id": "t1",
                "call_id": "c1",
                "json_schema": support.registry.get("refund").json_schema,
                "effect_notice": "",
                "description": support.registry.get("refund").description,
            },
            [],
        )
        done = await graph.ainvoke(Command(resume={paused.id: answer(paused)}), thread("t1"))
        granted = [e async for e in executor.ledger.read() if isinstance(e, ApprovalGranted)]
        assert (
            tool_messages(done),
            support.ran,
            [(g.reviewer, g.source, g.digest) for g in granted],
            await types(executor),
        ) == (
            [("c1", "success", "refunded 500 on A1")],
            [("refund", REFUND)],
            [("alice", "context", digest(REFUND))],
            [
                ("call.requested", "c1"),
                ("call.validated", "c1"),
                ("approval.requested", "c1"),
                ("approval.granted", "c1"),
                ("effect.claimed", "c1"),
                ("call.started", "c1"),
                ("call.succeeded", "c1"),
            ],
        )
        assert model.seen[-1][-1].content == "refunded 500 on A1"


@pytest.mark.parametrize(
    "resume",
    [
        pytest.param(
            {"approved": True, "digest": digest({"order_id": "A1", "amount_cents": 1})},
            id="other-digest",
        ),
        pytest.param({"approved": True}, id="no-digest"),
        pytest.param("yes", id="not-an-answer"),
    ],
)
async def test_an_answer_not_bound_to_the_digest_shown_is_a_recorded_denial(resume: Any) -> None:
    """An approval for other arguments (or no answer at all) never runs the body: the call is
    denied, the denial recorded, and the model is told approval-denied."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        graph, _ = agent(executor, support.registry, [calls(("refund", REFUND, "c1"))])
        (paused,) = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        done = await graph.ainvoke(Command(resume={paused.id: resume}), thread("t1"))
        ((call_id, status, content),) = tool_messages(done)
        events = await types(executor)
    assert (call_id, status, '"kind":"approval-denied"' in content, support.ran) == (
        "c1",
        "error",
        True,
        [],
    )
    assert events == [
        ("call.requested", "c1"),
        ("call.validated", "c1"),
        ("approval.requested", "c1"),
        ("approval.denied", "c1"),
        ("call.denied", "c1"),
    ]


async def test_an_edit_runs_the_edited_arguments_and_keeps_the_models() -> None:
    """An approved edit is checked, runs alone, and the ledger keeps the model's original
    arguments beside the approved digest of the edit."""
    support = Support()
    edited = {"order_id": "A1", "amount_cents": 200}
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        graph, _ = agent(executor, support.registry, [calls(("refund", REFUND, "c1"))])
        (paused,) = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        done = await graph.ainvoke(
            Command(resume={paused.id: answer(paused, edits=edited)}), thread("t1")
        )
        events = [e async for e in executor.ledger.read()]
    requested = [e.args for e in events if isinstance(e, CallRequested)]
    granted = [e.digest for e in events if isinstance(e, ApprovalGranted)]
    assert (tool_messages(done), support.ran, requested, granted) == (
        [("c1", "success", "refunded 200 on A1")],
        [("refund", edited)],
        [REFUND],
        [digest(edited)],
    )


async def test_an_invalid_edit_is_a_recorded_denial_naming_the_problem() -> None:
    """An edit the tool's schema refuses never runs: denied, with the problem as reason."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        graph, _ = agent(executor, support.registry, [calls(("refund", REFUND, "c1"))])
        (paused,) = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        bad = {"order_id": "A1", "amount_cents": "200"}
        done = await graph.ainvoke(
            Command(resume={paused.id: answer(paused, edits=bad)}), thread("t1")
        )
        reasons = [
            e.reason
            async for e in executor.ledger.read()
            if e.type == "approval.denied"  # type: ignore[attr-defined]
        ]
    assert (tool_messages(done)[0][1], support.ran, len(reasons)) == ("error", [], 1)
    assert reasons[0].startswith("the reviewer's edit is invalid: ")


async def test_review_interrupts_asks_the_port_and_builds_the_resume_map() -> None:
    """``review_interrupts`` asks any port with the redacted arguments and ids, answers
    with the digest shown, and ``review.command`` resumes the thread."""
    support = Support()
    seen: list[tuple[str, str, str, dict[str, Any], str, dict[str, Any]]] = []

    def decide(request: Any) -> Decision:
        seen.append(
            (
                request.run_id,
                request.call_id,
                request.tool,
                request.args,
                request.digest,
                request.metadata,
            )
        )
        return Decision(approved=True, reviewer="bob")

    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        graph, _ = agent(executor, support.registry, [calls(("refund", REFUND, "c1"))])
        first = await graph.ainvoke(ask(), thread("t1"))
        review = await review_interrupts(first, CallbackApproval(decide))
        (paused,) = first["__interrupt__"]
        assert review == Review(
            resume={
                paused.id: {
                    "approved": True,
                    "reviewer": "bob",
                    "reason": "",
                    "edits": None,
                    "digest": digest(REFUND),
                    "call_id": "c1",
                    "tool": "refund",
                }
            }
        )
        done = await graph.ainvoke(review.command, thread("t1"))
    assert (seen, tool_messages(done), support.ran) == (
        [("t1", "c1", "refund", REFUND, digest(REFUND), {"integration": "langgraph"})],
        [("c1", "success", "refunded 500 on A1")],
        [("refund", REFUND)],
    )


async def test_review_interrupts_leaves_others_alone_and_keeps_threads_apart() -> None:
    """Interrupts that are not the bridge's are left to the host; a review for one thread
    refuses another thread's interrupt before asking; a port that raises denies."""
    ours = Interrupt(
        value={
            "type": INTERRUPT_TYPE,
            "tool": "refund",
            "args": REFUND,
            "digest": "d1",
            "run_id": "t1",
            "call_id": "c1",
            "json_schema": None,
        },
        id="i1",
    )
    foreign = Interrupt(value={"question": "continue?"}, id="i2")

    def broken(request: Any) -> bool:
        raise RuntimeError("the inbox is down")

    review = await review_interrupts([foreign, ours], CallbackApproval(broken))
    with pytest.raises(ToolUsageError):
        await review_interrupts([ours], CallbackApproval(broken), run_id="t2")
    assert review == Review(
        resume={
            "i1": {
                "approved": False,
                "reviewer": "",
                "reason": "approval port failed: RuntimeError: the inbox is down",
                "edits": None,
                "digest": "d1",
                "call_id": "c1",
                "tool": "refund",
            }
        }
    )


async def test_a_call_without_a_thread_is_refused() -> None:
    """Without a thread id there is no run the ledger could recognise a repeat by:
    ToolUsageError out of ainvoke, and nothing recorded or run."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        model = ScriptedChatModel(turns=[calls(("lookup", {"order_id": "A1"}, "c1"))])
        from agent_adapter.integrations.langgraph import langgraph_tools

        graph = create_agent(model, langgraph_tools(support.registry, executor=executor))
        with pytest.raises(ToolUsageError, match="thread"):
            await graph.ainvoke(ask())
        assert (await types(executor), support.ran) == ([], [])


async def test_message_scoped_call_ids_let_a_model_reuse_tool_call_ids() -> None:
    """A model that reuses a tool call id in a later turn: by default the second call is a
    ToolUsageError (a call id cannot be reused for new arguments); with
    ``call_ids="message"`` the ids are ``f"{message_id}:{tool_call_id}"`` and both run."""
    turns = [
        calls(("lookup", {"order_id": "A1"}, "call_0"), message_id="m1"),
        calls(("lookup", {"order_id": "A2"}, "call_0"), message_id="m2"),
    ]
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        graph, _ = agent(executor, support.registry, list(turns))
        with pytest.raises(ToolUsageError, match="cannot be reused for new arguments"):
            await graph.ainvoke(ask(), thread("t1"))
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        graph, _ = agent(executor, support.registry, list(turns), call_ids="message")
        await graph.ainvoke(ask(), thread("t1"))
        outcomes = [c for t, c in await types(executor) if t == "call.succeeded"]
    assert (outcomes, support.ran) == (
        ["m1:call_0", "m2:call_0"],
        [("lookup", {"order_id": "A1"}), ("lookup", {"order_id": "A2"})],
    )


async def test_a_partial_review_resumes_the_decided_call_and_leaves_the_other_paused() -> None:
    """Two refunds paused at once (a task each): answering one resumes it alone, the other
    stays paused with its own interrupt until it is answered; each body runs once."""
    support = Support()
    other = {"order_id": "A2", "amount_cents": 700}
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        graph, _ = agent(
            executor, support.registry, [calls(("refund", REFUND, "r1"), ("refund", other, "r2"))]
        )
        paused = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        by_call = {p.value["call_id"]: p for p in paused}
        first = by_call["r1"]
        partial = await graph.ainvoke(Command(resume={first.id: answer(first)}), thread("t1"))
        left = [p.value["call_id"] for p in partial["__interrupt__"]]
        ran_between = list(support.ran)
        (second,) = partial["__interrupt__"]
        await graph.ainvoke(Command(resume={second.id: answer(second)}), thread("t1"))
    assert (sorted(by_call), left, ran_between, support.ran) == (
        ["r1", "r2"],
        ["r2"],
        [("refund", REFUND)],
        [("refund", REFUND), ("refund", other)],
    )


async def test_a_sync_invoke_is_refused_before_anything_runs() -> None:
    """The bridge's tools are async only (asyncio, one code path): ``graph.invoke`` fails
    with LangChain's NotImplementedError before the executor sees the call."""
    support = Support()
    async with Executor(support.registry, ledger=MemoryLedger()) as executor:
        graph, _ = agent(executor, support.registry, [calls(("lookup", {"order_id": "A1"}, "c1"))])
        with pytest.raises(NotImplementedError):
            graph.invoke(ask(), thread("t1"))
        assert (await types(executor), support.ran) == ([], [])


async def test_arguments_named_like_langgraphs_injections_reach_the_tool() -> None:
    """A registry tool may take ``runtime`` or ``state``: the bridge's own injected runtime
    has another name, so the model's values arrive as sent."""
    from agent_adapter import Registry
    from agent_adapter.integrations.langgraph import NAME

    registry = Registry()

    @registry.tool(targets=[NAME])
    async def deploy(runtime: str, state: str) -> str:
        return f"{runtime}/{state}"

    async with Executor(registry, ledger=MemoryLedger()) as executor:
        args = {"runtime": "py311", "state": "on"}
        graph, _ = agent(executor, registry, [calls(("deploy", args, "c1"))])
        done = await graph.ainvoke(ask(), thread("t1"))
    assert tool_messages(done) == [("c1", "success", "py311/on")]


async def test_the_interrupt_shows_redacted_arguments_and_an_edit_may_keep_them() -> None:
    """The interrupt value (stored in the checkpointer, read by whoever resumes) carries
    the arguments as the ledger redacts them; an edit that leaves a redacted value as shown
    keeps the requested value, and the body gets it."""
    from agent_adapter import Registry
    from agent_adapter.integrations.langgraph import NAME

    registry = Registry()
    charged: list[str] = []

    @registry.tool(confirm=True, redact=("card",), targets=[NAME])
    async def charge(card: str, amount_cents: int) -> str:
        charged.append(card)
        return f"charged {amount_cents}"

    async with Executor(registry, ledger=MemoryLedger()) as executor:
        args = {"card": "4111-1111", "amount_cents": 900}
        graph, _ = agent(executor, registry, [calls(("charge", args, "c1"))])
        (paused,) = (await graph.ainvoke(ask(), thread("t1")))["__interrupt__"]
        edits = {**paused.value["args"], "amount_cents": 800}
        done = await graph.ainvoke(
            Command(resume={paused.id: answer(paused, edits=edits)}), thread("t1")
        )
    assert (paused.value["args"], tool_messages(done), charged) == (
        {"card": "[redacted]", "amount_cents": 900},
        [("c1", "success", "charged 800")],
        ["4111-1111"],
    )
