"""``proxy``: a real upstream MCP server process behind the gateway, and what its answers prove."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_helpers import Answers, accept, by_call, checked_audit, ours

from agent_adapter import Executor, Registry
from agent_adapter.errors import ToolUsageError
from agent_adapter.integrations.mcp import (
    META_CALL_ID,
    META_KIND,
    Upstream,
    UpstreamUnavailable,
    mcp_server,
    proxy,
)
from agent_adapter.ledger import MemoryLedger, replay

pytestmark = pytest.mark.usefixtures("bounded")

UPSTREAM = Path(__file__).with_name("_mcp_upstream.py")
ERAS = ["legacy", "2026-07-28"]


def upstream_params(log: Path) -> StdioServerParameters:
    """The test upstream as a subprocess over stdio, logging every body that runs to ``log``."""
    return StdioServerParameters(command=sys.executable, args=[str(UPSTREAM), str(log)])


def ran(log: Path) -> list[str]:
    """The upstream's executions, in order."""
    return log.read_text().splitlines() if log.exists() else []


@contextlib.asynccontextmanager
async def gateway(
    tmp_path: Path, policy: dict[str, Any] | None = None, prefix: str = "docs."
) -> AsyncIterator[tuple[Any, Executor, Path]]:
    log = tmp_path / "upstream.log"
    registry = Registry()

    @registry.tool
    def lookup(order_id: str) -> str:
        return order_id

    executor = Executor(registry, ledger=MemoryLedger())
    async with Client(upstream_params(log)) as upstream:
        await proxy(registry, upstream, prefix=prefix, policy=policy)
        yield mcp_server(registry, executor=executor), executor, log


@pytest.mark.parametrize("mode", ERAS)
async def test_a_proxied_upstream_runs_through_the_executor(tmp_path: Path, mode: str) -> None:
    """Listed with the prefix; a read passes through; a destructive tool is asked first."""
    async with gateway(tmp_path) as (server, executor, log):
        answers = Answers(accept(), types.ElicitResult(action="decline"))
        async with Client(server, mode=mode, elicitation_callback=answers) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            found = await client.call_tool("docs.search_documents", {"query": "q"})
            deleted = await client.call_tool("docs.delete_document", {"doc_id": "d1"})
            refused = await client.call_tool("docs.delete_document", {"doc_id": "d2"})
            invalid = await client.call_tool("docs.delete_document", {"doc_id": 7})
    assert sorted(tools) == [
        "docs.charge",
        "docs.crash",
        "docs.delete_document",
        "docs.hang",
        "docs.search_documents",
        "lookup",
    ]
    # Listed as the upstream listed them (its destructiveHint also added an approval).
    assert tools["docs.search_documents"].annotations == types.ToolAnnotations(read_only_hint=True)
    assert tools["docs.delete_document"].annotations == types.ToolAnnotations(destructive_hint=True)
    # Results as the upstream sent them: its structuredContent and its text block.
    assert found.structured_content == {"hits": ["q-1", "q-2"]}
    assert [b.type for b in found.content] == ["text"]
    assert deleted.content == [types.TextContent(type="text", text="deleted d1")]
    assert ours(refused.meta) == {META_KIND: "approval-denied"}
    assert ours(invalid.meta) == {META_KIND: "tool-args-invalid"}
    assert [a.message for a in answers.asked] == [
        'Approve docs.delete_document with {"doc_id":"d1"}?',
        'Approve docs.delete_document with {"doc_id":"d2"}?',
    ]
    assert ran(log) == ['search_documents {"query": "q"}', 'delete_document {"doc_id": "d1"}']
    await checked_audit(executor.ledger)


