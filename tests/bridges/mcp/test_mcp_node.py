"""The proxy measured against software no one here wrote, all run by Node 22.

The official conformance suite's server scenarios against ``mcp serve --http`` (its own
tools) and through the proxy in front of an upstream built on the TypeScript SDK
(``_ts_upstream.cjs``); the reference servers (server-everything, server-filesystem)
through the proxy over stdio beside the same servers direct. Node and the packages come
from the npm cache ``make test`` fills (``.cache/npm``, pinned in the Makefile); no test
fetches anything. Without it these tests skip, and with ``AGENT_ADAPTER_REQUIRE_NODE=1``
(``.ci/run`` sets it) that skip is a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_helpers import Answers, checked_audit, events_of, ours
from test_mcp_cli import CLI, audit_of, env, start_http

from agent_adapter import Executor, Registry
from agent_adapter.errors import ToolUsageError
from agent_adapter.integrations.mcp import (
    META_CALL_ID,
    META_KIND,
    META_RUN_ID,
    Upstream,
    mcp_server,
    proxy,
)
from agent_adapter.ledger import CallExchanged, SQLiteLedger, replay

pytestmark = pytest.mark.usefixtures("bounded")

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
NPM = ROOT / ".cache" / "npm"
MODULES = NPM / "node_modules"
NODE = MODULES / ".bin" / "node"
CONFORMANCE = MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
EVERYTHING = MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
FILESYSTEM = MODULES / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
TS_UPSTREAM = HERE / "_ts_upstream.cjs"
REQUIRE_ENV = "AGENT_ADAPTER_REQUIRE_NODE"

#: Scenarios for what the gateway does not serve: resources, prompts and completion
#: (README, "The MCP gateway": not forwarded, and why).
NOT_SERVED = [
    "completion-complete",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
]
#: What only an upstream sends (a registry tool returns a value, not content blocks or
#: requests mid-call): run through the proxy, not against the gateway's own tools.
UPSTREAM_ONLY = [
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
]


def _node() -> Path:
    """Node 22 from the npm cache, or a skip (a failure when Node is required) saying why."""
    reason = None
    if not NODE.exists() or not CONFORMANCE.exists():
        reason = f"{NPM} has no Node 22 and npm packages (run `make test`, which installs them)"
    else:
        version = subprocess.run(
            [str(NODE), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout.strip()
        if not version.startswith("v22."):
            reason = f"{NODE} is {version or 'not runnable'}, not Node 22"
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but Node is unavailable: {reason}", pytrace=False)
        pytest.skip(f"Node is unavailable: {reason}")
    return NODE


@pytest.fixture
def node() -> Path:
    return _node()


async def conformance(url: str, cwd: Path, *, expected: list[str], scenario: str = "") -> str:
    """Run the suite's server scenarios (the active suite, or one) against ``url``.

    ``expected`` is the baseline of scenarios that must fail: the run passes only when
    exactly those fail (one that passes while listed fails the run too).
    """
    baseline = cwd / "baseline.yml"
    baseline.write_text("server:\n" + "".join(f"  - {name}\n" for name in expected))
    args = [str(NODE), str(CONFORMANCE), "server", "--url", url]
    args += ["--scenario", scenario] if scenario else ["--expected-failures", str(baseline)]
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    async with asyncio.timeout(180):
        out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    return text


def summary(text: str) -> list[str]:
    """The run's summary lines (``✓ name: n passed, m failed``)."""
    return [line for line in text.split("=== SUMMARY ===", 1)[-1].splitlines() if ": " in line]


async def test_conformance_of_the_gateways_own_tools(node: Path, tmp_path: Path) -> None:
    """`mcp serve --http` with a registry: every scenario it offers passes."""
    proc, url = await start_http(
        "--db", str(tmp_path / "ledger.db"), "--tools", "_conformance_tools:registry",
        log=tmp_path / "ran.log",
    )  # fmt: skip
    try:
        text = await conformance(url, tmp_path, expected=NOT_SERVED + UPSTREAM_ONLY)
        schema = await conformance(url, tmp_path, expected=[], scenario="json-schema-2020-12")
    finally:
        proc.terminate()
        await proc.wait()
    passed = [line.split()[1].rstrip(":") for line in summary(text) if line.startswith("✓")]
    assert passed == [
        "server-initialize",
        "logging-set-level",
        "ping",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-error",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
    ]
    assert "Passed: 4/4, 0 failed" in schema


