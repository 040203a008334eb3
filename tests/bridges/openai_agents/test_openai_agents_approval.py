"""The approval gate and resolve_interruptions, end to end through the real Runner.run."""

from __future__ import annotations

from typing import Any

import pytest
from _helpers import timeline
from agents import FunctionTool, Runner
from openai_agents_helpers import (
    CONFIG,
    approvals_that_ran,
    assistant_message,
    call_events,
    call_types,
    function_call,
    make_agent,
    outputs,
)

from agent_adapter import (
    ApprovalRequest,
    CallbackApproval,
    Decision,
    DeferredApproval,
    Executor,
    Registry,
)
from agent_adapter.bridges.openai_agents import INTEGRATION
from agent_adapter.errors import LedgerError, ToolUsageError
from agent_adapter.integrations.openai_agents import function_tools, resolve_interruptions
from agent_adapter.ledger import ApprovalGranted, ApprovalRejected, CallStarted, MemoryLedger

APPROVED_RUN = timeline("call.succeeded", approval="granted")


class Recorder:
    """A port that records every request and answers with ``answer(request)``."""

    def __init__(self, answer: Any = True) -> None:
        self.requests: list[ApprovalRequest] = []
        self._answer = answer

    async def decide(self, request: ApprovalRequest) -> Decision:
        self.requests.append(request)
        answer = self._answer(request) if callable(self._answer) else self._answer
        return answer if isinstance(answer, Decision) else Decision(approved=answer, reviewer="ops")


def build(confirm: Any = True) -> tuple[Registry, list[dict[str, Any]]]:
    """A registry with ``refund`` (gated by ``confirm``) and an ungated ``lookup``."""
    registry = Registry()
    ran: list[dict[str, Any]] = []

    @registry.tool(confirm=confirm)
    async def refund(order_id: str, amount_cents: int, note: str = "") -> str:
        """Refund an order."""
        ran.append({"order_id": order_id, "amount_cents": amount_cents, "note": note})
        return f"refunded {amount_cents} on {order_id}"

    @registry.tool
    async def lookup(order_id: str) -> dict[str, Any]:
        """Look an order up."""
        return {"order_id": order_id, "status": "paid"}

    return registry, ran


async def paused(registry: Registry, executor: Executor, *calls: Any) -> tuple[Any, Any, Any]:
    """Run an agent whose first turn makes ``calls``; returns (agent, model, result)."""
    agent, model = make_agent(
        function_tools(registry, executor=executor), list(calls), [assistant_message("done")]
    )
    result = await Runner.run(agent, "Refund order A1", run_config=CONFIG)
    return agent, model, result


async def test_approved_call_runs_once_with_the_approval_in_the_ledger() -> None:
    """An approved confirm-call runs once; the ledger shows approval.granted by the token's decision
    (source "context") for the digest that ran."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    port = Recorder()
    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 500}, call_id="c1"),
    )
    assert [(i.tool_name, i.call_id) for i in result.interruptions] == [("refund", "c1")]
    assert await call_types(ledger, "c1") == []  # paused before the executor saw it

    state = await resolve_interruptions(result, port, run_id="r-7")
    result = await Runner.run(agent, state, run_config=CONFIG)

    assert result.final_output == "done"
    assert outputs(model) == {"c1": "refunded 500 on A1"}
    assert ran == [{"order_id": "A1", "amount_cents": 500, "note": ""}]
    [request] = port.requests
    assert (request.run_id, request.call_id, request.tool) == ("r-7", "c1", "refund")
    assert request.args == {"order_id": "A1", "amount_cents": 500, "note": ""}
    assert request.metadata == {"integration": "openai_agents"}
    events = await call_events(ledger, "c1")
    assert [e.type for e in events] == APPROVED_RUN
    granted = next(e for e in events if isinstance(e, ApprovalGranted))
    started = next(e for e in events if isinstance(e, CallStarted))
    assert (granted.reviewer, granted.source, granted.edited) == ("ops", "context", False)
    assert granted.digest == started.digest == request.digest
    assert events[0].metadata == {"integration": "openai_agents"}
    assert await approvals_that_ran(ledger) == {"c1": ("context", "ops", True)}


async def test_rejected_call_never_runs_and_the_model_sees_approval_denied() -> None:
    """A rejected call never runs, the model sees approval-denied, and the ledger records who
    denied which arguments."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    port = Recorder(Decision(approved=False, reviewer="ops", reason="too large"))
    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 50_000}, call_id="c1"),
    )
    state = await resolve_interruptions(result, port)
    result = await Runner.run(agent, state, run_config=CONFIG)

    assert outputs(model) == {
        "c1": '{"error":{"kind":"approval-denied","message":"refund was not approved: too large"}}'
    }
    assert ran == []
    assert await call_types(ledger, "c1") == timeline("call.failed", approval="denied")
    [rejected] = [e async for e in ledger.read() if isinstance(e, ApprovalRejected)]
    assert (rejected.reviewer, rejected.source, rejected.reason) == ("ops", "port", "too large")


