"""Approval: confirm rules, ports, context decisions, edits, and the deferred two-phase port."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from _helpers import (
    assert_one_outcome_each,
    every_call_has_one_outcome,  # noqa: F401 (a fixture)
    recorded,
    timeline,
    types,
)

from agent_adapter import (
    ApprovalRequest,
    CallbackApproval,
    CallContext,
    Decision,
    DeferredApproval,
    Executor,
    Registry,
    digest,
)
from agent_adapter.errors import (
    AmbiguousEffect,
    ApprovalDenied,
    ApprovalPending,
    DuplicateEffect,
    GuardrailBlocked,
    ToolArgsInvalid,
    ToolFailed,
    ToolUsageError,
)
from agent_adapter.ledger import (
    ApprovalConsumed,
    ApprovalDeferred,
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    CallDenied,
    CallPending,
    CallRequested,
    CallValidated,
    MemoryLedger,
)

pytestmark = pytest.mark.usefixtures("every_call_has_one_outcome")

D = digest({"order_id": "A1", "amount_cents": 500})
COMMON = {"ts": 1000.0, "run_id": "r1", "call_id": "c1", "tool": "refund"}
#: refund's JSON Schema, as requests carry it
SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
    "required": ["order_id", "amount_cents"],
    "additionalProperties": False,
}


def make(confirm: Any = True, **options: Any) -> tuple[Registry, Any, list[dict[str, Any]]]:
    registry = Registry()
    ran: list[dict[str, Any]] = []

    @registry.tool(confirm=confirm, **options)
    async def refund(order_id: str, amount_cents: int) -> str:
        ran.append({"order_id": order_id, "amount_cents": amount_cents})
        return f"refunded {amount_cents}"

    return registry, refund, ran


ARGS = {"order_id": "A1", "amount_cents": 500}


def ctx(call_id: str = "c1", approval: Any = None) -> CallContext:
    return CallContext(run_id="r1", call_id=call_id, approval=approval, metadata={"via": "test"})


async def test_port_grants(clock: Any) -> None:
    """A port that says yes: approval.requested, approval.granted (port), then the body runs."""
    registry, refund, ran = make()
    asked: list[ApprovalRequest] = []

    def decide(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=CallbackApproval(decide), clock=clock)
    assert await executor.run_spec(refund, ARGS, ctx()) == "refunded 500"
    events = await recorded(ledger)
    request_id = events[2].request_id
    assert [e.type for e in events] == timeline("call.succeeded", approval="granted")
    assert events[2:4] == [
        ApprovalRequested(seq=3, **COMMON, request_id=request_id, digest=D),
        ApprovalGranted(
            seq=4, **COMMON, request_id=request_id, reviewer="callback", source="port", digest=D
        ),
    ]
    assert asked == [
        ApprovalRequest(
            request_id=request_id,
            run_id="r1",
            call_id="c1",
            tool="refund",
            args=ARGS,
            digest=D,
            metadata={"via": "test"},
            json_schema=SCHEMA,
        )
    ]
    assert ran == [ARGS]


async def test_async_port_denies_with_a_decision(clock: Any) -> None:
    """An async callback's refusal: approval.denied, call.denied and ApprovalDenied."""
    registry, refund, ran = make()

    async def decide(request: ApprovalRequest) -> Decision:
        return Decision(approved=False, reviewer="alice", reason="too much")

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=CallbackApproval(decide), clock=clock)
    with pytest.raises(ApprovalDenied) as info:
        await executor.run_spec(refund, ARGS, ctx())
    events = await recorded(ledger)
    request_id = events[2].request_id
    assert (str(info.value), ran) == ("refund was not approved: too much", [])
    assert events[2:] == [
        ApprovalRequested(seq=3, **COMMON, request_id=request_id, digest=D),
        ApprovalRejected(
            seq=4,
            **COMMON,
            request_id=request_id,
            reviewer="alice",
            source="port",
            digest=D,
            reason="too much",
        ),
        CallDenied(seq=5, **COMMON, reviewer="alice", reason="too much"),
    ]


