"""The MCP gateway through the real ``mcp.Client``, in-process, in both protocol eras."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import mcp_types as types
import pytest
from _helpers import timeline
from mcp import Client
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_helpers import Answers, accept, build_registry, by_call, checked_audit, events_of, ours

from agent_adapter import DeferredApproval, Executor, Registry, digest
from agent_adapter.integrations.mcp import (
    APPROVAL_SCHEMA,
    META_CALL_ID,
    META_KIND,
    META_RUN_ID,
    drain,
    mcp_server,
)
from agent_adapter.ledger import ApprovalGranted, ApprovalRejected, MemoryLedger

pytestmark = pytest.mark.usefixtures("bounded")

ERAS = ["legacy", "2026-07-28"]
REFUND = {"order_id": "A1", "amount_cents": 500}
APPROVED = timeline("call.succeeded", approval="granted", effect=True)
DENIED = timeline("call.failed", approval="denied")


def gateway(**kwargs: Any) -> tuple[Any, Executor, list[dict[str, Any]]]:
    registry, ran = build_registry()
    executor = Executor(registry, ledger=MemoryLedger())
    return mcp_server(registry, executor=executor, **kwargs), executor, ran


async def test_tools_list_exports_the_mcp_tools_with_their_schema_and_hints() -> None:
    """Only tools whose targets include mcp are listed; hints come from the spec."""
    server, executor, _ = gateway()
    async with Client(server, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == ["lookup", "refund"]
    refund = executor.registry.get("refund")
    assert tools["refund"].input_schema == refund.json_schema
    assert tools["refund"].description == "Refund an order (integer cents)."
    assert tools["refund"].annotations == types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True
    )
    assert tools["lookup"].annotations == types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=False
    )


@pytest.mark.parametrize("mode", ERAS)
async def test_an_accepted_elicitation_runs_the_call_once_with_the_approved_digest(
    mode: str,
) -> None:
    """Accept: the person sees the tool and its arguments; the approval binds the digest."""
    server, executor, ran = gateway()
    answers = Answers(accept())
    async with Client(server, mode=mode, elicitation_callback=answers) as client:
        result = await client.call_tool("refund", REFUND)
    assert result.is_error is False
    assert result.structured_content == {"refunded": 500, "order_id": "A1"}
    assert [b.text for b in result.content if isinstance(b, types.TextContent)] == [
        '{"refunded":500,"order_id":"A1"}'
    ]
    assert ran == [REFUND]
    assert [(a.message, a.requested_schema) for a in answers.asked] == [
        ('Approve refund with {"amount_cents":500,"order_id":"A1"}?', APPROVAL_SCHEMA)
    ]
    ledger = executor.ledger
    assert list((await by_call(ledger)).values()) == [APPROVED]
    granted = [e for e in await events_of(ledger) if isinstance(e, ApprovalGranted)]
    assert [(g.source, g.reviewer, g.digest) for g in granted] == [
        ("context", "mcp-elicitation", digest(REFUND))
    ]
    audit = await checked_audit(ledger)
    (record,) = audit.calls.values()
    assert record.ran_digest == digest(REFUND)


ANSWERS = {
    "decline": (types.ElicitResult(action="decline"), "elicitation declined"),
    "cancel": (types.ElicitResult(action="cancel"), "elicitation cancelled"),
    "refused": (accept(False, reason="too much"), "too much"),
    "mismatch": (
        types.ElicitResult(action="accept", content={"approve": "yes"}),
        "the elicitation answer does not match the form: 'approve' must be true or false",
    ),
    "extra": (
        accept(True, amount_cents=1),
        "the elicitation answer does not match the form: unexpected fields ['amount_cents']",
    ),
}


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("name", sorted(ANSWERS))
async def test_anything_but_an_approving_accept_denies_and_never_starts(
    mode: str, name: str
) -> None:
    """Decline, cancel, approve: false and an answer off the form are approval-denied."""
    answer, reason = ANSWERS[name]
    server, executor, ran = gateway()
    async with Client(server, mode=mode, elicitation_callback=Answers(answer)) as client:
        result = await client.call_tool("refund", REFUND)
    assert result.is_error is True
    assert result.structured_content == {
        "error": {"kind": "approval-denied", "message": f"refund was not approved: {reason}"}
    }
    assert ours(result.meta) == {META_KIND: "approval-denied"}
    assert ran == []
    assert list((await by_call(executor.ledger)).values()) == [DENIED]
    denied = [e for e in await events_of(executor.ledger) if isinstance(e, ApprovalRejected)]
    assert [(d.source, d.reviewer, d.digest, d.reason) for d in denied] == [
        ("context", "mcp-elicitation", digest(REFUND), reason)
    ]
    await checked_audit(executor.ledger)


BAD_ARGS = {
    "wrong type": ({"order_id": "A1", "amount_cents": "500"}, "Expected `int`, got `str`"),
    "missing": ({"order_id": "A1"}, "missing required field `amount_cents`"),
    "extra": ({**REFUND, "note": 1}, "unknown field `note`"),
    "oversized": ({"order_id": "A" * (1 << 20), "amount_cents": 1}, "over the 1048576 byte limit"),
}


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("name", sorted(BAD_ARGS))
async def test_invalid_arguments_are_refused_without_asking_anyone(mode: str, name: str) -> None:
    """tool-args-invalid as a result, recorded as call.invalid; the person is never asked."""
    args, fragment = BAD_ARGS[name]
    server, executor, ran = gateway()
    answers = Answers(accept())
    async with Client(server, mode=mode, elicitation_callback=answers) as client:
        result = await client.call_tool("refund", args)
    assert result.is_error is True
    assert ours(result.meta) == {META_KIND: "tool-args-invalid"}
    error = (result.structured_content or {})["error"]
    assert error["kind"] == "tool-args-invalid"
    assert fragment in error["message"]
    assert answers.asked == []
    assert ran == []
    assert list((await by_call(executor.ledger)).values()) == [["call.requested", "call.invalid"]]


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("name", ["nope", "hidden"])
async def test_an_unknown_or_unexported_tool_is_a_json_rpc_error(mode: str, name: str) -> None:
    """A protocol error (INVALID_PARAMS), nothing recorded."""
    server, executor, _ = gateway()
    async with Client(server, mode=mode) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool(name, {})
    assert (caught.value.error.code, caught.value.error.message) == (
        types.INVALID_PARAMS,
        f"Unknown tool: {name}",
    )
    assert await events_of(executor.ledger) == []


@pytest.mark.parametrize("mode", ERAS)
async def test_a_duplicate_refund_is_an_is_error_result_and_runs_once(mode: str) -> None:
    """The second refund of one order: duplicate-effect as a result, the body ran once."""
    server, executor, ran = gateway()
    answers = Answers(accept(), accept())
    async with Client(server, mode=mode, elicitation_callback=answers) as client:
        first = await client.call_tool("refund", REFUND)
        second = await client.call_tool("refund", REFUND)
    assert first.is_error is False
    assert second.is_error is True
    assert ours(second.meta) == {META_KIND: "duplicate-effect"}
    assert (second.structured_content or {})["error"]["kind"] == "duplicate-effect"
    assert ran == [REFUND]
    calls = await by_call(executor.ledger)
    assert [t[-1] for t in calls.values()] == ["call.succeeded", "call.duplicate"]
    # The person is told why approving cannot make the repeat run (told only: the
    # executor's effect check refuses it).
    first_id = next(iter(calls))
    (run_id,) = {e.run_id for e in await events_of(executor.ledger) if e.call_id == first_id}
    assert [a.message for a in answers.asked] == [
        'Approve refund with {"amount_cents":500,"order_id":"A1"}?',
        'Approve refund with {"amount_cents":500,"order_id":"A1"}? (Note: refund:A1 is '
        f"already committed by call {first_id} (run {run_id}): approving cannot make it run.)",
    ]
    await checked_audit(executor.ledger)


@pytest.mark.parametrize("mode", ERAS)
async def test_a_failed_body_leaves_its_key_ambiguous_and_the_retry_does_not_run(mode: str) -> None:
    """tool-failed, then ambiguous-effect: both results, the body ran once."""
    registry = Registry()
    ran: list[str] = []

    @registry.tool(effect="pay:{order_id}")
    async def pay(order_id: str) -> str:
        ran.append(order_id)
        raise RuntimeError("the payment API hung up")

    executor = Executor(registry, ledger=MemoryLedger())
    async with Client(mcp_server(registry, executor=executor), mode=mode) as client:
        first = await client.call_tool("pay", {"order_id": "A1"})
        second = await client.call_tool("pay", {"order_id": "A1"})
    assert (first.structured_content, ours(first.meta)) == (
        {
            "error": {
                "kind": "tool-failed",
                "message": "pay failed: RuntimeError: the payment API hung up",
            }
        },
        {META_KIND: "tool-failed"},
    )
    assert second.is_error is True
    assert ours(second.meta) == {META_KIND: "ambiguous-effect"}
    assert ran == ["A1"]


@pytest.mark.parametrize("mode", ERAS)
async def test_a_pinned_call_id_retried_is_answered_from_the_ledger(mode: str) -> None:
    """The retry of a lost response: same value, body once, the person asked once."""
    server, executor, ran = gateway()
    answers = Answers(accept(), accept())
    meta = {META_CALL_ID: "c-1", META_RUN_ID: "r-1"}
    async with Client(server, mode=mode, elicitation_callback=answers) as client:
        first = await client.call_tool("refund", REFUND, meta=meta)
        again = await client.call_tool("refund", REFUND, meta=meta)
    assert (
        first.structured_content
        == again.structured_content
        == {
            "refunded": 500,
            "order_id": "A1",
        }
    )
    assert ran == [REFUND]
    assert len(answers.asked) == 1
    assert await by_call(executor.ledger) == {"c-1": [*APPROVED, "call.replayed"]}
    assert {e.run_id for e in await events_of(executor.ledger)} == {"r-1"}


async def test_a_pinned_id_that_is_not_text_is_a_json_rpc_error() -> None:
    """A malformed request: refused before anything is recorded."""
    server, executor, _ = gateway()
    async with Client(server, mode="legacy") as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("lookup", {"order_id": "A1"}, meta={META_CALL_ID: 7})
    assert caught.value.error.code == types.INVALID_PARAMS
    assert await events_of(executor.ledger) == []


@pytest.mark.parametrize("mode", ERAS)
async def test_two_connections_whose_first_calls_share_json_rpc_id_1_are_two_calls(
    mode: str,
) -> None:
    """Call ids are never the JSON-RPC id: the second client's call 1 runs too."""
    registry = Registry()
    ran: list[str] = []

    @registry.tool
    def note(text: str) -> str:
        ran.append(text)
        return text

    executor = Executor(registry, ledger=MemoryLedger())
    server = mcp_server(registry, executor=executor)
    async with Client(server, mode=mode) as one, Client(server, mode=mode) as two:
        a = await one.call_tool("note", {"text": "same"})
        b = await two.call_tool("note", {"text": "same"})
    assert (a.structured_content, b.structured_content) == ({"result": "same"}, {"result": "same"})
    assert ran == ["same", "same"]
    calls = await by_call(executor.ledger)
    assert list(calls.values()) == [timeline("call.succeeded")] * 2