async def test_conformance_through_the_proxy(node: Path, tmp_path: Path) -> None:
    """The proxy in front of a TS-SDK upstream: every tool scenario passes through it."""
    db, upstream_log = tmp_path / "ledger.db", tmp_path / "upstream.log"
    proc, url = await start_http(
        "--db", str(db), "--upstream", f"{node} {TS_UPSTREAM} {upstream_log}",
        log=tmp_path / "ran.log",
    )  # fmt: skip
    try:
        text = await conformance(url, tmp_path, expected=NOT_SERVED)
        schema = await conformance(url, tmp_path, expected=[], scenario="json-schema-2020-12")
    finally:
        proc.terminate()
        await proc.wait()
    passed = {line.split()[1].rstrip(":") for line in summary(text) if line.startswith("✓")}
    assert set(UPSTREAM_ONLY) <= passed
    assert {"tools-list", "tools-call-simple-text", "tools-call-error", "ping"} <= passed
    assert "Passed: 4/4, 0 failed" in schema
    # Every call is in the ledger, which reads back whole; the image as an image.
    events, audit = await audit_of(db)
    assert audit.problems() == []
    (image,) = [e for e in events if e.type == "call.succeeded" and e.tool == "test_image_content"]
    assert [block["type"] for block in image.result["content"]] == ["image"]


@contextlib.asynccontextmanager
async def ts_gateway(
    tmp_path: Path, policy: dict[str, Any] | None = None, db: Path | None = None
) -> AsyncIterator[tuple[Any, Executor, Path]]:
    """The TS upstream behind an in-process gateway (a SQLite ledger at ``db``): one
    upstream process per set of capabilities its clients declare."""
    async with ts_upstream_gateway(tmp_path, policy, db) as (server, executor, log, _):
        yield server, executor, log


@contextlib.asynccontextmanager
async def ts_upstream_gateway(
    tmp_path: Path, policy: dict[str, Any] | None = None, db: Path | None = None
) -> AsyncIterator[tuple[Any, Executor, Path, Upstream]]:
    """``ts_gateway``, and its ``Upstream`` (whose connections a test looks at)."""
    log = tmp_path / "upstream.log"
    params = StdioServerParameters(command=str(NODE), args=[str(TS_UPSTREAM), str(log)])
    registry = Registry()
    ledger = SQLiteLedger(str(db or tmp_path / "ledger.db"))
    async with Upstream(params) as upstream:
        await proxy(registry, upstream, policy=policy)
        executor = await Executor.open(registry, ledger=ledger)
        try:
            yield mcp_server(registry, executor=executor), executor, log, upstream
        finally:
            await executor.close()
            await ledger.close()


def upstream_pids(log: Path) -> set[int]:
    """The live upstream processes of one test (their command line names its ``log``,
    in a temp dir of its own)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if str(log).encode() in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
    return found


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended and been reaped (a zombie still has its /proc entry)."""
    return not Path(f"/proc/{pid}").exists()


async def ended(session: Any) -> None:
    """Until the upstream connection ``session`` is closed (at most 60 s)."""
    async with asyncio.timeout(60):
        await session.ended.wait()


def holders() -> int:
    """How many upstream connections' tasks run (one per open connection)."""
    names = [getattr(t.get_coro(), "__qualname__", "") for t in asyncio.all_tasks()]
    return names.count("Upstream._hold")


async def test_an_upstream_that_started_then_passed_on_minus_32600_leaves_the_key_ambiguous(
    node: Path, tmp_path: Path
) -> None:
    """The issue's case: the tool started, elicited, got -32600 and returned it."""
    policy = {"start_then_elicit": {"effect": "go-on"}}
    async with ts_gateway(tmp_path, policy) as (server, executor, log):
        async with Client(server, mode="legacy") as client:  # declares no elicitation
            first = await client.call_tool("start_then_elicit", {})
            again = await client.call_tool("start_then_elicit", {})
        assert ours(first.meta) == {META_KIND: "tool-failed"}
        text = first.content[0].text  # type: ignore[union-attr]
        assert "error -32600" in text
        # Its connection (this client's) declared no elicitation: the upstream's own SDK
        # refused to ask, and the tool passed that -32600 on, after it had started.
        assert text.endswith("Elicitation not supported"), text
        assert ours(again.meta) == {META_KIND: "ambiguous-effect"}
        assert log.read_text().splitlines() == ["start_then_elicit"]
        assert sorted(executor.ambiguous_effects()) == ["go-on"]
        events = [e async for e in executor.ledger.read()]
        audit = replay(events, await executor.ledger.verify())
    assert [(p.kind, p.key) for p in audit.problems()] == [("ambiguous", "go-on")]
    # Nothing was asked through the gateway, so no exchange is recorded.
    assert [e for e in events if isinstance(e, CallExchanged)] == []