async def test_an_upstream_is_error_leaves_the_key_ambiguous(tmp_path: Path) -> None:
    """isError proves nothing: recorded tool-failed (the client gets the upstream's own
    result), then the retry is ambiguous-effect (ran once)."""
    policy = {"charge": {"effect": "charge:{order_id}"}}
    async with gateway(tmp_path, policy) as (server, executor, log):
        async with Client(server, mode="legacy") as client:
            first = await client.call_tool("docs.charge", {"order_id": "A1", "amount_cents": 5})
            again = await client.call_tool("docs.charge", {"order_id": "A1", "amount_cents": 5})
        events = [e async for e in executor.ledger.read()]
    assert first.is_error and ours(first.meta) == {}
    assert first.content == [
        types.TextContent(type="text", text="Error executing tool charge: card declined")
    ]
    (failed,) = [e for e in events if e.type == "call.failed"]
    assert failed.error_kind == "tool-failed"
    assert failed.error.startswith(
        "docs.charge failed: UpstreamError: upstream charge reported an error: "
        "Error executing tool charge: card declined\n"
    )
    assert ours(again.meta) == {META_KIND: "ambiguous-effect"}
    assert ran(log) == ['charge {"amount_cents": 5, "order_id": "A1"}']
    assert sorted(executor.ambiguous_effects()) == ["charge:A1"]


async def test_not_executed_on_error_frees_the_key(tmp_path: Path) -> None:
    """The operator says an isError did nothing: tool-error, the key is free, retry runs."""
    policy = {"charge": {"effect": "charge:{order_id}", "not_executed_on_error": True}}
    async with gateway(tmp_path, policy) as (server, executor, log):
        async with Client(server, mode="2026-07-28") as client:
            first = await client.call_tool("docs.charge", {"order_id": "A1", "amount_cents": 5})
            again = await client.call_tool("docs.charge", {"order_id": "A1", "amount_cents": 5})
        events = [e async for e in executor.ledger.read()]
    for result in (first, again):
        assert result.is_error and ours(result.meta) == {}
        assert result.content == [
            types.TextContent(type="text", text="Error executing tool charge: card declined")
        ]
    assert [e.error_kind for e in events if e.type == "call.failed"] == ["tool-error"] * 2
    assert len(ran(log)) == 2
    assert executor.ambiguous_effects() == {}


async def test_an_upstream_that_hangs_is_bounded_by_the_tools_timeout(tmp_path: Path) -> None:
    """The policy's timeout ends the call: tool-timeout, the key ambiguous."""
    policy = {"hang": {"timeout": 0.5, "effect": "hang:{order_id}"}}
    async with gateway(tmp_path, policy) as (server, executor, log):
        async with Client(server, mode="legacy") as client:
            result = await client.call_tool("docs.hang", {"order_id": "A1"})
    assert result.structured_content == {
        "error": {
            "kind": "tool-timeout",
            "message": "upstream hang did not answer within 0.5 s; it may have run",
        }
    }
    assert ran(log) == ['hang {"order_id": "A1"}']
    assert sorted(executor.ambiguous_effects()) == ["hang:A1"]


async def test_an_upstream_that_crashes_mid_call(tmp_path: Path) -> None:
    """The dropped call is ambiguous; later calls are never sent (tool-error)."""
    policy = {"crash": {"effect": "crash:{order_id}"}}
    async with gateway(tmp_path, policy) as (server, executor, log):
        async with Client(server, mode="legacy") as client:
            crashed = await client.call_tool("docs.crash", {"order_id": "A1"})
            after = await client.call_tool("docs.search_documents", {"query": "q"})
            alive = await client.call_tool("lookup", {"order_id": "B"})
    assert crashed.structured_content == {
        "error": {
            "kind": "tool-failed",
            "message": "docs.crash failed: UpstreamError: upstream crash: error -32000: "
            "Connection closed",
        }
    }
    assert after.structured_content == {
        "error": {
            "kind": "tool-error",
            "message": "upstream search_documents: the connection is closed; nothing was sent",
        }
    }
    assert alive.structured_content == {"result": "B"}  # the gateway itself lives on
    assert ran(log) == ['crash {"order_id": "A1"}']
    assert sorted(executor.ambiguous_effects()) == ["crash:A1"]
    # The audit says so too: the one problem is the key nobody can vouch for.
    events = [e async for e in executor.ledger.read()]
    problems = replay(events, await executor.ledger.verify()).problems()
    assert [(p.kind, p.key) for p in problems] == [("ambiguous", "crash:A1")]