async def test_no_port_denies(clock: Any) -> None:
    """No port and no decision in the context: denied, and the tool does not run."""
    registry, refund, ran = make()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    with pytest.raises(ApprovalDenied) as info:
        await executor.run_spec(refund, ARGS, ctx())
    events = await recorded(ledger)
    reason = "no approval port and no decision in the call context"
    assert (str(info.value), ran) == (f"refund was not approved: {reason}", [])
    assert [(e.type, getattr(e, "source", None)) for e in events[2:]] == [
        ("approval.requested", None),
        ("approval.denied", "none"),
        ("call.denied", None),
    ]
    assert events[3].reason == reason


async def test_a_port_that_raises_denies(clock: Any) -> None:
    """A port that raises denies (fail closed), with the failure as the reason."""
    registry, refund, ran = make()

    def decide(request: ApprovalRequest) -> bool:
        raise ConnectionError("review service down")

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=CallbackApproval(decide), clock=clock)
    with pytest.raises(ApprovalDenied) as info:
        await executor.run_spec(refund, ARGS, ctx())
    reason = "approval port failed: ConnectionError: review service down"
    assert (str(info.value), ran) == (f"refund was not approved: {reason}", [])
    assert await types(ledger) == timeline("call.failed", approval="denied")


@pytest.mark.parametrize("is_async", [False, True])
async def test_confirm_rules_decide_per_call(clock: Any, is_async: bool) -> None:
    """A confirm rule (sync or async) sees the Call and context and decides per call."""
    seen: list[tuple[int, str]] = []

    def sync_rule(call: Any, call_ctx: CallContext) -> bool:
        seen.append((call.args["amount_cents"], call_ctx.call_id))
        return bool(call.args["amount_cents"] >= 10_000)

    async def async_rule(call: Any, call_ctx: CallContext) -> bool:
        return sync_rule(call, call_ctx)

    registry, refund, ran = make(confirm=async_rule if is_async else sync_rule)
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    assert await executor.run_spec(refund, ARGS, ctx("c1")) == "refunded 500"
    with pytest.raises(ApprovalDenied):
        await executor.run_spec(refund, {"order_id": "A1", "amount_cents": 20_000}, ctx("c2"))
    assert (seen, ran) == ([(500, "c1"), (20_000, "c2")], [ARGS])
    assert (await types(ledger, "c1"), await types(ledger, "c2")) == (
        timeline("call.succeeded"),
        timeline("call.failed", approval="denied"),
    )


async def test_a_confirm_rule_that_raises_asks_for_approval(clock: Any) -> None:
    """A broken confirm rule fails closed: approval is needed (and here nobody gives it)."""

    def rule(call: Any, call_ctx: Any) -> bool:
        raise RuntimeError("bug")

    registry, refund, ran = make(confirm=rule)
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    with pytest.raises(ApprovalDenied):
        await executor.run_spec(refund, ARGS, ctx())
    assert ran == []
    assert (await types(ledger))[-2:] == ["approval.denied", "call.denied"]


async def test_context_decision_is_used_without_asking_the_port(clock: Any) -> None:
    """A Decision in ctx.approval (no digest, or this digest) decides; source is "context"."""
    registry, refund, ran = make()
    asked = []
    port = CallbackApproval(lambda request: asked.append(request) or False)
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=port, clock=clock)
    unbound = Decision(approved=True, reviewer="ui")
    bound = Decision(approved=True, reviewer="ui", digest=D)
    assert await executor.run_spec(refund, ARGS, ctx("c1", unbound)) == "refunded 500"
    assert await executor.run_spec(refund, ARGS, ctx("c2", bound)) == "refunded 500"
    granted = [e for e in await recorded(ledger) if e.type == "approval.granted"]
    assert [(e.call_id, e.source, e.reviewer, e.digest) for e in granted] == [
        ("c1", "context", "ui", D),
        ("c2", "context", "ui", D),
    ]
    assert (asked, ran) == ([], [ARGS, ARGS])


async def test_context_denial(clock: Any) -> None:
    """A context Decision(approved=False) denies with source "context"."""
    registry, refund, ran = make()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    decision = Decision(approved=False, reviewer="ui", reason="no")
    with pytest.raises(ApprovalDenied):
        await executor.run_spec(refund, ARGS, ctx("c1", decision))
    denied = (await recorded(ledger))[3]
    assert (denied.type, denied.source, denied.reviewer, denied.reason, ran) == (
        "approval.denied",
        "context",
        "ui",
        "no",
        [],
    )