def pinned(name: str) -> dict[str, str]:
    return {META_RUN_ID: "run-1", META_CALL_ID: f"call-{name}"}


async def logged(log: Path, line: str) -> list[str]:
    """The upstream's log once it has a line starting with ``line`` (what the upstream
    did is the gate: no sleep stands for it); at most 60 s."""
    async with asyncio.timeout(60):
        while not any(x.startswith(line) for x in lines(log)):  # noqa: ASYNC110 (another process writes it)
            await asyncio.sleep(0.01)
    return lines(log)


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def until(log: Path, done: Any) -> list[str]:
    """The upstream's log once ``done(lines)`` holds (what the upstream did is the gate);
    at most 60 s."""
    async with asyncio.timeout(60):
        while not done(lines(log)):  # noqa: ASYNC110 (another process writes it)
            await asyncio.sleep(0.01)
    return lines(log)


async def test_a_timed_out_calls_late_question_is_refused_and_new_calls_ask_on_a_new_connection(
    node: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 28's orphan: call "eve" times out while its upstream handler runs on and asks
    later (server.elicitInput: no link to its request) while call "bob" still waits on that
    connection. The connection is retired: eve's late question and bob's own are refused
    with -32600 (whose they are is unknown), never shown nor recorded; a new call ("carol")
    goes to a freshly opened connection, where its own question reaches its client and is
    recorded as its call.exchanged. Once bob's call ended the old process is gone."""
    answers = Answers(types.ElicitResult(action="accept", content={}))
    policy = {"ask_when_told": {"timeout": 0.5}}
    patient = "ask_when_told_patient"
    async with ts_upstream_gateway(tmp_path, policy) as (server, executor, log, upstream):
        plain = upstream_pids(log)  # the connection that declares nothing, opened at start
        async with Client(server, mode="legacy", elicitation_callback=answers) as client:
            bob = asyncio.ensure_future(
                client.call_tool(patient, {"to": "bob", "amount": 10}, meta=pinned("bob"))
            )
            await logged(log, patient)  # bob waits on the elicitation connection
            (old,) = [s for s in upstream.opened() if s.capabilities == frozenset({"elicitation"})]
            (old_pid,) = upstream_pids(log) - plain
            first = await client.call_tool(
                "ask_when_told", {"to": "eve", "amount": 9999}, meta=pinned("eve")
            )
            assert old.retired and not old.ended.is_set()  # bob's call still runs on it
            carol = asyncio.ensure_future(
                client.call_tool(patient, {"to": "carol", "amount": 5}, meta=pinned("carol"))
            )
            await until(log, lambda seen: seen.count(patient) == 2)  # carol waits, elsewhere
            (new_pid,) = upstream_pids(log) - plain - {old_pid}
            (tmp_path / "upstream.log.eve").touch()  # eve's handler asks now, on the old one
            await logged(log, "asked eve")
            (tmp_path / "upstream.log.carol").touch()
            carols = await carol
            (tmp_path / "upstream.log.bob").touch()
            bobs = await bob
            await ended(old)
            assert gone(old_pid)  # ended with its last call, and reaped
            assert holders() == 2  # its task too (the plain connection's and the new one's run)
            assert upstream_pids(log) == plain | {new_pid}
        events = await events_of(executor.ledger)
        audit = replay(events, await executor.ledger.verify())
    assert upstream_pids(log) == set()  # the rest closed with the gateway
    assert ours(first.meta) == {META_KIND: "tool-timeout"}
    refused = (
        "error -32600: MCP error -32600: elicitation/create: refused: a call on this "
        "connection ended before "
        "the upstream answered it, so which call this request is for is unknown"
    )
    assert lines(log) == [
        patient,
        "ask_when_told",
        patient,
        f"asked eve: {refused}",
        "asked carol: accept",
        f"asked bob: {refused}",
    ]
    assert [p.message for p in answers.asked] == ["Confirm transfer of 5 to carol?"]
    assert carols.content[0].text == "accept"  # type: ignore[union-attr]
    assert bobs.content[0].text == refused  # type: ignore[union-attr]
    (exchange,) = [e for e in events if isinstance(e, CallExchanged)]
    assert audit.call("run-1", "call-carol").exchanges == [exchange]
    assert (exchange.method, exchange.response) == (
        "elicitation/create",
        {"action": "accept", "content": {}},
    )
    assert audit.call("run-1", "call-bob").outcome == "call.succeeded"
    assert audit.call("run-1", "call-bob").exchanges == []
    assert audit.problems() == []
    warned = [r for r in caplog.records if "refused from now on" in r.getMessage()]
    assert len(warned) == 1  # one warning for the retired connection, not one per question


async def test_a_dead_upstream_process_is_replaced_by_a_new_connection(
    node: Path, tmp_path: Path
) -> None:
    """The upstream process is killed: the call that meets the dead connection may have
    reached it (its key is left ambiguous, as for any dropped connection); the connection
    is retired and its process reaped, and the next call opens a new one and succeeds."""
    policy = {"test_simple_text": {"effect": "hello"}}
    async with ts_upstream_gateway(tmp_path, policy) as (server, executor, log, upstream):
        async with Client(server, mode="legacy") as client:
            before = await client.call_tool("test_audio_content", {})
            (old,) = upstream.opened()
            (old_pid,) = upstream_pids(log)
            os.kill(old_pid, signal.SIGKILL)
            met = await client.call_tool("test_simple_text", {})
            await ended(old)
            assert holders() == 0  # its task ended (no call has opened the next one yet)
            after = await client.call_tool("test_image_content", {})
            again = await client.call_tool("test_simple_text", {})
            (new,) = upstream.opened()
            (new_pid,) = upstream_pids(log)
        assert old.retired and new is not old
        assert gone(old_pid) and new_pid != old_pid
        ambiguous = sorted(executor.ambiguous_effects())
        events = await events_of(executor.ledger)
        audit = replay(events, await executor.ledger.verify())
    assert upstream_pids(log) == set()
    assert ours(before.meta) == {} and before.content[0].type == "audio"
    assert ours(met.meta) == {META_KIND: "tool-failed"}
    assert "Connection closed" in met.content[0].text  # type: ignore[union-attr]
    assert ours(after.meta) == {} and after.content[0].type == "image"
    assert ours(again.meta) == {META_KIND: "ambiguous-effect"}  # the key rules, unchanged
    assert ambiguous == ["hello"]
    assert lines(log) == ["test_audio_content", "test_image_content"]
    assert [(p.kind, p.key) for p in audit.problems()] == [("ambiguous", "hello")]


async def test_results_and_listings_pass_through_and_replay_the_same(
    node: Path, tmp_path: Path
) -> None:
    """Blocks, structuredContent, _meta, title, outputSchema, annotations: as sent."""
    params = StdioServerParameters(
        command=str(NODE), args=[str(TS_UPSTREAM), str(tmp_path / "direct.log")]
    )
    names = ["structured_report", "test_multiple_content_types", "test_audio_content"]
    async with Client(params) as direct:
        listed = {t.name: t for t in (await direct.list_tools()).tools}
        sent = {name: await direct.call_tool(name, {}) for name in names}
    db = tmp_path / "ledger.db"
    async with ts_gateway(tmp_path, db=db) as (server, executor, log):
        async with Client(server, mode="legacy") as client:
            through = {t.name: t for t in (await client.list_tools()).tools}
            got = {name: await client.call_tool(name, {}, meta=pinned(name)) for name in names}
    assert through == listed
    assert listed["structured_report"].title == "Structured report"
    assert listed["structured_report"].output_schema is not None
    for name in names:
        assert got[name].model_dump() == sent[name].model_dump(), name
    assert [b.type for b in got["test_multiple_content_types"].content] == [
        "text",
        "image",
        "resource",
    ]
    # A later process: the same call ids are answered from the ledger, the same blocks.
    async with ts_gateway(tmp_path, db=db) as (server, executor, log):
        async with Client(server, mode="legacy") as client:
            replayed = {name: await client.call_tool(name, {}, meta=pinned(name)) for name in names}
        await checked_audit(executor.ledger)
    assert {n: r.model_dump() for n, r in replayed.items()} == {
        n: r.model_dump() for n, r in sent.items()
    }
    assert log.read_text().splitlines() == names  # ran once each, in the first process


async def test_an_upstream_is_error_reaches_the_client_as_sent_and_replays_the_same(
    node: Path, tmp_path: Path
) -> None:
    """Its text and image blocks, structuredContent, _meta and isError; the key ambiguous."""
    params = StdioServerParameters(
        command=str(NODE), args=[str(TS_UPSTREAM), str(tmp_path / "direct.log")]
    )
    async with Client(params) as direct:
        sent = await direct.call_tool("error_with_image", {})
    policy = {"error_with_image": {"effect": "render"}}
    async with ts_gateway(tmp_path, policy) as (server, executor, log):
        async with Client(server, mode="legacy") as client:
            got = await client.call_tool("error_with_image", {}, meta=pinned("err"))
            # The same pinned call id again: answered from the ledger, the same blocks.
            retried = await client.call_tool("error_with_image", {}, meta=pinned("err"))
        ambiguous = sorted(executor.ambiguous_effects())
        events = [e async for e in executor.ledger.read()]
    assert sent.is_error and [b.type for b in sent.content] == ["text", "image"]
    assert got.model_dump() == sent.model_dump()
    assert retried.model_dump() == sent.model_dump()
    assert ambiguous == ["render"]
    (failed,) = [e for e in events if e.type == "call.failed"]
    assert failed.error_kind == "tool-failed"
    assert [e.type for e in events if e.call_id == "call-err"][-1] == "call.replayed"
    assert log.read_text().splitlines() == ["error_with_image"]


async def test_progress_logging_elicitation_and_sampling_are_relayed_and_recorded(
    node: Path, tmp_path: Path
) -> None:
    """The client's token, the upstream's log lines, its questions and their answers."""
    asked: list[Any] = []
    logged: list[Any] = []
    progress: list[float] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"response": "yes"})

    async def sample(ctx: Any, params: Any) -> types.CreateMessageResult:
        asked.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="ok"), model="m"
        )

    async def log_line(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params.data)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with ts_gateway(tmp_path) as (server, executor, _):
        async with Client(
            server,
            mode="legacy",
            elicitation_callback=elicit,
            sampling_callback=sample,
            logging_callback=log_line,
        ) as client:
            stepped = await client.call_tool(
                "test_tool_with_progress", {}, progress_callback=on_progress
            )
            await client.call_tool("test_tool_with_logging", {})
            elicited = await client.call_tool("test_elicitation", {"message": "Proceed?"})
            sampled = await client.call_tool("test_sampling", {"prompt": "Say ok"})
        events = [e async for e in executor.ledger.read()]
    assert progress == [0, 50, 100]
    assert stepped.content[0].text != "None"  # type: ignore[union-attr]  # a token was sent
    assert logged == ["Tool execution started", "Tool processing data", "Tool execution completed"]
    assert asked == ["Proceed?", "Say ok"]
    assert elicited.content[0].text == (  # type: ignore[union-attr]
        'User response: action=accept, content={"response":"yes"}'
    )
    assert sampled.content[0].text == "LLM response: ok"  # type: ignore[union-attr]
    # Each question and its answer is an event of its own call; the results hold none.
    exchanges = [e for e in events if isinstance(e, CallExchanged)]
    assert [(e.tool, e.method, e.error) for e in exchanges] == [
        ("test_elicitation", "elicitation/create", ""),
        ("test_sampling", "sampling/createMessage", ""),
    ]
    assert exchanges[0].request["message"] == "Proceed?"
    assert exchanges[0].response == {"action": "accept", "content": {"response": "yes"}}
    assert exchanges[1].response["content"] == {"type": "text", "text": "ok"}
    results = [e.result for e in events if e.type == "call.succeeded"]
    assert all("io.agent-adapter/exchanges" not in r for r in results)