async def test_the_policy_relaxes_or_adds_approval_and_upstream_hints_only_add(
    tmp_path: Path,
) -> None:
    """confirm=False (operator) relaxes the upstream's destructive hint; confirm=True adds."""
    policy = {"delete_document": {"confirm": False}, "search_documents": {"confirm": True}}
    async with gateway(tmp_path, policy) as (_, executor, _):
        specs = {s.name: s.confirm for s in executor.registry}
    assert specs == {
        "lookup": False,
        "docs.search_documents": True,
        "docs.delete_document": False,
        "docs.charge": False,
        "docs.hang": False,
        "docs.crash": False,
    }


async def test_a_name_collision_is_refused_at_start_naming_both(tmp_path: Path) -> None:
    """No prefix: the upstream's search_documents meets the registry's; nothing registered."""
    registry = Registry()

    @registry.tool
    def search_documents(query: str) -> str:
        return query

    async with Client(upstream_params(tmp_path / "log")) as upstream:
        with pytest.raises(ToolUsageError) as caught:
            await proxy(registry, upstream)
        with pytest.raises(ToolUsageError) as unknown:
            await proxy(registry, upstream, prefix="u.", policy={"serch": {"confirm": True}})
    assert str(caught.value) == (
        "upstream tool 'search_documents' (exported as 'search_documents') collides with the "
        "registry tool 'search_documents'; pass a prefix"
    )
    assert str(unknown.value).startswith(
        "the policy names tools the upstream does not have: ['serch']"
    )
    assert [s.name for s in registry] == ["search_documents"]


class FakeUpstream:
    """An upstream whose ``call_tool`` raises or returns what the test says (one tool).

    ``vanishes``: after the first listing it lists no tools (a tool it no longer has).
    """

    def __init__(self, answer: Any, *, vanishes: bool = False) -> None:
        self.answer = answer
        self.vanishes = vanishes
        self.listed = 0
        self.calls: list[dict[str, Any]] = []

    async def list_tools(self) -> types.ListToolsResult:
        self.listed += 1
        if self.vanishes and self.listed > 1:
            return types.ListToolsResult(tools=[])
        schema = {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]}
        return types.ListToolsResult(tools=[types.Tool(name="op", input_schema=schema)])

    async def call_tool(self, name: str, args: dict[str, Any], meta: Any = None) -> Any:
        self.calls.append({"name": name, "args": args, "meta": meta})
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def rpc(code: int) -> MCPError:
    return MCPError(code=code, message="m")


# Once the request was written, no JSON-RPC code proves the tool did not start (an
# upstream may pass on the -32600 its own elicitation got, after starting the tool).
CLASSIFIED = {
    "parse error": (rpc(types.PARSE_ERROR), "tool-failed", ["op:x"]),
    "invalid request": (rpc(types.INVALID_REQUEST), "tool-failed", ["op:x"]),
    "method not found": (rpc(types.METHOD_NOT_FOUND), "tool-failed", ["op:x"]),
    "invalid params": (rpc(types.INVALID_PARAMS), "tool-failed", ["op:x"]),
    "internal error": (rpc(types.INTERNAL_ERROR), "tool-failed", ["op:x"]),
    "garbage": (ValueError("not JSON-RPC"), "tool-failed", ["op:x"]),
    "not a result": (types.ListToolsResult(tools=[]), "tool-failed", ["op:x"]),
    "is error": (
        types.CallToolResult(content=[types.TextContent(type="text", text="no")], is_error=True),
        "tool-failed",
        ["op:x"],
    ),
}