async def test_context_decision_for_another_digest_is_ignored(clock: Any) -> None:
    """A context Decision bound to other arguments is ignored: the port decides."""
    registry, refund, ran = make()
    port = CallbackApproval(lambda request: False, reviewer="port-reviewer")
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=port, clock=clock)
    stale = Decision(approved=True, reviewer="ui", digest=digest({"other": 1}))
    with pytest.raises(ApprovalDenied):
        await executor.run_spec(refund, ARGS, ctx("c1", stale))
    denied = (await recorded(ledger))[3]
    assert (denied.source, denied.reviewer, ran) == ("port", "port-reviewer", [])


async def test_context_decision_for_another_digest_without_port_is_denied(clock: Any) -> None:
    """With no port, a context Decision for other arguments leaves the call denied."""
    registry, refund, ran = make()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    stale = Decision(approved=True, reviewer="ui", digest=digest({"other": 1}))
    with pytest.raises(ApprovalDenied):
        await executor.run_spec(refund, ARGS, ctx("c1", stale))
    assert ran == []


async def test_edits_are_validated_rechecked_and_the_only_args(clock: Any) -> None:
    """An approved edit is validated, goes through hooks and guards again, and is what runs."""
    checked: list[tuple[str, dict[str, Any]]] = []

    def guard(call: Any) -> None:
        checked.append(("guard", dict(call.args)))

    class Hook:
        def before_tool(self, call: Any) -> None:
            checked.append(("hook", dict(call.args)))

    registry, refund, ran = make(guards=[guard])
    edits = {"order_id": "A1", "amount_cents": 300}
    port = CallbackApproval(lambda r: Decision(approved=True, reviewer="bob", edits=edits))
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=port, hooks=[Hook()], clock=clock)
    assert await executor.run_spec(refund, ARGS, ctx()) == "refunded 300"
    events = await recorded(ledger)
    assert [e.type for e in events] == [
        "call.requested",
        "call.validated",
        "guard.checked",
        "approval.requested",
        "approval.granted",
        "guard.checked",
        "call.started",
        "call.succeeded",
    ]
    edited = digest(edits)
    assert (events[1].digest, events[3].digest, events[4].digest, events[4].edited) == (
        D,
        D,
        edited,
        True,
    )
    assert events[6].digest == edited
    assert checked == [("hook", ARGS), ("guard", ARGS), ("hook", edits), ("guard", edits)]
    assert ran == [edits]


async def test_invalid_edits_are_tool_args_invalid(clock: Any) -> None:
    """Edits that do not validate end the call with call.invalid and ToolArgsInvalid."""
    registry, refund, ran = make()
    port = CallbackApproval(
        lambda r: Decision(approved=True, reviewer="bob", edits={"order_id": "A1"})
    )
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=port, clock=clock)
    with pytest.raises(ToolArgsInvalid) as info:
        await executor.run_spec(refund, ARGS, ctx())
    events = await recorded(ledger)
    message = "invalid arguments for refund: Object missing required field `amount_cents`"
    assert (str(info.value), ran) == (message, [])
    assert [e.type for e in events] == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "call.invalid",
    ]
    assert events[-1].error == f"edited {message}"


async def test_edits_blocked_by_a_guard(clock: Any) -> None:
    """Edited arguments that a guard refuses are blocked, even though a reviewer approved."""

    def cap(call: Any) -> None:
        if call.args["amount_cents"] > 1000:
            raise GuardrailBlocked("over the cap")

    registry, refund, ran = make(guards=[cap])
    edits = {"order_id": "A1", "amount_cents": 5000}
    port = CallbackApproval(lambda r: Decision(approved=True, reviewer="bob", edits=edits))
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=port, clock=clock)
    with pytest.raises(GuardrailBlocked):
        await executor.run_spec(refund, ARGS, ctx())
    assert ran == []
    assert (await types(ledger))[-3:] == ["approval.granted", "guard.checked", "call.blocked"]


# -- deferred approval -----------------------------------------------------------------