async def test_valid_edit_runs_the_edited_arguments_only() -> None:
    """Edits travel in the token: the executor validates them, re-checks them and runs only them."""
    registry, ran = build()
    ledger = MemoryLedger()
    checked: list[dict[str, Any]] = []

    class Check:
        def before_tool(self, call: Any) -> None:
            checked.append(call.args)

    executor = Executor(registry, ledger=ledger, hooks=[Check()])
    edits = {"order_id": "A1", "amount_cents": 100}
    port = Recorder(Decision(approved=True, reviewer="ops", edits=edits))
    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 500}, call_id="c1"),
    )
    state = await resolve_interruptions(result, port)
    await Runner.run(agent, state, run_config=CONFIG)

    assert outputs(model) == {"c1": "refunded 100 on A1"}
    assert ran == [{"order_id": "A1", "amount_cents": 100, "note": ""}]
    assert checked == [
        {"order_id": "A1", "amount_cents": 500, "note": ""},
        {"order_id": "A1", "amount_cents": 100, "note": ""},
    ]
    events = await call_events(ledger, "c1")
    assert [e.type for e in events] == APPROVED_RUN
    granted = next(e for e in events if isinstance(e, ApprovalGranted))
    started = next(e for e in events if isinstance(e, CallStarted))
    assert granted.edited is True and granted.source == "context"
    assert granted.digest == started.digest != port.requests[0].digest
    assert await approvals_that_ran(ledger) == {"c1": ("context", "ops", True)}


async def test_invalid_edit_gives_the_model_tool_args_invalid() -> None:
    """An edit that does not validate ends the call with tool-args-invalid; nothing runs."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    port = Recorder(Decision(approved=True, edits={"order_id": "A1", "amount_cents": "lots"}))
    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 500}, call_id="c1"),
    )
    state = await resolve_interruptions(result, port)
    await Runner.run(agent, state, run_config=CONFIG)

    output = outputs(model)["c1"]
    assert output.startswith('{"error":{"kind":"tool-args-invalid","message":"')
    assert ran == []
    assert await call_types(ledger, "c1") == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "call.invalid",
    ]


async def test_invalid_arguments_never_reach_the_port() -> None:
    """Arguments that do not validate pass the SDK gate unasked; the executor returns tool-args-
    invalid."""
    registry, ran = build()
    ledger = MemoryLedger()
    port = Recorder()
    executor = Executor(registry, ledger=ledger, approval=port)
    _agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": "500"}, call_id="c1"),
    )
    assert result.interruptions == []
    assert result.final_output == "done"
    assert port.requests == []
    assert ran == []
    assert outputs(model)["c1"].startswith('{"error":{"kind":"tool-args-invalid"')
    assert await call_types(ledger, "c1") == ["call.requested", "call.invalid"]


async def test_bad_json_pauses_in_the_sdk_and_is_denied_without_asking() -> None:
    """The SDK pauses a gated call whose text is not JSON; resolve denies it without asking the
    port."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    port = Recorder()
    agent, model, result = await paused(
        registry, executor, function_call("refund", "{not json", call_id="c1")
    )
    assert [i.call_id for i in result.interruptions] == ["c1"]
    state = await resolve_interruptions(result, port)
    await Runner.run(agent, state, run_config=CONFIG)

    assert port.requests == []
    assert ran == []
    output = outputs(model)["c1"]
    assert output.startswith(
        '{"error":{"kind":"approval-denied","message":"refund was not approved: '
        "its arguments are invalid"
    )
    # The refusal is on record: the executor saw the text and found it invalid.
    assert await call_types(ledger, "c1") == ["call.requested", "call.invalid"]


async def test_rule_that_says_no_lets_the_call_through_and_the_executor_runs_it_again() -> None:
    """A rule's "no" skips the SDK pause; the executor evaluates the rule itself and runs the call
    unapproved."""
    seen: list[tuple[str, dict[str, Any], str]] = []

    def large(call: Any, ctx: Any) -> bool:
        seen.append((call.tool, call.args, ctx.call_id))
        return call.args["amount_cents"] >= 10_000

    registry, _ran = build(confirm=large)
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    _agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 500}, call_id="c1"),
    )
    assert result.interruptions == []
    assert outputs(model) == {"c1": "refunded 500 on A1"}
    args = {"order_id": "A1", "amount_cents": 500, "note": ""}
    assert seen == [("refund", args, "c1"), ("refund", args, "c1")]  # SDK gate, then executor
    assert await call_types(ledger, "c1") == timeline("call.succeeded")


