"""``agent-adapter mcp serve`` as a real process: over stdio, and over streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_helpers import Answers, accept, ours

from agent_adapter.integrations.mcp import META_KIND
from agent_adapter.ledger import SQLiteLedger, replay

pytestmark = pytest.mark.usefixtures("bounded")

HERE = Path(__file__).parent
CLI = [sys.executable, "-m", "agent_adapter.cli"]
UPSTREAM = HERE / "_mcp_upstream.py"


def env(log: Path) -> dict[str, str]:
    return {**os.environ, "MCP_TEST_LOG": str(log), "NO_COLOR": "1"}


def cli(*args: str, log: Path) -> subprocess.CompletedProcess[str]:
    """Another process: the command line on the same ledger."""
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env(log),
        cwd=HERE,
    )


async def audit_of(db: Path) -> Any:
    ledger = SQLiteLedger(str(db))
    try:
        events = [e async for e in ledger.read()]
        return events, replay(events, await ledger.verify())
    finally:
        await ledger.close()


async def test_stdio_serve_with_a_pending_approval_answered_by_another_process(
    tmp_path: Path,
) -> None:
    """A client that cannot elicit gets approval-pending; `approvals approve` answers it."""
    db, log = tmp_path / "ledger.db", tmp_path / "ran.log"
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "agent_adapter.cli",
            "mcp",
            "serve",
            "--db",
            str(db),
            "--tools",
            "_mcp_tools:registry",
        ],
        env=env(log),
        cwd=str(HERE),
    )
    args = {"order_id": "A1", "amount_cents": 500}
    meta = {"io.agent-adapter/run-id": "desk-1"}
    async with Client(params, mode="legacy") as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        pending = await client.call_tool("refund", args, meta=meta)
        assert ours(pending.meta) == {META_KIND: "approval-pending"}
        request_id = (pending.structured_content or {})["request_id"]
        listed = cli("approvals", "list", "--db", str(db), "--json", log=log)
        answered = cli(
            "approvals", "approve", request_id, "--db", str(db), "--reviewer", "alice", log=log
        )
        done = await client.call_tool("refund", args, meta=meta)
        again = await client.call_tool("refund", args, meta=meta)
    assert tools == ["lookup", "refund"]
    assert pending.structured_content == {
        "error": {
            "kind": "approval-pending",
            "message": f"approval {request_id} for refund is pending",
        },
        "request_id": request_id,
    }
    assert [request["request_id"] for request in json.loads(listed.stdout)] == [request_id]
    assert answered.returncode == 0, answered.stderr
    assert done.structured_content == {"refunded": 500, "order_id": "A1"}
    # One decision authorizes one execution: the same refund again is asked for again.
    assert ours(again.meta) == {META_KIND: "approval-pending"}
    assert log.read_text() == "refund A1 500\n"
    events, audit = await audit_of(db)
    assert audit.problems() == []
    granted = [(e.reviewer, e.source) for e in events if e.type == "approval.granted"]
    assert granted == [("alice", "port")]


def write_policy(path: Path) -> Path:
    path.write_text(
        '[tools.charge]\neffect = "charge:{order_id}"\n\n'
        '[tools.delete_document]\nconfirm = true\neffect = "delete:{doc_id}"\n'
    )
    return path


async def start_http(*args: str, log: Path) -> tuple[asyncio.subprocess.Process, str]:
    """`mcp serve --http 127.0.0.1:0 ...` and the URL it announces on stderr."""
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "mcp",
        "serve",
        "--http",
        "127.0.0.1:0",
        *args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(log),
        cwd=HERE,
    )
    assert proc.stderr is not None
    async with asyncio.timeout(60):
        while True:
            line = (await proc.stderr.readline()).decode()
            if not line:
                raise AssertionError("mcp serve exited before serving")
            if "serving MCP on " in line:
                return proc, line.split("serving MCP on ", 1)[1].strip()


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_http_serve_proxies_an_upstream_under_a_policy_file(
    tmp_path: Path, mode: str
) -> None:
    """Streamable HTTP on a free loopback port, an upstream process, the policy's keys."""
    db, log = tmp_path / "ledger.db", tmp_path / "ran.log"
    policy = write_policy(tmp_path / "policy.toml")
    upstream = f"{sys.executable} {UPSTREAM} {tmp_path / 'upstream.log'}"
    proc, url = await start_http(
        "--db",
        str(db),
        "--upstream",
        upstream,
        "--prefix",
        "docs.",
        "--policy",
        str(policy),
        log=log,
    )
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
        answers = Answers(accept())
        async with Client(url, mode=mode, elicitation_callback=answers) as client:
            found = await client.call_tool("docs.search_documents", {"query": "q"})
            deleted = await client.call_tool("docs.delete_document", {"doc_id": "d1"})
            charged = await client.call_tool("docs.charge", {"order_id": "A", "amount_cents": 1})
            again = await client.call_tool("docs.charge", {"order_id": "A", "amount_cents": 1})
    finally:
        proc.terminate()
        await proc.wait()
    assert found.structured_content == {"hits": ["q-1", "q-2"]}
    assert deleted.structured_content == {"result": "deleted d1"}
    # The upstream's own isError result (recorded as tool-failed), then ours.
    assert charged.is_error and ours(charged.meta) == {}
    assert charged.content[0].text == "Error executing tool charge: card declined"  # type: ignore[union-attr]
    assert ours(again.meta) == {META_KIND: "ambiguous-effect"}
    assert [a.message for a in answers.asked] == [
        'Approve docs.delete_document with {"doc_id":"d1"}?'
    ]
    assert (tmp_path / "upstream.log").read_text().splitlines() == [
        'search_documents {"query": "q"}',
        'delete_document {"doc_id": "d1"}',
        'charge {"amount_cents": 1, "order_id": "A"}',
    ]
    events, audit = await audit_of(db)
    assert [(p.kind, p.key) for p in audit.problems()] == [("ambiguous", "charge:A")]
    assert [e.key for e in events if e.type == "effect.claimed"] == ["delete:d1", "charge:A"]