async def test_an_elicitation_mid_call_is_recorded_in_order_and_the_pinned_call_replays(
    node: Path, tmp_path: Path
) -> None:
    """call.started, call.exchanged, call.succeeded; audit clean; the repeat asks nobody."""
    answers = Answers(types.ElicitResult(action="accept", content={"response": "yes"}))
    db = tmp_path / "ledger.db"
    args = {"message": "Ship it?"}
    async with ts_gateway(tmp_path, db=db) as (server, executor, log):
        async with Client(server, mode="legacy", elicitation_callback=answers) as client:
            first = await client.call_tool("test_elicitation", args, meta=pinned("ship"))
    async with ts_gateway(tmp_path, db=db) as (server, executor, log):
        async with Client(server, mode="legacy", elicitation_callback=answers) as client:
            again = await client.call_tool("test_elicitation", args, meta=pinned("ship"))
        audit = await checked_audit(executor.ledger)
    assert first.model_dump() == again.model_dump()
    assert first.content[0].text == (  # type: ignore[union-attr]
        'User response: action=accept, content={"response":"yes"}'
    )
    assert [p.message for p in answers.asked] == ["Ship it?"]  # asked once, by the first
    assert log.read_text().splitlines() == ["test_elicitation"]  # and ran once
    record = audit.call("run-1", "call-ship")
    assert [e.type for e in record.events] == [
        "call.requested",
        "call.validated",
        "call.started",
        "call.exchanged",
        "call.succeeded",
        "call.replayed",
    ]
    (exchange,) = record.exchanges
    assert (exchange.method, exchange.response, exchange.error, exchange.redacted) == (
        "elicitation/create",
        {"action": "accept", "content": {"response": "yes"}},
        "",
        False,
    )
    assert exchange.request["message"] == "Ship it?"
    assert record.outcome == "call.succeeded"