async def test_rule_that_says_yes_pauses_and_the_token_approves() -> None:
    """A rule's "yes" pauses the run; the approved call runs with the token's approval."""
    registry, _ran = build(confirm=lambda call, ctx: call.args["amount_cents"] >= 10_000)
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 20_000}, call_id="c1"),
        function_call("refund", {"order_id": "A2", "amount_cents": 5}, call_id="c2"),
    )
    assert [i.call_id for i in result.interruptions] == ["c1"]
    state = await resolve_interruptions(result, Recorder())
    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model) == {"c1": "refunded 20000 on A1", "c2": "refunded 5 on A2"}
    assert await call_types(ledger, "c1") == APPROVED_RUN


async def test_parallel_calls_in_one_turn_are_decided_one_by_one() -> None:
    """Three calls in one turn: the ungated one runs at once, one gated call is approved, the other
    rejected."""
    registry, _ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    port = Recorder(lambda request: request.args["amount_cents"] < 1_000)
    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 500}, call_id="c1"),
        function_call("lookup", {"order_id": "A1"}, call_id="c2"),
        function_call("refund", {"order_id": "A2", "amount_cents": 90_000}, call_id="c3"),
    )
    assert sorted(i.call_id for i in result.interruptions) == ["c1", "c3"]
    state = await resolve_interruptions(result, port)
    await Runner.run(agent, state, run_config=CONFIG)

    assert outputs(model) == {
        "c1": "refunded 500 on A1",
        "c2": '{"order_id":"A1","status":"paid"}',
        "c3": '{"error":{"kind":"approval-denied","message":"refund was not approved"}}',
    }
    assert sorted(r.call_id for r in port.requests) == ["c1", "c3"]
    assert await call_types(ledger, "c1") == APPROVED_RUN
    assert await call_types(ledger, "c2") == timeline("call.succeeded")
    assert await call_types(ledger, "c3") == timeline("call.failed", approval="denied")


async def test_deferred_approval_works_in_two_phases() -> None:
    """A deferred port leaves the call paused; after the answer, a second resolve with the same
    state and run_id approves it."""
    registry, _ran = build()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 500}, call_id="c1"),
    )
    state = await resolve_interruptions(result, deferred, run_id="r-1")
    [pending] = await deferred.pending()
    assert (pending.run_id, pending.call_id, pending.tool) == ("r-1", "c1", "refund")
    assert pending.metadata == {"integration": "openai_agents"}

    again = await resolve_interruptions(state, deferred, run_id="r-1")  # still open: unchanged
    assert again is state
    assert [i.call_id for i in state.get_interruptions()] == ["c1"]

    await deferred.answer(pending.request_id, approved=True, reviewer="alice")
    assert await resolve_interruptions(state, deferred, run_id="r-1") is state
    await Runner.run(agent, state, run_config=CONFIG)

    assert outputs(model) == {"c1": "refunded 500 on A1"}
    events = await call_events(ledger, "c1")
    assert [e.type for e in events] == [
        "approval.pending",
        "approval.answered",
        "approval.consumed",
        *APPROVED_RUN,
    ]
    granted = next(e for e in events if isinstance(e, ApprovalGranted))
    assert (granted.reviewer, granted.source, granted.digest) == (
        "alice",
        "context",
        pending.digest,
    )
    assert await approvals_that_ran(ledger) == {"c1": ("context", "alice", True)}


async def test_deferred_denial_rejects_on_the_second_pass() -> None:
    """A deferred "no" rejects the call on the second pass with the reviewer's reason."""
    registry, ran = build()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 500}, call_id="c1"),
    )
    state = await resolve_interruptions(result, deferred, run_id="r-1")
    [pending] = await deferred.pending()
    await deferred.answer(pending.request_id, approved=False, reviewer="alice", reason="fraud")
    await resolve_interruptions(state, deferred, run_id="r-1")
    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model) == {
        "c1": '{"error":{"kind":"approval-denied","message":"refund was not approved: fraud"}}'
    }
    assert ran == []