@pytest.mark.parametrize("name", sorted(CLASSIFIED))
async def test_what_an_upstream_answer_proves(name: str) -> None:
    """Every error once the request was written leaves the key ambiguous."""
    answer, kind, ambiguous = CLASSIFIED[name]
    registry = Registry()
    upstream = FakeUpstream(answer)
    await proxy(registry, upstream, policy={"op": {"effect": "op:{k}"}})
    executor = Executor(registry, ledger=MemoryLedger())
    async with Client(mcp_server(registry, executor=executor), mode="legacy") as client:
        result = await client.call_tool("op", {"k": "x"}, meta={META_CALL_ID: "c1"})
    if isinstance(answer, types.CallToolResult):
        # The upstream's own isError result reaches the client as it sent it.
        assert result.is_error and result.content == answer.content and ours(result.meta) == {}
    else:
        assert ours(result.meta) == {META_KIND: kind}
    (failed,) = [e async for e in executor.ledger.read() if e.type == "call.failed"]
    assert failed.error_kind == kind
    assert sorted(executor.ambiguous_effects()) == ambiguous
    # The upstream is told the call's ids, so an agent-adapter upstream can dedupe too.
    assert [c["meta"] for c in upstream.calls] == [
        {"io.agent-adapter/call-id": "c1", "io.agent-adapter/run-id": executor_run(executor)}
    ]
    assert (await by_call(executor.ledger))["c1"][-1] == "call.failed"


def executor_run(executor: Executor) -> str:
    (run_id,) = {key[0] for key in executor.state.outcomes}
    return run_id


async def test_unknown_tool_from_an_upstream_that_lists_no_such_tool_did_not_run() -> None:
    """The one error that frees the key: "unknown tool", and asked again it lists none."""
    registry = Registry()
    upstream = FakeUpstream(
        MCPError(code=types.INVALID_PARAMS, message="Unknown tool: op"), vanishes=True
    )
    await proxy(registry, upstream, policy={"op": {"effect": "op:{k}"}})
    executor = Executor(registry, ledger=MemoryLedger())
    async with Client(mcp_server(registry, executor=executor), mode="legacy") as client:
        result = await client.call_tool("op", {"k": "x"})
    assert ours(result.meta) == {META_KIND: "tool-error"}
    assert upstream.listed == 2  # at registration, and once more to check
    assert executor.ambiguous_effects() == {}
    await checked_audit(executor.ledger)


async def test_a_proxied_tool_is_listed_as_the_upstream_listed_it(tmp_path: Path) -> None:
    """Title, schemas, annotations and _meta as sent; the policy's readonly adds its hint."""
    async with gateway(tmp_path, {"charge": {"readonly": True}}, prefix="") as (server, _, log):
        async with Client(upstream_params(log)) as direct:
            sent = {t.name: t for t in (await direct.list_tools()).tools}
        async with Client(server, mode="legacy") as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
    assert listed["search_documents"] == sent["search_documents"]
    assert listed["search_documents"].output_schema is not None  # MCPServer sends one
    assert sent["charge"].annotations is None
    assert listed["charge"] == sent["charge"].model_copy(
        update={"annotations": types.ToolAnnotations(read_only_hint=True)}
    )


async def test_a_call_recorded_with_its_exchanges_in_the_value_replays_without_them(
    tmp_path: Path,
) -> None:
    """A ledger of the earlier format (what was asked mid-call inside call.succeeded's
    value, `io.agent-adapter/exchanges`) still answers a pinned repeat: the upstream's
    result as it was sent, without the exchanges, and the upstream does not run."""
    from agent_adapter import digest
    from agent_adapter.integrations.mcp import META_RUN_ID
    from agent_adapter.ledger import CallRequested, CallStarted, CallSucceeded, CallValidated

    log = tmp_path / "upstream.log"
    args = {"query": "q"}
    ids = {"run_id": "run-old", "call_id": "call-old", "tool": "docs.search_documents"}
    asked = {"method": "elicitation/create", "params": {"message": "?"}, "answer": {}}
    sent = {"content": [{"type": "text", "text": "found"}], "structuredContent": {"hits": ["x"]}}
    value = {**sent, "io.agent-adapter/exchanges": [asked]}
    ledger = MemoryLedger()
    await ledger.append_many(
        [
            CallRequested(**ids, args=args),
            CallValidated(**ids, digest=digest(args)),
            CallStarted(**ids, digest=digest(args)),
            CallSucceeded(**ids, result=value),
        ]
    )
    registry = Registry()
    async with Client(upstream_params(log)) as upstream:
        await proxy(registry, upstream, prefix="docs.")
        executor = Executor(registry, ledger=ledger)
        async with Client(mcp_server(registry, executor=executor)) as client:
            meta = {META_RUN_ID: "run-old", META_CALL_ID: "call-old"}
            again = await client.call_tool("docs.search_documents", args, meta=meta)
    answered = again.model_dump(by_alias=True, exclude_none=True)
    assert {k: answered[k] for k in ("content", "structuredContent", "isError")} == {
        **sent,
        "isError": False,
    }
    assert "io.agent-adapter/exchanges" not in str(answered)
    assert ran(log) == []