async def test_deferred_two_phases(clock: Any) -> None:
    """Pending; answered out of band; the next call gets the decision once; then asks again."""
    registry, refund, ran = make()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger, clock=clock)
    executor = Executor(registry, ledger=ledger, approval=deferred, clock=clock)

    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(refund, ARGS, ctx("c1"))
    request_id = info.value.request_id
    first = await recorded(ledger, call_id="c1")
    assert [e.type for e in first] == timeline("call.failed", approval="pending")
    assert (first[2].request_id, first[3], first[4]) == (
        request_id,
        ApprovalDeferred(
            seq=4,
            **COMMON,
            request_id=request_id,
            digest=D,
            args=ARGS,
            metadata={"via": "test"},
            json_schema=SCHEMA,
        ),
        CallPending(seq=5, **COMMON, request_id=request_id),
    )
    assert [p.request_id for p in await deferred.pending()] == [request_id]

    await deferred.answer(request_id, approved=True, reviewer="carol", reason="fine")
    assert await deferred.pending() == []

    assert await executor.run_spec(refund, ARGS, ctx("c2")) == "refunded 500"
    second = await recorded(ledger, call_id="c2")
    assert [e.type for e in second] == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "approval.consumed",
        "approval.granted",
        "call.started",
        "call.succeeded",
    ]
    assert (second[3], second[4].reviewer, second[4].source, second[4].reason) == (
        ApprovalConsumed(
            seq=second[3].seq,
            ts=1000.0,
            run_id="r1",
            call_id="c2",
            tool="refund",
            request_id=request_id,
        ),
        "carol",
        "port",
        "fine",
    )

    with pytest.raises(ApprovalPending) as again:
        await executor.run_spec(refund, ARGS, ctx("c3"))
    assert again.value.request_id != request_id
    assert await types(ledger, "c3") == timeline("call.failed", approval="pending")
    assert ran == [ARGS]
    await assert_one_outcome_each(ledger)


async def test_deferred_open_request_is_named_not_duplicated(clock: Any) -> None:
    """While a request is open, another call for the same arguments is pending on that request."""
    registry, refund, ran = make()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger, clock=clock)
    executor = Executor(registry, ledger=ledger, approval=deferred, clock=clock)
    with pytest.raises(ApprovalPending) as first:
        await executor.run_spec(refund, ARGS, ctx("c1"))
    with pytest.raises(ApprovalPending) as second:
        await executor.run_spec(refund, ARGS, ctx("c2"))
    assert second.value.request_id == first.value.request_id
    c2 = await recorded(ledger, call_id="c2")
    assert [e.type for e in c2] == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "call.pending",
    ]
    assert c2[-1].request_id == first.value.request_id
    assert (len(await deferred.pending()), ran) == (1, [])


async def test_deferred_denial_and_edits(clock: Any) -> None:
    """A deferred denial denies the next call; deferred edits are validated and run."""
    registry, refund, ran = make()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger, clock=clock)
    executor = Executor(registry, ledger=ledger, approval=deferred, clock=clock)
    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(refund, ARGS, ctx("c1"))
    await deferred.answer(info.value.request_id, approved=False, reviewer="dan", reason="no")
    with pytest.raises(ApprovalDenied):
        await executor.run_spec(refund, ARGS, ctx("c2"))

    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(refund, ARGS, ctx("c3"))
    edits = {"order_id": "A1", "amount_cents": 100}
    await deferred.answer(info.value.request_id, approved=True, reviewer="dan", edits=edits)
    assert await executor.run_spec(refund, ARGS, ctx("c4")) == "refunded 100"
    assert ran == [edits]
    granted = [e for e in await recorded(ledger) if e.type == "approval.granted"]
    assert [(e.call_id, e.digest, e.edited) for e in granted] == [("c4", digest(edits), True)]


async def test_deferred_answer_errors(clock: Any) -> None:
    """answer() refuses an unknown request, a second answer, and a missing reviewer."""
    registry, refund, ran = make()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger, clock=clock)
    executor = Executor(registry, ledger=ledger, approval=deferred, clock=clock)
    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(refund, ARGS, ctx("c1"))
    request_id = info.value.request_id
    await deferred.answer(request_id, approved=True, reviewer="x")
    messages = []
    for rid, reviewer in (("nope", "x"), (request_id, "x"), (request_id, "")):
        with pytest.raises(ToolUsageError) as err:
            await deferred.answer(rid, approved=True, reviewer=reviewer)
        messages.append(str(err.value))
    assert messages == [
        "no approval request 'nope' in this ledger",
        f"approval request {request_id!r} is already answered",
        "a decision needs a reviewer name",
    ]
    assert ran == []