def sdk_tool(ran: list[str]) -> FunctionTool:
    """A gated SDK tool that agent-adapter did not export."""

    async def invoke(ctx: Any, raw: str) -> str:
        ran.append(raw)
        return "deleted"

    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    }
    return FunctionTool(
        name="delete_file",
        description="Delete a file.",
        params_json_schema=schema,
        on_invoke_tool=invoke,
        needs_approval=True,
    )


async def test_other_sdk_tools_are_asked_with_raw_arguments_and_get_no_token() -> None:
    """For a tool the bridge did not export the port sees the model's raw arguments, and the SDK's
    approval is all there is."""
    registry, _ran = build()
    executor = Executor(registry)
    other: list[str] = []
    port = Recorder()
    agent, model = make_agent(
        [*function_tools(registry, executor=executor), sdk_tool(other)],
        [function_call("delete_file", {"path": "/tmp/x"}, call_id="c1")],
        [assistant_message("done")],
    )
    result = await Runner.run(agent, "go", run_config=CONFIG)
    state = await resolve_interruptions(result, port, run_id="r-2")
    await Runner.run(agent, state, run_config=CONFIG)

    [request] = port.requests
    assert (request.tool, request.args, request.run_id) == (
        "delete_file",
        {"path": "/tmp/x"},
        "r-2",
    )
    assert request.metadata == {"integration": "openai_agents"}
    assert other == ['{"path":"/tmp/x"}']
    assert outputs(model) == {"c1": "deleted"}
    assert (
        len(__import__("agent_adapter.bridges.openai_agents", fromlist=["x"]).INTEGRATION.tokens)
        == 0
    )


async def test_an_edit_for_a_tool_not_exported_raises_before_any_decision_is_applied() -> None:
    """An edit the bridge cannot deliver raises ToolUsageError and leaves every call in the batch
    undecided."""
    registry, _ran = build()
    executor = Executor(registry)
    other: list[str] = []

    def answer(request: ApprovalRequest) -> Decision:
        if request.tool == "delete_file":
            return Decision(approved=True, edits={"path": "/tmp/y"})
        return Decision(approved=True)

    agent, _model = make_agent(
        [*function_tools(registry, executor=executor), sdk_tool(other)],
        [
            function_call("refund", {"order_id": "A1", "amount_cents": 5}, call_id="c1"),
            function_call("delete_file", {"path": "/tmp/x"}, call_id="c2"),
        ],
        [assistant_message("done")],
    )
    result = await Runner.run(agent, "go", run_config=CONFIG)
    state = result.to_state()
    with pytest.raises(ToolUsageError, match="did not export"):
        await resolve_interruptions(state, Recorder(answer))
    assert [
        state._context.is_tool_approved(i.tool_name, i.call_id) for i in state.get_interruptions()
    ] == [
        None,
        None,
    ]
    assert len(INTEGRATION.tokens) == 0


async def test_a_failing_port_denies() -> None:
    """A port that raises denies the call (fail closed), like the executor's own port."""
    registry, ran = build()

    async def broken(request: ApprovalRequest) -> bool:
        raise RuntimeError("reviewer service down")

    executor = Executor(registry)
    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 5}, call_id="c1"),
    )
    state = await resolve_interruptions(result, CallbackApproval(broken))
    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model) == {
        "c1": '{"error":{"kind":"approval-denied","message":"refund was not approved: '
        'approval port failed: RuntimeError: reviewer service down"}}'
    }
    assert ran == []