@contextlib.asynccontextmanager
async def both(
    tmp_path: Path, argv: list[str], **callbacks: Any
) -> AsyncIterator[tuple[Client, Client]]:
    """The same client options on the server direct and through `mcp serve` over stdio."""
    direct = StdioServerParameters(command=argv[0], args=argv[1:])
    gateway = StdioServerParameters(
        command=CLI[0],
        args=[*CLI[1:], "mcp", "serve", "--db", str(tmp_path / "ledger.db"), "--upstream",
              " ".join(argv)],
        env=env(tmp_path / "ran.log"),
        cwd=HERE,
    )  # fmt: skip
    async with (
        Client(direct, mode="legacy", **callbacks) as a,
        Client(gateway, mode="legacy", **callbacks) as b,
    ):
        yield a, b


def listing(tools: list[types.Tool]) -> list[dict[str, Any]]:
    return [t.model_dump(exclude={"execution"}) for t in tools]


async def test_server_everything_behaves_through_the_proxy_as_direct(
    node: Path, tmp_path: Path
) -> None:
    """Listing, content types, a tiny image, progress and elicitation: the same."""

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async def sample(ctx: Any, params: Any) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="ok"), model="m"
        )

    calls: list[tuple[str, dict[str, Any]]] = [
        ("echo", {"message": "hi"}),
        ("get-tiny-image", {}),
        ("get-annotated-message", {"messageType": "success", "includeImage": True}),
        ("get-resource-links", {"count": 2}),
        ("get-structured-content", {"location": "New York"}),
        ("trigger-elicitation-request", {}),
        ("trigger-sampling-request", {"prompt": "Say ok", "maxTokens": 5}),
    ]
    seen: dict[str, list[float]] = {"direct": [], "proxied": []}
    # Both capabilities declared: server-everything lists a tool that needs sampling only
    # to a client that declared it, and the gateway declares to its upstream what its
    # client declared (an upstream connection of its own for that set).
    argv = [str(node), str(EVERYTHING), "stdio"]
    callbacks = {"elicitation_callback": elicit, "sampling_callback": sample}
    async with both(tmp_path, argv, **callbacks) as (direct, proxied):
        assert listing((await proxied.list_tools()).tools) == listing(
            (await direct.list_tools()).tools
        )
        for name, args in calls:
            a = await direct.call_tool(name, args)
            b = await proxied.call_tool(name, args)
            assert b.model_dump() == a.model_dump(), name
        for side, client in (("direct", direct), ("proxied", proxied)):

            async def seen_progress(
                p: float, t: float | None, m: str | None, s: str = side
            ) -> None:
                seen[s].append(p)

            await client.call_tool(
                "trigger-long-running-operation",
                {"duration": 0.3, "steps": 3},
                progress_callback=seen_progress,
            )
        tiny = await proxied.call_tool("get-tiny-image", {})
    assert [b.type for b in tiny.content] == ["text", "image", "text"]
    assert seen["proxied"] == seen["direct"] == [1, 2, 3]