async def test_deferred_requests_survive_a_restart(clock: Any) -> None:
    """A new port (and executor) on the same ledger sees the open request and its answer."""
    registry, refund, ran = make()
    ledger = MemoryLedger()
    executor = Executor(
        registry, ledger=ledger, approval=DeferredApproval(ledger, clock=clock), clock=clock
    )
    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(refund, ARGS, ctx("c1"))

    reviewer_side = DeferredApproval(ledger, clock=clock)
    assert [p.request_id for p in await reviewer_side.pending()] == [info.value.request_id]
    await reviewer_side.answer(info.value.request_id, approved=True, reviewer="erin")

    restarted = await Executor.open(
        registry, ledger=ledger, approval=DeferredApproval(ledger, clock=clock), clock=clock
    )
    assert await restarted.run_spec(refund, ARGS, ctx("c2")) == "refunded 500"
    assert ran == [ARGS]


async def test_deferred_pending_args_are_redacted(clock: Any) -> None:
    """The approval.pending record carries the arguments with redacted names replaced."""
    registry = Registry()

    @registry.tool(confirm=True, redact=["card"])
    async def charge(card: str, amount: int) -> str:
        return "ok"

    ledger = MemoryLedger()
    executor = Executor(
        registry, ledger=ledger, approval=DeferredApproval(ledger, clock=clock), clock=clock
    )
    with pytest.raises(ApprovalPending):
        await executor.run_spec(charge, {"card": "4111-1111", "amount": 5}, ctx())
    pending = [e for e in await recorded(ledger) if e.type == "approval.pending"]
    assert [e.args for e in pending] == [{"card": "[redacted]", "amount": 5}]
    assert all(b"4111-1111" not in r.payload for r in ledger.records)


async def test_deferred_edits_keep_redacted_values_out_of_the_ledger(clock: Any) -> None:
    """Edits may keep a redacted value (as shown, "[redacted]") but never write a new one."""
    registry = Registry()
    ran = []

    @registry.tool(confirm=True, redact=["card"])
    async def charge(card: str, amount: int) -> str:
        ran.append((card, amount))
        return "ok"

    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger, clock=clock)
    executor = Executor(registry, ledger=ledger, approval=deferred, clock=clock)
    args = {"card": "4111-1111", "amount": 50}
    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(charge, args, ctx("c1"))
    request_id = info.value.request_id
    with pytest.raises(ToolUsageError) as refused:
        await deferred.answer(
            request_id, approved=True, reviewer="r", edits={"card": "5500-0000", "amount": 5}
        )
    assert str(refused.value) == (
        "edits cannot set redacted arguments ['card'] through the ledger; "
        "leave them as '[redacted]' to keep the requested values"
    )
    await deferred.answer(
        request_id, approved=True, reviewer="r", edits={"card": "[redacted]", "amount": 5}
    )
    assert await executor.run_spec(charge, args, ctx("c2")) == "ok"
    assert ran == [("4111-1111", 5)]
    payloads = b"".join(r.payload for r in ledger.records)
    assert (b"4111-1111" in payloads, b"5500-0000" in payloads) == (False, False)
    granted = [e for e in await recorded(ledger) if e.type == "approval.granted"]
    assert [e.digest for e in granted] == [digest({"card": "4111-1111", "amount": 5})]