async def test_denials_are_recorded_by_the_executor_when_no_token_exists() -> None:
    """Without a token the executor's own port decides; with none it denies, and the ledger says
    source "none"."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger)
    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 5}, call_id="c1"),
    )
    state = result.to_state()
    state.approve(result.interruptions[0])  # the SDK's own approval only
    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model)["c1"].startswith('{"error":{"kind":"approval-denied"')
    events = await call_events(ledger, "c1")
    assert [e.type for e in events] == timeline("call.failed", approval="denied")
    denied = next(e for e in events if isinstance(e, ApprovalRejected))
    assert denied.source == "none"
    assert ran == []


async def test_calls_decided_in_an_earlier_pass_are_not_asked_again() -> None:
    """A second resolve asks the port only about calls still undecided on the state."""
    registry, _ran = build()
    executor = Executor(registry)
    asked: list[str] = []

    class Later:
        """Decides c1 at once and c2 only on the second ask."""

        async def decide(self, request: ApprovalRequest) -> Decision | None:
            asked.append(request.call_id)
            if request.call_id == "c2" and asked.count("c2") == 1:
                return None
            return Decision(approved=True, reviewer="ops")

    agent, model, result = await paused(
        registry,
        executor,
        function_call("refund", {"order_id": "A1", "amount_cents": 5}, call_id="c1"),
        function_call("refund", {"order_id": "A2", "amount_cents": 6}, call_id="c2"),
    )
    state = await resolve_interruptions(result, Later())
    await resolve_interruptions(state, Later())
    assert asked == ["c1", "c2", "c2"]
    await Runner.run(agent, state, run_config=CONFIG)
    assert outputs(model) == {"c1": "refunded 5 on A1", "c2": "refunded 6 on A2"}


class FakeState:
    """Stands in for a RunState holding a call the SDK would refuse (no call id)."""

    _agent_tool_state_scope_id = "scope-1"
    _context = None

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.rejected: list[tuple[str, str | None]] = []
        self.approved: list[str] = []

    def get_interruptions(self) -> list[Any]:
        return self.items

    def reject(self, item: Any, *, rejection_message: str | None = None) -> None:
        self.rejected.append((item.tool_name, rejection_message))

    def approve(self, item: Any) -> None:
        self.approved.append(item.tool_name)


async def test_a_call_without_a_call_id_is_denied_without_asking() -> None:
    """An exported tool's call with no call id is rejected unasked (no token could bind to it)."""
    from agents import Agent
    from agents.items import ToolApprovalItem
    from openai.types.responses import ResponseFunctionToolCall

    registry, _ran = build()
    agent = Agent(name="support", tools=function_tools(registry, executor=Executor(registry)))
    raw = ResponseFunctionToolCall(
        arguments='{"order_id":"A1","amount_cents":5}',
        call_id="",
        name="refund",
        type="function_call",
    )
    state = FakeState([ToolApprovalItem(agent=agent, raw_item=raw)])

    class FakeResult:
        def to_state(self) -> FakeState:
            return state

    port = Recorder()
    assert await resolve_interruptions(FakeResult(), port) is state
    assert port.requests == []
    assert state.approved == []
    assert state.rejected == [
        (
            "refund",
            '{"error":{"kind":"approval-denied","message":"refund was not approved: '
            'the call has no call id, so no approval can be bound to it"}}',
        )
    ]
    assert len(INTEGRATION.tokens) == 0


async def test_without_a_run_id_the_request_carries_the_states_own() -> None:
    """resolve_interruptions without run_id asks with the state's run id (its context's run_id),
    so a deferred decision for one run cannot serve another's identical call."""
    registry, _ran = build()
    executor = Executor(registry, ledger=MemoryLedger())
    port = Recorder()
    agent, _model = make_agent(
        function_tools(registry, executor=executor),
        [function_call("refund", {"order_id": "A1", "amount_cents": 500}, call_id="c1")],
        [assistant_message("done")],
    )
    result = await Runner.run(agent, "go", run_config=CONFIG, context={"run_id": "run-42"})
    await resolve_interruptions(result, port)
    assert [(r.run_id, r.call_id) for r in port.requests] == [("run-42", "c1")]


class _FailsFor:
    """A MemoryLedger whose appends for one call id fail (a disk error, say)."""

    def __init__(self, ledger: MemoryLedger, call_id: str) -> None:
        self._ledger = ledger
        self._call_id = call_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    async def append_many(self, events: Any) -> Any:
        if any(e.call_id == self._call_id for e in events):
            raise LedgerError("disk full")
        return await self._ledger.append_many(events)


async def test_a_denial_that_cannot_be_recorded_does_not_cost_the_others_their_record() -> None:
    """Three denials, the first one's write fails: the other two are on record, the caller
    hears of the failure, and the decided state comes with the error."""
    registry, ran = build()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=_FailsFor(ledger, "c1"))  # type: ignore[arg-type]
    agent, model, result = await paused(
        registry,
        executor,
        *(
            function_call("refund", {"order_id": f"A{i}", "amount_cents": 5}, call_id=f"c{i}")
            for i in (1, 2, 3)
        ),
    )
    with pytest.raises(
        LedgerError, match=r"1 of 3 denials could not be recorded \(calls c1\)"
    ) as info:
        await resolve_interruptions(result, Recorder(False))
    await Runner.run(agent, info.value.state, run_config=CONFIG)  # type: ignore[attr-defined]
    denied = '{"error":{"kind":"approval-denied","message":"refund was not approved"}}'
    assert outputs(model) == {"c1": denied, "c2": denied, "c3": denied}
    assert [await call_types(ledger, c) for c in ("c1", "c2", "c3")] == [
        [],
        REJECTED,
        REJECTED,
    ]
    assert ran == []


REJECTED = timeline("call.failed", approval="denied")