async def test_server_filesystem_behaves_through_the_proxy_as_direct(
    node: Path, tmp_path: Path
) -> None:
    """Listing, a read and a directory listing: the same."""
    root = tmp_path / "files"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    async with both(tmp_path, [str(node), str(FILESYSTEM), str(root)]) as (direct, proxied):
        assert listing((await proxied.list_tools()).tools) == listing(
            (await direct.list_tools()).tools
        )
        for name, args in [
            ("read_text_file", {"path": str(root / "a.txt")}),
            ("list_directory", {"path": str(root)}),
        ]:
            a = await direct.call_tool(name, args)
            b = await proxied.call_tool(name, args)
            assert b.model_dump() == a.model_dump(), name
            assert not b.is_error


def test_without_node_the_tests_skip_and_fail_when_required(tmp_path: Path) -> None:
    """The required-skip rule: the same check skips, or fails under REQUIRE_NODE=1."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import test_mcp_node as t\n"
        "t.NODE = t.NPM / 'missing-node'\n"
        "def test_probe():\n"
        "    t._node()\n"
    )
    results = {}
    for required in ("", "1"):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=HERE,
            env={**os.environ, REQUIRE_ENV: required, "PYTHONPATH": os.pathsep.join(
                [str(HERE), os.environ.get("PYTHONPATH", "")])},
        )  # fmt: skip
        results[required] = (done.returncode, done.stdout)
    assert results[""][0] == 0 and "1 skipped" in results[""][1]
    assert results["1"][0] == 1 and f"{REQUIRE_ENV}=1 but Node is unavailable" in results["1"][1]


async def test_a_question_is_never_shown_to_another_connections_person(
    node: Path, tmp_path: Path
) -> None:
    """Calls of two clients wait on one upstream: its next question is refused, not guessed."""
    a_asked, release = asyncio.Event(), asyncio.Event()
    b_asked: list[str] = []

    async def elicit_a(ctx: Any, params: Any) -> types.ElicitResult:
        a_asked.set()
        await release.wait()
        return types.ElicitResult(action="accept", content={"response": "a"})

    async def elicit_b(ctx: Any, params: Any) -> types.ElicitResult:
        b_asked.append(params.message)
        return types.ElicitResult(action="accept", content={"response": "b"})

    async with ts_gateway(tmp_path) as (server, _, log):
        async with (
            Client(server, mode="legacy", elicitation_callback=elicit_a) as a,
            Client(server, mode="legacy", elicitation_callback=elicit_b) as b,
        ):
            first = asyncio.ensure_future(a.call_tool("test_elicitation", {"message": "A?"}))
            await a_asked.wait()
            second = await b.call_tool("test_elicitation", {"message": "B?"})
            release.set()
            answered = await first
    assert b_asked == []
    assert ours(second.meta) == {META_KIND: "tool-failed"}
    assert answered.content[0].text == (  # type: ignore[union-attr]
        'User response: action=accept, content={"response":"a"}'
    )
    assert log.read_text().splitlines() == ["test_elicitation", "test_elicitation"]


async def answer_sampling(ctx: Any, params: Any) -> types.CreateMessageResult:
    """A client's model, answering "pong" to whatever the upstream samples."""
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="pong"), model="m"
    )


