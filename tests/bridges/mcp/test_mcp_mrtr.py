"""A 2026-07-28 client answers a proxied upstream's mid-call question (InputRequiredResult).

The upstream (``_mcp_asking_upstream.py``, a real MCPServer subprocess over stdio) asks
with a request nested in its running ``tools/call``; the gateway's client is the real
``mcp.Client`` in 2026-07-28 mode, which gets each question as an ``InputRequiredResult``
and retries with the answer. The upstream's request stays open across the retries, and
the executor sees one call with one outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_helpers import by_call, checked_audit, events_of, ours
from test_mcp_cli import CLI, audit_of, env, start_http
from test_mcp_node import EVERYTHING, HERE, node, ts_gateway  # noqa: F401  (node: the fixture)

from agent_adapter import Executor, Registry
from agent_adapter.bridges.mcp._waiting import WaitingCalls, read_wait_state
from agent_adapter.integrations.mcp import META_KIND, Relay, drain, mcp_server, proxy
from agent_adapter.ledger import MemoryLedger, replay

pytestmark = pytest.mark.usefixtures("bounded")

UPSTREAM = Path(__file__).with_name("_mcp_asking_upstream.py")
MODERN = "2026-07-28"
ONE_CALL = ["call.requested", "call.validated", "call.started", "call.succeeded"]


def one_call(questions: int) -> list[str]:
    """The events of one successful call that relayed ``questions`` questions."""
    return [*ONE_CALL[:3], *["call.exchanged"] * questions, ONE_CALL[3]]


TTL_S = 30.0


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def gateway(
    tmp_path: Path,
    policy: dict[str, Any] | None = None,
    clock: Clock | None = None,
    ttl_s: float = TTL_S,
    upstream_era: str = "legacy",
) -> AsyncIterator[tuple[Any, Executor, Path]]:
    """The asking upstream behind an in-process gateway; its log of what ran."""
    log = tmp_path / "upstream.log"
    relay = Relay()
    registry = Registry()

    @registry.tool
    def lookup(order_id: str) -> str:
        return order_id

    params = StdioServerParameters(command=sys.executable, args=[str(UPSTREAM), str(log)])
    executor = Executor(registry, ledger=MemoryLedger())
    # The handshake era towards the upstream by default: its questions are requests it
    # keeps open (on 2026-07-28 its own InputRequiredResult, driven by the upstream client).
    async with Client(params, mode=upstream_era, **relay.client_options()) as upstream:
        await proxy(registry, upstream, policy=policy, relay=relay)
        yield (
            mcp_server(
                registry,
                executor=executor,
                request_state=RequestStateSecurity.ephemeral(ttl=ttl_s),
                clock=clock,
            ),
            executor,
            log,
        )


async def exchanged(ledger: Any) -> list[tuple[str, Any, Any, str]]:
    """Every ``call.exchanged``: (method, request, response, error)."""
    return [
        (e.method, e.request, e.response, e.error)
        for e in await events_of(ledger)
        if e.type == "call.exchanged"
    ]


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def table(server: Any) -> dict[str, Any]:
    """The gateway's waiting calls (empty once every call has ended)."""
    return dict(server.agent_adapter_gateway.waiting.calls)


async def ended(server: Any) -> None:
    """Every call body of ``server`` has recorded its outcome (no client is waited for)."""
    await asyncio.gather(*server.agent_adapter_gateway.running, return_exceptions=True)


async def by_hand(ctx: Any, params: Any) -> types.ElicitResult:
    """Declares elicitation; the test answers each InputRequiredResult itself."""
    raise AssertionError("the test drives the rounds itself")


def go(value: bool) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"go": value})