BAD = {
    "policy not toml": (["--policy", "{p}/bad.toml"], "not valid TOML"),
    "policy unknown field": (
        ["--policy", "{p}/field.toml"],
        "Object contains unknown field `confrim`",
    ),
    "policy unknown tool": (
        ["--policy", "{p}/tool.toml"],
        "the policy names tools the upstream does not have: ['nope']",
    ),
    "collision": ([], ""),
    "tools not a registry": (
        ["--tools", "_mcp_tools:refund"],
        "refund is a ToolSpec, not a Registry",
    ),
    "http": (
        ["--tools", "_mcp_tools:registry", "--http", "127.0.0.1:x"],
        "--http 127.0.0.1:x: expected HOST:PORT",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_setup_is_one_line_and_no_traceback(tmp_path: Path, name: str) -> None:
    """Refused at start with one line on stderr, exit status 1."""
    (tmp_path / "bad.toml").write_text("[tools\n")
    (tmp_path / "field.toml").write_text("[tools.charge]\nconfrim = true\n")
    (tmp_path / "tool.toml").write_text("[tools.nope]\nconfirm = true\n")
    upstream = f"{sys.executable} {UPSTREAM} {tmp_path / 'up.log'}"
    extra, message = BAD[name]
    argv = [a.format(p=tmp_path, up=upstream) for a in extra]
    if "--upstream" not in argv and "--tools" not in argv:
        argv += ["--upstream", upstream]
    if name == "collision":
        # A registry tool named like an upstream tool, no prefix: refused, naming both.
        (tmp_path / "tools_collide.py").write_text(
            "from agent_adapter import Registry\nregistry = Registry()\n"
            "@registry.tool\ndef search_documents(query: str) -> str:\n    return query\n"
        )
        argv = ["--tools", "tools_collide:registry", "--upstream", upstream]
        message = "upstream tool 'search_documents' (exported as 'search_documents') collides"
    result = subprocess.run(
        [*CLI, "mcp", "serve", "--db", str(tmp_path / "l.db"), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env(tmp_path / "log"),
        cwd=tmp_path if name == "collision" else HERE,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("agent-adapter:")]
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stderr


async def test_a_gateway_in_front_of_a_gateway_over_upstream_url(tmp_path: Path) -> None:
    """stdio `mcp serve --upstream-url` → HTTP `mcp serve --tools`: the ids travel, runs once."""
    log = tmp_path / "ran.log"
    inner, url = await start_http(
        "--db", str(tmp_path / "inner.db"), "--tools", "_mcp_tools:registry", log=log
    )
    try:
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "agent_adapter.cli",
                "mcp",
                "serve",
                "--db",
                str(tmp_path / "outer.db"),
                "--upstream-url",
                url,
                "--prefix",
                "shop.",
            ],
            env=env(log),
            cwd=str(HERE),
        )
        async with Client(params, mode="legacy") as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            found = await client.call_tool("shop.lookup", {"order_id": "A1"})
    finally:
        inner.terminate()
        await inner.wait()
    assert tools == ["shop.lookup", "shop.refund"]
    assert found.structured_content == {"result": "order A1: shipped"}
    outer_events, outer = await audit_of(tmp_path / "outer.db")
    inner_events, inner_audit = await audit_of(tmp_path / "inner.db")
    assert (outer.problems(), inner_audit.problems()) == ([], [])
    # The inner gateway records the call under the outer one's ids.
    ids = {(e.run_id, e.call_id) for e in outer_events if e.type == "call.requested"}
    assert {(e.run_id, e.call_id) for e in inner_events if e.type == "call.requested"} == ids


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        (":8765", ("127.0.0.1", 8765)),
        ("8765", ("127.0.0.1", 8765)),
        ("[::1]:0", ("::1", 0)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
    ],
)
def test_http_binds_loopback_unless_told_otherwise(value: str, parsed: tuple[str, int]) -> None:
    """--http without a host is 127.0.0.1; an explicit host is used as given."""
    from agent_adapter.cli._mcp import parse_http

    assert parse_http(value) == parsed