async def what_each_client_sees(plain: Client, sampling: Client) -> dict[str, Any]:
    """Listing, the sampling-only call and the upstream's record of declared capabilities."""
    seen: dict[str, Any] = {}
    for side, client in (("plain", plain), ("sampling", sampling)):
        names = {t.name for t in (await client.list_tools()).tools}
        seen[f"{side} lists"] = "sampling_only" in names
        declared = await client.call_tool("declared_capabilities", {})
        seen[f"{side} declared"] = sorted(json.loads(declared.content[0].text))  # type: ignore[union-attr]
    with pytest.raises(MCPError, match="Unknown tool: sampling_only"):
        await plain.call_tool("sampling_only", {})
    sampled = await sampling.call_tool("sampling_only", {})
    seen["sampled"] = sampled.content[0].text  # type: ignore[union-attr]
    return seen


async def test_a_tool_listed_only_to_a_clients_capabilities_is_called_before_any_listing(
    node: Path, tmp_path: Path
) -> None:
    """The first request of a client with sampling is the call: its connection opens
    (registering the tool) before the tool is looked up, so it runs, not "Unknown tool"."""
    async with ts_gateway(tmp_path) as (server, executor, log):
        async with Client(server, mode="legacy", sampling_callback=answer_sampling) as client:
            sampled = await client.call_tool("sampling_only", {})
        audit = await checked_audit(executor.ledger)
    assert sampled.content[0].text == "sampled: pong"  # type: ignore[union-attr]
    assert log.read_text().splitlines() == ["sampling_only"]
    assert [call.outcome for call in audit.calls.values()] == ["call.succeeded"]


#: A client without sampling does not see it; with it, its own model answers.
SEEN = {
    "plain lists": False,
    "plain declared": [],
    "sampling lists": True,
    "sampling declared": ["sampling"],
    "sampled": "sampled: pong",
}


def gateway_over_stdio(tmp_path: Path, name: str) -> StdioServerParameters:
    """`mcp serve` over stdio in front of the TS upstream (its own ledger and log)."""
    upstream = f"{NODE} {TS_UPSTREAM} {tmp_path / 'upstream.log'}"
    return StdioServerParameters(
        command=CLI[0],
        args=[*CLI[1:], "mcp", "serve", "--db", str(tmp_path / f"{name}.db"),
              "--upstream", upstream],
        env=env(tmp_path / "ran.log"),
        cwd=HERE,
    )  # fmt: skip