@pytest.mark.parametrize("mode", ERAS)
async def test_a_confirm_rule_asks_only_when_it_requires_approval(mode: str) -> None:
    """Under the rule's threshold nobody is asked; over it, the person is."""
    registry = Registry()

    @registry.tool(confirm=lambda call, ctx: call.args["amount_cents"] > 1000)
    def refund(order_id: str, amount_cents: int) -> int:
        return amount_cents

    executor = Executor(registry, ledger=MemoryLedger())
    answers = Answers(accept())
    async with Client(
        mcp_server(registry, executor=executor), mode=mode, elicitation_callback=answers
    ) as client:
        small = await client.call_tool("refund", {"order_id": "A", "amount_cents": 10})
        large = await client.call_tool("refund", {"order_id": "B", "amount_cents": 5000})
    assert (small.structured_content, large.structured_content) == (
        {"result": 10},
        {"result": 5000},
    )
    assert [a.message for a in answers.asked] == [
        'Approve refund with {"amount_cents":5000,"order_id":"B"}?'
    ]


async def test_a_client_without_elicitation_meets_the_executors_port() -> None:
    """No elicitation and no port: denied by the executor (no approver), never started."""
    server, _, ran = gateway()
    async with Client(server, mode="2026-07-28") as client:
        result = await client.call_tool("refund", REFUND)
    assert result.is_error is True
    assert ours(result.meta) == {META_KIND: "approval-denied"}
    assert ran == []