STUCK = Path(__file__).with_name("_mcp_stuck_upstream.py")


def stuck_params(gate: Path, log: Path) -> StdioServerParameters:
    """The test upstream, but one that never answers initialize while ``gate`` exists."""
    return StdioServerParameters(command=sys.executable, args=[str(STUCK), str(gate), str(log)])


async def test_an_upstream_that_never_answers_initialize_fails_its_opening_in_time(
    tmp_path: Path,
) -> None:
    """The opening is bounded: an error naming the upstream, the capability set and the
    real cause (no exception group), and nothing is kept: the next opening runs again."""
    gate = tmp_path / "stuck"
    gate.touch()
    params = stuck_params(gate, tmp_path / "upstream.log")
    upstream = Upstream(params, open_timeout=0.5)
    with pytest.raises(UpstreamUnavailable) as failed:
        await upstream.__aenter__()
    assert str(failed.value) == (
        f"cannot open the upstream {shlex.join([params.command, *params.args])} for clients "
        "that declared none: no answer to initialize and tools/list within 0.5 s; nothing "
        "was sent, a later request tries again"
    )
    gate.unlink()
    upstream.open_timeout = 60.0  # (a real start may take long on a loaded machine)
    opened = await upstream.session(frozenset())
    assert "search_documents" in (opened.tools or {})
    await upstream.aclose()
    with pytest.raises(ToolUsageError, match="open_timeout must be a positive number"):
        Upstream(params, open_timeout=0)


async def test_clients_waiting_on_an_opening_that_never_ends_get_an_error_then_retry(
    tmp_path: Path,
) -> None:
    """Two clients with elicitation share one opening of that set, which hangs: both get a
    JSON-RPC error naming the upstream and the set, nothing runs; later, it opens."""
    gate, log = tmp_path / "stuck", tmp_path / "upstream.log"
    params = stuck_params(gate, log)
    registry = Registry()
    executor = Executor(registry, ledger=MemoryLedger())
    async with Upstream(params) as upstream:  # (the set with none opens now)
        await proxy(registry, upstream)
        server = mcp_server(registry, executor=executor)
        gate.touch()
        upstream.open_timeout = 0.5
        answers = Answers(accept())
        async with (
            Client(server, mode="legacy", elicitation_callback=answers) as a,
            Client(server, mode="legacy", elicitation_callback=answers) as b,
        ):
            failures = await asyncio.gather(
                a.list_tools(),
                b.call_tool("search_documents", {"query": "q"}),
                return_exceptions=True,
            )
            gate.unlink()
            upstream.open_timeout = 60.0
            listed = await a.list_tools()
            found = await b.call_tool("search_documents", {"query": "q"})
    for failure in failures:
        assert isinstance(failure, MCPError), failure
        assert failure.error.code == types.INTERNAL_ERROR
        assert failure.error.message == (
            f"cannot open the upstream {shlex.join([params.command, *params.args])} for "
            "clients that declared elicitation: no answer to initialize and tools/list "
            "within 0.5 s; nothing was sent, a later request tries again"
        )
    assert "search_documents" in {t.name for t in listed.tools}
    assert found.structured_content == {"hits": ["q-1", "q-2"]}
    assert ran(log) == ['search_documents {"query": "q"}']  # only the call after the retry
    assert answers.asked == []