async def test_stdio_gateways_declare_to_the_upstream_only_what_their_client_declared(
    node: Path, tmp_path: Path
) -> None:
    """Two stdio gateways, one client each: the upstream lists and asks per client."""
    async with (
        Client(gateway_over_stdio(tmp_path, "plain"), mode="legacy") as plain,
        Client(
            gateway_over_stdio(tmp_path, "sampling"),
            mode="legacy",
            sampling_callback=answer_sampling,
        ) as sampling,
    ):
        seen = await what_each_client_sees(plain, sampling)
    assert seen == SEEN
    # The unknown tool was never sent, nor recorded.
    events, audit = await audit_of(tmp_path / "plain.db")
    assert [e.tool for e in events if e.type == "call.started"] == ["declared_capabilities"]
    assert audit.problems() == []
    ran = (tmp_path / "upstream.log").read_text().splitlines()
    assert sorted(ran) == ["declared_capabilities"] * 2 + ["sampling_only"]


async def test_an_http_gateway_serves_two_clients_of_different_capabilities_at_once(
    node: Path, tmp_path: Path
) -> None:
    """One HTTP gateway, both clients connected: an upstream connection per set."""
    db = tmp_path / "ledger.db"
    proc, url = await start_http(
        "--db", str(db), "--upstream", f"{node} {TS_UPSTREAM} {tmp_path / 'upstream.log'}",
        log=tmp_path / "ran.log",
    )  # fmt: skip
    try:
        async with (
            Client(url, mode="legacy") as plain,
            Client(url, mode="legacy", sampling_callback=answer_sampling) as sampling,
        ):
            seen = await what_each_client_sees(plain, sampling)
    finally:
        proc.terminate()
        await proc.wait()
    assert seen == SEEN
    events, audit = await audit_of(db)
    assert sorted(e.tool for e in events if e.type == "call.succeeded") == [
        "declared_capabilities",
        "declared_capabilities",
        "sampling_only",
    ]
    assert audit.problems() == []


async def test_a_log_line_after_the_call_reaches_the_one_client(node: Path, tmp_path: Path) -> None:
    """No call waits on the upstream: its log line goes to the one client it serves."""
    logged: list[Any] = []
    arrived = asyncio.Event()

    async def log_line(params: types.LoggingMessageNotificationParams) -> None:
        logged.append((params.level, params.data))
        arrived.set()

    async with ts_gateway(tmp_path) as (server, _, _):
        async with Client(server, mode="legacy", logging_callback=log_line) as client:
            go = tmp_path / "go"
            answered = await client.call_tool("log_later", {"when": str(go)})
            go.touch()  # the call is over: the upstream logs now
            async with asyncio.timeout(60):  # a bound on a hang, not a measured delay
                await arrived.wait()
    assert answered.content[0].text == "will log"  # type: ignore[union-attr]
    assert logged == [("warning", "after the call")]


async def test_the_clients_log_level_applies_to_what_is_relayed(node: Path, tmp_path: Path) -> None:
    """The upstream's info lines reach the client, until it sets its level to error."""
    logged: list[Any] = []

    async def log_line(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params.data)

    async with ts_gateway(tmp_path) as (server, _, _):
        async with Client(server, mode="legacy", logging_callback=log_line) as client:
            await client.call_tool("test_tool_with_logging", {})
            before = list(logged)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await client.set_logging_level("error")
            done = await client.call_tool("test_tool_with_logging", {})
    assert before == ["Tool execution started", "Tool processing data", "Tool execution completed"]
    assert done.content[0].text == "Tool with logging executed successfully"  # type: ignore[union-attr]
    assert logged == before  # the second call's info lines were not relayed


async def test_a_policy_may_name_a_tool_listed_only_to_clients_with_sampling(
    node: Path, tmp_path: Path
) -> None:
    """Found on the connection that declares sampling (opened at start for it); it stays
    hidden from a client without sampling. A name no connection lists is still refused."""
    policy = {"sampling_only": {"effect": "sample-once"}}
    async with ts_gateway(tmp_path, policy) as (server, executor, _):
        effect = executor.registry.get("sampling_only").effect
        async with Client(server, mode="legacy") as plain:
            names = {t.name for t in (await plain.list_tools()).tools}
    assert effect == "sample-once"
    assert "sampling_only" not in names and "declared_capabilities" in names
    with pytest.raises(ToolUsageError, match=r"does not have: \['sampling_onyl'\]"):
        async with ts_gateway(tmp_path, {"sampling_onyl": {"effect": "x"}}):
            pass