async def test_refuse_records_a_framework_denial_without_running_anything(clock: Any) -> None:
    """refuse(): the denial is on record (who, why, which digest); no hook, guard or body runs."""
    seen: list[str] = []

    class Hook:
        def before_tool(self, call: Any) -> None:
            seen.append("before_tool")

    def guard(call: Any) -> None:
        seen.append("guard")

    registry, refund, ran = make(guards=[guard])
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[Hook()], clock=clock)
    assert await executor.refuse(refund, ARGS, ctx(), reviewer="ops", reason="too large") is True
    events = await recorded(ledger)
    request_id = events[2].request_id
    assert events[1:] == [
        CallValidated(seq=2, **COMMON, digest=D),
        ApprovalRequested(seq=3, **COMMON, request_id=request_id, digest=D),
        ApprovalRejected(
            seq=4,
            **COMMON,
            request_id=request_id,
            reviewer="ops",
            source="port",
            digest=D,
            reason="too large",
        ),
        CallDenied(seq=5, **COMMON, reviewer="ops", reason="too large"),
    ]
    assert (ran, seen) == ([], [])
    # The same call id again records nothing more; a later run of that id replays the denial.
    assert await executor.refuse(refund, ARGS, ctx(), reviewer="ops", reason="again") is False
    assert len(await recorded(ledger)) == 5
    with pytest.raises(ApprovalDenied):
        await executor.run_spec(refund, ARGS, ctx())
    assert ran == []


async def test_refuse_records_invalid_arguments_as_invalid(clock: Any) -> None:
    """refuse() of arguments that do not validate records call.invalid, not an approval."""
    registry, refund, _ran = make()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, clock=clock)
    assert await executor.refuse(refund, "{not json", ctx(), reviewer="ops") is True
    assert await types(ledger) == ["call.requested", "call.invalid"]


async def test_a_second_answer_that_lands_after_another_is_refused_not_dropped() -> None:
    """Two reviewers race: the first answer in ledger order counts, the other gets an error."""
    ledger = MemoryLedger()
    registry, refund, ran = make()
    executor = Executor(registry, ledger=ledger, approval=DeferredApproval(ledger))
    with pytest.raises(ApprovalPending) as pending:
        await executor.run_spec(refund, ARGS, ctx("c1"))
    request_id = pending.value.request_id
    alice = DeferredApproval(ledger)

    class RacingLedger:
        """Bob's view of the file: alice's answer is committed just before his."""

        def __getattr__(self, name: str) -> Any:
            return getattr(ledger, name)

        async def append(self, event: Any) -> Any:
            await alice.answer(request_id, approved=True, reviewer="alice")
            return await ledger.append(event)

    bob = DeferredApproval(RacingLedger())  # type: ignore[arg-type]
    with pytest.raises(ToolUsageError) as refused:
        await bob.answer(request_id, approved=False, reviewer="bob", reason="fraud")
    assert "already approved by alice" in str(refused.value)
    assert "does not count" in str(refused.value)
    assert await executor.run_spec(refund, ARGS, ctx("c2")) == "refunded 500"
    assert ran == [ARGS]


# -- edits checked before they are recorded ---------------------------------------------


class Card(msgspec.Struct):
    """A card whose number is an int (so "[redacted]" does not fit it)."""

    number: int
    exp: str


@pytest.mark.parametrize(
    ("edits", "problem"),
    [
        ({"order_id": "A1", "amount_cents": "abc"}, "amount_cents: 'abc' is not of type 'integer'"),
        ({"order_id": "A1", "amount_cents": 1.0}, "amount_cents: 1.0 is not of type 'integer'"),
        ({"order_id": "A1", "amount_cents": True}, "amount_cents: True is not of type 'integer'"),
        ({"order_id": "A1"}, "'amount_cents' is a required property"),
        (
            {"order_id": "A1", "amount_cents": 5, "amount": 5},
            "Additional properties are not allowed ('amount' was unexpected)",
        ),
    ],
    ids=["text", "float", "bool", "missing", "unknown"],
)
async def test_deferred_answer_refuses_edits_that_do_not_fit_the_tool(
    clock: Any, edits: dict[str, Any], problem: str
) -> None:
    """answer() checks edits against the schema recorded with the request: ToolArgsInvalid
    naming the field, nothing recorded, the request still open and answerable."""
    registry, refund, ran = make()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger, clock=clock)
    executor = Executor(registry, ledger=ledger, approval=deferred, clock=clock)
    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(refund, ARGS, ctx("c1"))
    request_id = info.value.request_id
    before = await recorded(ledger)
    with pytest.raises(ToolArgsInvalid) as refused:
        await deferred.answer(request_id, approved=True, reviewer="dan", edits=edits)
    assert str(refused.value) == (
        f"the edits do not fit the arguments of refund: {problem}; nothing was recorded"
    )
    assert await recorded(ledger) == before
    assert [p.request_id for p in await deferred.pending()] == [request_id]
    good = {"order_id": "A1", "amount_cents": 100}
    await deferred.answer(request_id, approved=True, reviewer="dan", edits=good)
    assert await executor.run_spec(refund, ARGS, ctx("c2")) == "refunded 100"
    assert ran == [good]