def test_a_policy_without_an_upstream_is_refused(tmp_path: Path) -> None:
    """The policy names upstream tools: without an upstream it is a one-line error."""
    policy = write_policy(tmp_path / "policy.toml")
    result = cli(
        "mcp",
        "serve",
        "--db",
        str(tmp_path / "l.db"),
        "--tools",
        "_mcp_tools:registry",
        "--policy",
        str(policy),
        log=tmp_path / "log",
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "agent-adapter: error: --policy names upstream tools: pass --upstream or "
        "--upstream-url too\n"
    )
    assert not (tmp_path / "l.db").exists()


async def test_no_elicit_leaves_the_approval_out_of_band(tmp_path: Path) -> None:
    """--no-elicit: a client that could answer is never asked; the request is pending."""
    db, log = tmp_path / "ledger.db", tmp_path / "ran.log"
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "agent_adapter.cli",
            "mcp",
            "serve",
            "--db",
            str(db),
            "--tools",
            "_mcp_tools:registry",
            "--no-elicit",
        ],
        env=env(log),
        cwd=str(HERE),
    )
    answers = Answers(accept())
    async with Client(params, mode="2026-07-28", elicitation_callback=answers) as client:
        pending = await client.call_tool("refund", {"order_id": "A1", "amount_cents": 5})
    assert ours(pending.meta) == {META_KIND: "approval-pending"}
    assert answers.asked == []
    assert not log.exists()


def test_an_upstream_that_never_answers_initialize_is_a_one_line_error_in_time(
    tmp_path: Path,
) -> None:
    """--upstream-open-timeout bounds the start's opening: one line naming the upstream
    and the cause, no traceback; a value that is not a positive number is refused."""
    gate = tmp_path / "stuck"
    gate.touch()
    command = [sys.executable, str(HERE / "_mcp_stuck_upstream.py"), str(gate), os.devnull]
    base = ["mcp", "serve", "--db", str(tmp_path / "l.db"), "--upstream", shlex.join(command)]
    result = cli(*base, "--upstream-open-timeout", "0.5", log=tmp_path / "log")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"agent-adapter: error: cannot open the upstream {shlex.join(command)} for clients "
        "that declared none: no answer to initialize and tools/list within 0.5 s; nothing "
        "was sent, a later request tries again\n"
    )
    refused = cli(*base, "--upstream-open-timeout", "0", log=tmp_path / "log")
    assert refused.returncode == 2  # a usage error, like every other bad number
    assert refused.stderr.splitlines()[-1] == (
        "agent-adapter mcp serve: error: argument --upstream-open-timeout: 0 is not an "
        "interval: give a positive number of seconds"
    )