async def test_a_client_that_disconnects_mid_call_still_gets_exactly_one_outcome() -> None:
    """The body keeps running after the client is gone and records its real outcome."""
    registry = Registry()
    entered, release = asyncio.Event(), asyncio.Event()

    @registry.tool(effect="ship:{order_id}")
    async def ship(order_id: str) -> str:
        entered.set()
        await release.wait()
        return f"shipped {order_id}"

    executor = Executor(registry, ledger=MemoryLedger())
    server = mcp_server(registry, executor=executor)

    async def call() -> None:
        async with Client(server, mode="legacy") as client:
            await client.call_tool("ship", {"order_id": "A1"})

    task = asyncio.create_task(call())
    await entered.wait()
    task.cancel()  # the client goes away mid-call
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await drain(server)
    assert list((await by_call(executor.ledger)).values()) == [
        timeline("call.succeeded", effect=True)
    ]
    await checked_audit(executor.ledger)


# -- 2026-07-28: the requestState ------------------------------------------------------------


async def first_round(client: Client, args: dict[str, Any] = REFUND) -> types.InputRequiredResult:
    answer = await client.session.call_tool("refund", args, allow_input_required=True)
    assert isinstance(answer, types.InputRequiredResult)
    assert answer.request_state is not None
    return answer


async def test_a_replayed_request_state_is_refused_and_nothing_runs_twice() -> None:
    """The state is single-use: the second retry with it is a JSON-RPC error."""
    server, executor, ran = gateway()
    async with Client(server, mode="2026-07-28", elicitation_callback=Answers()) as client:
        asked = await first_round(client)
        assert asked.request_state is not None and asked.request_state.startswith("v1.")
        assert await events_of(executor.ledger) == []  # nothing recorded while asking
        responses = {"approval": accept()}
        done = await client.session.call_tool(
            "refund", REFUND, input_responses=responses, request_state=asked.request_state
        )
        with pytest.raises(MCPError) as caught:
            await client.session.call_tool(
                "refund", REFUND, input_responses=responses, request_state=asked.request_state
            )
    assert done.structured_content == {"refunded": 500, "order_id": "A1"}
    assert (caught.value.error.code, caught.value.error.message) == (
        types.INVALID_PARAMS,
        "requestState already used",
    )
    assert ran == [REFUND]
    assert list((await by_call(executor.ledger)).values()) == [APPROVED]