async def test_accept_returns_the_upstreams_result_in_one_call(tmp_path: Path) -> None:
    """Two questions, two retries: the upstream ran once, the ledger has one call."""
    asked: list[str] = []

    async def person(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return go(True)

    async with gateway(tmp_path) as (server, executor, log):
        async with Client(server, mode=MODERN, elicitation_callback=person) as client:
            result = await client.call_tool("transfer", {"amount": 3})
        assert table(server) == {}
    assert result.content == [types.TextContent(type="text", text="sent 3")]
    assert asked == ["Send 3?", "Really?"]
    assert lines(log) == [
        "transfer started 3",
        "transfer Send 3? accept",
        "transfer Really? accept",
        "transfer sent 3",
    ]
    assert list((await by_call(executor.ledger)).values()) == [one_call(2)]
    accepted = {"action": "accept", "content": {"go": True}}
    assert [(m, q["message"], a, e) for m, q, a, e in await exchanged(executor.ledger)] == [
        ("elicitation/create", "Send 3?", accepted, ""),
        ("elicitation/create", "Really?", accepted, ""),
    ]
    await checked_audit(executor.ledger)


@pytest.mark.parametrize("upstream_era", ["legacy", MODERN])
async def test_either_era_of_upstream_reaches_a_modern_client(
    tmp_path: Path, upstream_era: str
) -> None:
    """The upstream asks by a nested request or by an InputRequiredResult of its own."""
    asked: list[str] = []

    async def person(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return go(True)

    async with gateway(tmp_path, upstream_era=upstream_era) as (server, executor, log):
        async with Client(server, mode=MODERN, elicitation_callback=person) as client:
            result = await client.call_tool("pay", {"amount": 12})
        assert table(server) == {}
    assert result.content == [types.TextContent(type="text", text="pay accept")]
    assert asked == ["Pay 12?"]
    assert lines(log) == ["pay 12 accept"]
    assert list((await by_call(executor.ledger)).values()) == [one_call(1)]
    await checked_audit(executor.ledger)


async def test_decline_reaches_the_upstream(tmp_path: Path) -> None:
    """The person declines the first question: the upstream's own answer is the result."""
    async with gateway(tmp_path) as (server, executor, log):
        answers = [types.ElicitResult(action="decline")]

        async def person(ctx: Any, params: Any) -> types.ElicitResult:
            return answers.pop(0)

        async with Client(server, mode=MODERN, elicitation_callback=person) as client:
            result = await client.call_tool("transfer", {"amount": 4})
    assert result.content == [types.TextContent(type="text", text="not sent: decline")]
    assert lines(log) == ["transfer started 4", "transfer Send 4? decline"]
    assert list((await by_call(executor.ledger)).values()) == [one_call(1)]
    await checked_audit(executor.ledger)


def forged(state: str) -> str:
    """``state`` with one character of its sealed token changed."""
    i = len(state) // 2
    return state[:i] + ("A" if state[i] != "A" else "B") + state[i + 1 :]


async def test_forged_replayed_and_unanswered_states_never_reach_the_upstream(
    tmp_path: Path,
) -> None:
    """JSON-RPC errors; the waiting call carries on with the real retry, once each."""
    async with gateway(tmp_path) as (server, executor, log):
        async with Client(server, mode=MODERN, elicitation_callback=by_hand) as client:
            session = client.session

            async def retry(state: str, responses: Any) -> Any:
                return await session.call_tool(
                    "transfer",
                    {"amount": 5},
                    input_responses=responses,
                    request_state=state,
                    allow_input_required=True,
                )

            first = await session.call_tool("transfer", {"amount": 5}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            ((key, request),) = (first.input_requests or {}).items()
            assert isinstance(request, types.ElicitRequest)
            assert request.params.message == "Send 5?"  # type: ignore[union-attr]
            state = first.request_state
            assert state is not None
            errors = []
            for bad_state, responses in [
                (forged(state), {key: go(True)}),  # rejected by the seal
                (state, {}),  # no answer: refused, the state not spent
                (state, {"other": go(True)}),
            ]:
                with pytest.raises(MCPError) as caught:
                    await retry(bad_state, responses)
                errors.append(caught.value.error.message)
            assert errors == [
                "Invalid or expired requestState",
                f"inputResponses has no answer to {key!r}",
                f"inputResponses has no answer to {key!r}",
            ]
            second = await retry(state, {key: go(True)})
            assert isinstance(second, types.InputRequiredResult)
            with pytest.raises(MCPError) as replayed:
                await retry(state, {key: go(False)})
            assert replayed.value.error.message == (
                "requestState already used, expired, or its call has ended"
            )
            ((key2, _),) = (second.input_requests or {}).items()
            assert second.request_state is not None
            final = await retry(second.request_state, {key2: go(True)})
            with pytest.raises(MCPError) as after:
                await retry(second.request_state, {key2: go(True)})
        assert table(server) == {}
    assert isinstance(final, types.CallToolResult)
    assert final.content == [types.TextContent(type="text", text="sent 5")]
    assert after.value.error.code == types.INVALID_PARAMS
    assert lines(log) == [
        "transfer started 5",
        "transfer Send 5? accept",
        "transfer Really? accept",
        "transfer sent 5",
    ]
    assert list((await by_call(executor.ledger)).values()) == [one_call(2)]
    await checked_audit(executor.ledger)


async def test_a_client_that_never_comes_back_ends_at_the_ttl(tmp_path: Path) -> None:
    """Past the TTL (injected clock) the upstream is refused; the outcome is recorded."""
    clock = Clock()
    policy = {"transfer": {"effect": "transfer:{amount}"}}
    async with gateway(tmp_path, policy, clock) as (server, executor, log):
        async with Client(server, mode=MODERN, elicitation_callback=by_hand) as client:
            first = await client.session.call_tool(
                "transfer", {"amount": 6}, allow_input_required=True
            )
            assert isinstance(first, types.InputRequiredResult)
            assert len(table(server)) == 1
            clock.now += TTL_S - 1
            await client.call_tool("lookup", {"order_id": "A"})  # any call sweeps
            assert len(table(server)) == 1  # not yet
            clock.now += 1
            await client.call_tool("lookup", {"order_id": "B"})
            assert table(server) == {}
            await ended(server)
            ((key, _),) = (first.input_requests or {}).items()
            with pytest.raises(MCPError) as late:
                await client.session.call_tool(
                    "transfer",
                    {"amount": 6},
                    input_responses={key: go(True)},
                    request_state=first.request_state,
                    allow_input_required=True,
                )
    assert late.value.error.message == "requestState already used, expired, or its call has ended"
    assert lines(log) == [
        "transfer started 6",
        "transfer Send 6? failed: elicitation/create: the client did not answer within 30 s",
    ]
    calls = await by_call(executor.ledger)
    (transfer,) = [seen for seen in calls.values() if "effect.claimed" in seen]
    assert transfer == ["call.requested", "call.validated", "effect.claimed", "call.started",
                        "call.exchanged", "call.failed"]  # fmt: skip
    ((method, _, response, error),) = await exchanged(executor.ledger)
    assert (method, response, error) == (
        "elicitation/create",
        None,
        "the client did not answer within 30 s",
    )
    # The request was written: what the upstream did is unknown, the key ambiguous.
    assert sorted(executor.ambiguous_effects()) == ["transfer:6"]
    audit = replay(await events_of(executor.ledger), await executor.ledger.verify())
    assert [(p.kind, p.key) for p in audit.problems()] == [("ambiguous", "transfer:6")]


async def test_a_retry_past_the_ttl_is_refused_and_ends_the_wait(tmp_path: Path) -> None:
    """The late answer never reaches the upstream; the call ends with the refusal."""
    clock = Clock()
    async with gateway(tmp_path, None, clock) as (server, executor, log):
        async with Client(server, mode=MODERN, elicitation_callback=by_hand) as client:
            first = await client.session.call_tool(
                "transfer", {"amount": 7}, allow_input_required=True
            )
            assert isinstance(first, types.InputRequiredResult)
            ((key, _),) = (first.input_requests or {}).items()
            clock.now += TTL_S
            with pytest.raises(MCPError) as late:
                await client.session.call_tool(
                    "transfer",
                    {"amount": 7},
                    input_responses={key: go(True)},
                    request_state=first.request_state,
                    allow_input_required=True,
                )
            assert table(server) == {}
            await ended(server)
    assert late.value.error.message == "requestState expired: the question waited more than 30 s"
    assert lines(log) == [
        "transfer started 7",
        "transfer Send 7? failed: elicitation/create: the client did not answer within 30 s",
    ]
    (failed,) = [e for e in await events_of(executor.ledger) if e.type == "call.failed"]
    assert failed.tool == "transfer"
    await checked_audit(executor.ledger)  # no effect key: nothing left unknown


async def test_the_calls_timeout_ends_the_wait_first(tmp_path: Path) -> None:
    """A policy timeout shorter than the TTL: tool-timeout, and the table empties."""
    policy = {"transfer": {"timeout": 0.5}}
    async with gateway(tmp_path, policy, Clock()) as (server, executor, log):
        async with Client(server, mode=MODERN, elicitation_callback=by_hand) as client:
            first = await client.session.call_tool(
                "transfer", {"amount": 8}, allow_input_required=True
            )
            assert isinstance(first, types.InputRequiredResult)
            await ended(server)
            assert table(server) == {}
    (failed,) = [e for e in await events_of(executor.ledger) if e.type == "call.failed"]
    assert (failed.error_kind, failed.error) == (
        "tool-timeout",
        "upstream transfer did not answer within 0.5 s; it may have run",
    )
    assert await exchanged(executor.ledger) == []  # (unanswered when the call ended)
    assert lines(log) == ["transfer started 8"]
    await checked_audit(executor.ledger)


async def test_the_gateways_approval_then_the_upstreams_question(tmp_path: Path) -> None:
    """Both through InputRequiredResult, in one call: approval first, then the upstream."""
    asked: list[str] = []

    async def person(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        if params.message.startswith("Approve"):
            return types.ElicitResult(action="accept", content={"approve": True})
        return go(True)

    policy = {"transfer": {"confirm": True}}
    async with gateway(tmp_path, policy) as (server, executor, log):
        async with Client(server, mode=MODERN, elicitation_callback=person) as client:
            result = await client.call_tool("transfer", {"amount": 9})
        assert table(server) == {}
    assert result.content == [types.TextContent(type="text", text="sent 9")]
    assert asked == ['Approve transfer with {"amount":9}?', "Send 9?", "Really?"]
    assert list((await by_call(executor.ledger)).values()) == [
        [
            "call.requested",
            "call.validated",
            "approval.requested",
            "approval.granted",
            "call.started",
            "call.exchanged",
            "call.exchanged",
            "call.succeeded",
        ]
    ]
    assert lines(log)[-1] == "transfer sent 9"
    await checked_audit(executor.ledger)


async def test_sampling_is_answered_through_input_required(tmp_path: Path) -> None:
    """sampling/createMessage: the client's model answers; a client without it is refused."""

    async def model(ctx: Any, params: Any) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="short"), model="m"
        )

    async with gateway(tmp_path) as (server, executor, log):
        async with Client(server, mode=MODERN, sampling_callback=model) as client:
            sampled = await client.call_tool("summarize", {"text": "a long text"})
        async with Client(server, mode=MODERN) as without:
            refused = await without.call_tool("summarize", {"text": "x"})
    assert sampled.content == [types.TextContent(type="text", text="summary: short")]
    assert ours(refused.meta) == {META_KIND: "tool-failed"}
    assert lines(log) == ["summarize short"]
    answered, refusal = await exchanged(executor.ledger)
    assert (answered[0], answered[2]["content"], answered[3]) == (
        "sampling/createMessage",
        {"type": "text", "text": "short"},
        "",
    )
    assert (refusal[0], refusal[2], refusal[3]) == (
        "sampling/createMessage",
        None,
        "refused: the client did not declare sampling",
    )
    await checked_audit(executor.ledger)


async def test_the_ts_sdk_upstream_through_a_modern_client(
    node: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The TypeScript SDK's elicitation and sampling tools answer as for a legacy client."""

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"response": "yes"})

    async def sample(ctx: Any, params: Any) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="ok"), model="m"
        )

    async with ts_gateway(tmp_path) as (server, executor, _):
        async with Client(
            server, mode=MODERN, elicitation_callback=elicit, sampling_callback=sample
        ) as client:
            elicited = await client.call_tool("test_elicitation", {"message": "Proceed?"})
            sampled = await client.call_tool("test_sampling", {"prompt": "Say ok"})
        await checked_audit(executor.ledger)
        assert list((await by_call(executor.ledger)).values()) == [one_call(1), one_call(1)]
    assert elicited.content[0].text == (  # type: ignore[union-attr]
        'User response: action=accept, content={"response":"yes"}'
    )
    assert sampled.content[0].text == "LLM response: ok"  # type: ignore[union-attr]