async def test_deferred_answer_takes_a_redacted_placeholder_the_schema_would_refuse(
    clock: Any,
) -> None:
    """An edit that leaves "[redacted]" at a redacted path (here an int field, nested) is
    not refused by the schema check: the executor runs the value the call asked with."""
    registry = Registry()
    ran: list[tuple[int, int]] = []

    @registry.tool(confirm=True, redact=["card.number"])
    async def charge(card: Card, amount: int) -> str:
        ran.append((card.number, amount))
        return "ok"

    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger, clock=clock)
    executor = Executor(registry, ledger=ledger, approval=deferred, clock=clock)
    args = {"card": {"number": 4111, "exp": "12/30"}, "amount": 50}
    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(charge, args, ctx("c1"))
    (pending,) = await deferred.pending()
    shown = {"card": {"number": "[redacted]", "exp": "12/30"}, "amount": 5}
    assert pending.edit_problem(shown) is None
    assert str(pending.edit_problem({**shown, "amount": "5"})) == (
        "amount: '5' is not of type 'integer'"
    )
    await deferred.answer(info.value.request_id, approved=True, reviewer="r", edits=shown)
    assert await executor.run_spec(charge, args, ctx("c2")) == "ok"
    assert ran == [(4111, 5)]


async def test_a_request_recorded_without_a_schema_takes_edits_the_executor_refuses(
    clock: Any,
) -> None:
    """An open request written before the schema was recorded (an older version): answer()
    cannot check edits, records them as given, and the executor refuses them when the call
    comes back (call.invalid, ToolArgsInvalid), as it always did."""
    registry, refund, ran = make()
    ledger = MemoryLedger()
    # What an older version wrote for a call held by its deferred port.
    old = [
        CallRequested(**COMMON, args=ARGS, metadata={"via": "test"}),
        CallValidated(**COMMON, digest=D),
        ApprovalRequested(**COMMON, request_id="q-old", digest=D),
        ApprovalDeferred(
            **COMMON, request_id="q-old", digest=D, args=ARGS, metadata={"via": "test"}
        ),
        CallPending(**COMMON, request_id="q-old"),
    ]
    for event in old:
        await ledger.append(event)
    deferred = DeferredApproval(ledger, clock=clock)
    (pending,) = await deferred.pending()
    assert (pending.json_schema, pending.edit_problem({"amount_cents": "abc"})) == (None, None)
    bad = {"order_id": "A1", "amount_cents": "abc"}
    await deferred.answer("q-old", approved=True, reviewer="dan", edits=bad)
    executor = await Executor.open(registry, ledger=ledger, approval=deferred, clock=clock)
    with pytest.raises(ToolArgsInvalid) as info:
        await executor.run_spec(refund, ARGS, ctx("c2"))
    message = "invalid arguments for refund: Expected `int`, got `str` - at `$.amount_cents`"
    assert str(info.value) == message
    events = await recorded(ledger, call_id="c2")
    assert [e.type for e in events] == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "approval.consumed",
        "call.invalid",
    ]
    assert events[-1].error == f"edited {message}"
    assert ran == []


# -- the effect key's state, told to the reviewer -----------------------------------------