@pytest.mark.parametrize("how", ["forged", "other key", "other arguments", "expired"])
async def test_a_forged_or_expired_request_state_never_runs_nor_records(how: str) -> None:
    """Refused by the seal before the gateway sees it: no approval, no call recorded."""
    security = RequestStateSecurity(keys=[b"k" * 32], ttl=1e-6 if how == "expired" else 600)
    server, executor, ran = gateway(request_state=security)
    other, _, _ = gateway()
    async with Client(server, mode="2026-07-28", elicitation_callback=Answers()) as client:
        if how == "forged":
            state = '{"call_id":"c","run_id":"r","digest":"' + digest(REFUND) + '","nonce":"n"}'
        elif how == "other key":
            async with Client(
                other, mode="2026-07-28", elicitation_callback=Answers()
            ) as elsewhere:
                state = (await first_round(elsewhere)).request_state or ""
        else:
            state = (await first_round(client)).request_state or ""
        args = {**REFUND, "amount_cents": 50_000} if how == "other arguments" else REFUND
        with pytest.raises(MCPError) as caught:
            await client.session.call_tool(
                "refund", args, input_responses={"approval": accept()}, request_state=state
            )
    assert (caught.value.error.code, caught.value.error.message) == (
        types.INVALID_PARAMS,
        "Invalid or expired requestState",
    )
    assert ran == []
    assert await events_of(executor.ledger) == []