async def test_drain_refuses_the_open_questions_and_records_the_outcome(tmp_path: Path) -> None:
    """A host shutting down does not wait a TTL for clients that cannot come back."""
    async with gateway(tmp_path, None, Clock()) as (server, executor, log):
        async with Client(server, mode=MODERN, elicitation_callback=by_hand) as client:
            first = await client.session.call_tool(
                "transfer", {"amount": 10}, allow_input_required=True
            )
            assert isinstance(first, types.InputRequiredResult)
            await drain(server)
            assert table(server) == {}
    assert lines(log)[-1] == (
        "transfer Send 10? failed: elicitation/create: "
        "the gateway is shutting down; no answer can reach it"
    )
    assert [e.type for e in await events_of(executor.ledger)][-1] == "call.failed"
    await checked_audit(executor.ledger)


async def test_with_no_other_call_the_ttls_timer_ends_the_wait(tmp_path: Path) -> None:
    """The loop's own timer (the real clock, a short TTL) refuses the unanswered question."""
    async with gateway(tmp_path, ttl_s=0.2) as (server, executor, log):
        async with Client(server, mode=MODERN, elicitation_callback=by_hand) as client:
            first = await client.session.call_tool(
                "transfer", {"amount": 11}, allow_input_required=True
            )
            assert isinstance(first, types.InputRequiredResult)
            await ended(server)  # nothing but the timer can end it
            assert table(server) == {}
    assert lines(log)[-1] == (
        "transfer Send 11? failed: elicitation/create: the client did not answer within 0.2 s"
    )
    await checked_audit(executor.ledger)