async def test_the_port_is_told_the_key_is_committed_and_the_call_is_still_refused(
    clock: Any,
) -> None:
    """A call whose effect key an earlier call committed: the request carries the key, its
    state and the committing call; approving changes nothing (call.duplicate, as before)."""
    registry, refund, ran = make(effect="refund:{order_id}")
    asked: list[ApprovalRequest] = []

    def decide(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=CallbackApproval(decide), clock=clock)
    assert await executor.run_spec(refund, ARGS, ctx("c1")) == "refunded 500"
    again = {"order_id": "A1", "amount_cents": 700}
    with pytest.raises(DuplicateEffect):
        await executor.run_spec(refund, again, ctx("c2"))
    first, second = asked
    assert (first.effect_key, first.effect_state, first.effect_notice) == ("refund:A1", None, None)
    assert second == ApprovalRequest(
        request_id=second.request_id,
        run_id="r1",
        call_id="c2",
        tool="refund",
        args=again,
        digest=digest(again),
        metadata={"via": "test"},
        json_schema=SCHEMA,
        effect_key="refund:A1",
        effect_state="committed",
        effect_by_run_id="r1",
        effect_by_call_id="c1",
    )
    assert second.effect_notice == (
        "refund:A1 is already committed by call c1 (run r1): approving cannot make it run"
    )
    assert await types(ledger, "c2") == timeline("call.duplicate", approval="granted")
    assert ran == [ARGS]


async def test_the_port_is_told_the_key_is_claimed_or_ambiguous(clock: Any) -> None:
    """A key held by a call still running is "claimed"; one whose call failed after its body
    began is "ambiguous"; the notice says so without suggesting to resolve it."""
    import asyncio

    registry = Registry()
    release = asyncio.Event()
    entered = asyncio.Event()

    @registry.tool(confirm=True, effect="ship:{order_id}")
    async def ship(order_id: str, fail: bool = False) -> str:
        entered.set()
        await release.wait()
        if fail:
            raise RuntimeError("carrier down")
        return "shipped"

    asked: list[ApprovalRequest] = []

    def decide(request: ApprovalRequest) -> bool:
        asked.append(request)
        return request.call_id != "c2"

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, approval=CallbackApproval(decide), clock=clock)
    running = asyncio.ensure_future(
        executor.run_spec(ship, {"order_id": "A1", "fail": True}, ctx("c1"))
    )
    await entered.wait()
    with pytest.raises(ApprovalDenied):
        await executor.run_spec(ship, {"order_id": "A1"}, ctx("c2"))
    release.set()
    with pytest.raises(ToolFailed):
        await running
    with pytest.raises(AmbiguousEffect):
        await executor.run_spec(ship, {"order_id": "A1"}, ctx("c3"))
    held = [(r.call_id, r.effect_state, r.effect_by_call_id, r.effect_notice) for r in asked]
    assert held == [
        ("c1", None, "", None),
        (
            "c2",
            "claimed",
            "c1",
            "ship:A1 is claimed by call c1 (run r1), which has not finished: approving cannot "
            "make this call run while that call holds the key",
        ),
        (
            "c3",
            "ambiguous",
            "c1",
            "ship:A1 is ambiguous (call c1 (run r1) started and its outcome is unknown): "
            "approving cannot make this call run while it is",
        ),
    ]


async def test_a_deferred_request_records_the_key_state(clock: Any) -> None:
    """approval.pending carries the key's state and holder, and pending() gives them back."""
    registry, refund, ran = make(effect="refund:{order_id}")
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger, clock=clock)
    executor = Executor(registry, ledger=ledger, approval=deferred, clock=clock)
    approved = Decision(approved=True, reviewer="ui", digest=D)
    assert await executor.run_spec(refund, ARGS, ctx("c1", approved)) == "refunded 500"
    with pytest.raises(ApprovalPending) as info:
        await executor.run_spec(refund, ARGS, ctx("c2"))
    request_id = info.value.request_id
    pending_event = (await recorded(ledger, call_id="c2"))[3]
    assert pending_event == ApprovalDeferred(
        seq=pending_event.seq,
        **{**COMMON, "call_id": "c2"},
        request_id=request_id,
        digest=D,
        args=ARGS,
        metadata={"via": "test"},
        json_schema=SCHEMA,
        effect_key="refund:A1",
        effect_state="committed",
        effect_by_run_id="r1",
        effect_by_call_id="c1",
    )
    (pending,) = await deferred.pending()
    assert (
        pending.effect_key,
        pending.effect_state,
        pending.effect_by_run_id,
        pending.effect_by_call_id,
        pending.effect_notice,
    ) == (
        "refund:A1",
        "committed",
        "r1",
        "c1",
        "refund:A1 is already committed by call c1 (run r1): approving cannot make it run",
    )
    assert ran == [ARGS]