async def test_a_retry_without_the_answer_is_asked_again() -> None:
    """A state with no approval answer: a fresh InputRequiredResult, nothing recorded."""
    server, executor, ran = gateway()
    async with Client(server, mode="2026-07-28", elicitation_callback=Answers()) as client:
        asked = await first_round(client)
        again = await client.session.call_tool(
            "refund", REFUND, allow_input_required=True, request_state=asked.request_state
        )
    assert isinstance(again, types.InputRequiredResult)
    assert again.request_state != asked.request_state
    assert ran == []
    assert await events_of(executor.ledger) == []


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize(
    ("args", "got"), [([1, 2], "array"), ('{"order_id": "A1"}', "str"), (5, "int")]
)
async def test_arguments_that_are_not_an_object_are_invalid_arguments(
    mode: str, args: Any, got: str
) -> None:
    """Not a JSON-RPC error: tool-args-invalid, recorded as call.invalid, nobody asked."""
    server, executor, ran = gateway()
    answers = Answers(accept())
    # Built without validation: the SDK's client would refuse to send such a request.
    request = types.CallToolRequest.model_construct(
        method="tools/call",
        params=types.CallToolRequestParams.model_construct(name="refund", arguments=args),
    )
    async with Client(server, mode=mode, elicitation_callback=answers) as client:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # pydantic: "unexpected value"
            result = await client.session.send_request(request, types.CallToolResult)
    assert result.structured_content == {
        "error": {
            "kind": "tool-args-invalid",
            "message": f"invalid arguments for refund: Expected `object`, got `{got}`",
        }
    }
    assert ours(result.meta) == {META_KIND: "tool-args-invalid"}
    assert (answers.asked, ran) == ([], [])
    assert list((await by_call(executor.ledger)).values()) == [["call.requested", "call.invalid"]]


@pytest.mark.parametrize("mode", ERAS)
async def test_elicit_false_leaves_every_approval_to_the_port(mode: str) -> None:
    """Out of band only: a client that could elicit is not asked; the deferred port holds it."""
    registry, ran = build_registry()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger, approval=deferred)
    server = mcp_server(registry, executor=executor, elicit=False, default_run_id="desk")
    answers = Answers(accept())
    async with Client(server, mode=mode, elicitation_callback=answers) as client:
        pending = await client.call_tool("refund", REFUND)
        (request,) = await deferred.pending()
        await deferred.answer(request.request_id, approved=True, reviewer="alice")
        done = await client.call_tool("refund", REFUND)
    assert pending.structured_content == {
        "error": {
            "kind": "approval-pending",
            "message": f"approval {request.request_id} for refund is pending",
        },
        "request_id": request.request_id,
    }
    assert done.structured_content == {"refunded": 500, "order_id": "A1"}
    assert (answers.asked, ran) == ([], [REFUND])
    # Both calls are one run (default_run_id), which is how the answer reached the second.
    assert {e.run_id for e in await events_of(ledger)} == {"desk"}
    await checked_audit(ledger)


def test_the_sdks_private_connection_is_read_in_one_place_that_names_it() -> None:
    """mcp 2.3 has no public way from a request to its connection: a session without
    ``_connection`` is a clear error naming it, never a guess."""
    from agent_adapter.bridges.mcp._relay import client_connection

    class Session:
        client_capabilities = None

    with pytest.raises(RuntimeError, match=r"Session has no _connection \(a mcp\.server\."):
        client_connection(Session())