async def test_server_everything_through_mcp_serve_to_a_modern_client(
    node: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Over stdio, another process: the 2026-07-28 client gets what a direct client gets."""

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async def sample(ctx: Any, params: Any) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="ok"), model="m"
        )

    argv = [str(node), str(EVERYTHING), "stdio"]
    db = tmp_path / "ledger.db"
    gateway_params = StdioServerParameters(
        command=CLI[0],
        args=[*CLI[1:], "mcp", "serve", "--db", str(db), "--upstream", " ".join(argv)],
        env=env(tmp_path / "ran.log"),
        cwd=HERE,
    )
    callbacks: dict[str, Any] = {"elicitation_callback": elicit, "sampling_callback": sample}
    calls = [
        ("trigger-elicitation-request", {}),
        ("trigger-sampling-request", {"prompt": "Say ok", "maxTokens": 5}),
    ]
    async with (
        Client(
            StdioServerParameters(command=argv[0], args=argv[1:]), mode="legacy", **callbacks
        ) as direct,
        Client(gateway_params, mode=MODERN, **callbacks) as proxied,
    ):
        assert proxied.protocol_version == MODERN
        # (Listed first, as a host does: the gateway opens the upstream connection for this
        # client's capabilities, and registers the tools it lists only to them, then.)
        await proxied.list_tools()
        for name, args in calls:
            a = await direct.call_tool(name, args)
            b = await proxied.call_tool(name, args)
            # (On 2026-07-28 the SDK adds its serverInfo to every result's _meta.)
            assert b.model_dump(exclude={"meta"}) == a.model_dump(exclude={"meta"}), name
    events, audit = await audit_of(db)
    assert audit.problems() == []
    assert [e.type for e in events if e.type.startswith("call.")] == one_call(1) + one_call(1)


def elicit_request(message: str) -> types.ElicitRequest:
    schema = {"type": "object", "properties": {"go": {"type": "boolean"}}}
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
    )


class Recorder:
    """An exchange recorder that keeps what it is given (the executor's records events)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    async def record(self, method: str, **fields: Any) -> None:
        self.records.append({"method": method, **fields})


async def test_a_second_question_while_one_waits_is_refused() -> None:
    """The table alone: one question per round; the first is answered, the second refused."""
    table = WaitingCalls(ttl_s=TTL_S, clock=Clock())
    ctx = SimpleNamespace(session=SimpleNamespace(), request_id=1, meta=None)
    call, asking = table.open(ctx, "t", "c1", "r1")
    asking.recorder = recorder = Recorder()  # (as Relay.enter sets inside a body)
    first = asyncio.ensure_future(
        asking.ask("elicitation/create", elicit_request("One?"), types.ElicitResult)
    )
    call.bind(first)
    asked = await call.next()
    assert asked is not None and list(asked.input_requests or {}) == ["upstream-1"]
    second = await asking.ask("elicitation/create", elicit_request("Two?"), types.ElicitResult)
    assert second == types.ErrorData(
        code=types.INVALID_REQUEST,
        message="elicitation/create: another question of this call is waiting",
    )
    state = read_wait_state(asked.request_state or "")
    assert state is not None
    table.answer(state, "t", {"upstream-1": go(True)}, ctx)
    assert await first == go(True)
    assert table.calls == {}
    assert [(r["request"]["message"], r["response"], r["error"]) for r in recorder.records] == [
        ("Two?", None, "refused: another question of this call is waiting"),
        ("One?", {"action": "accept", "content": {"go": True}}, ""),
    ]


async def test_over_http_the_approval_then_server_everythings_question(
    node: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """`mcp serve --http`: each round a POST of its own; one call, approval then upstream."""
    asked: list[str] = []

    async def person(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        if params.message.startswith("Approve"):
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="decline")

    db = tmp_path / "ledger.db"
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools."trigger-elicitation-request"]\nconfirm = true\n')
    upstream = f"{node} {EVERYTHING} stdio"
    proc, url = await start_http(
        "--db", str(db), "--upstream", upstream, "--policy", str(policy), log=tmp_path / "ran"
    )
    try:
        async with Client(url, mode=MODERN, elicitation_callback=person) as client:
            result = await client.call_tool("trigger-elicitation-request", {})
    finally:
        proc.terminate()
        await proc.wait()
    assert [b.text for b in result.content if isinstance(b, types.TextContent)] == [
        "❌ User declined to provide the requested information.",
        '\nRaw result: {\n  "action": "decline"\n}',
    ]
    assert len(asked) == 2 and asked[0] == "Approve trigger-elicitation-request with {}?"
    events, audit = await audit_of(db)
    assert audit.problems() == []
    assert [e.type for e in events if e.call_id] == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "approval.granted",
        "call.started",
        "call.exchanged",
        "call.succeeded",
    ]
