"""What `agent-adapter mcp serve` answers to bytes the SDK cannot read, over the real wire.

Raw lines written to a real process's stdin (and raw bodies POSTed to the real HTTP
server): every request gets its JSON-RPC answer within a deadline, never silence.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_mcp_cli import env
from test_mcp_cli import start_http as start_cli_http

from agent_adapter.ledger import SQLiteLedger

pytestmark = pytest.mark.usefixtures("bounded")

HERE = Path(__file__).parent
CLI = [sys.executable, "-m", "agent_adapter.cli"]
#: The longest one answer may take: a server that drops a line fails here, not hangs.
REPLY_S = 15.0

DEEP = "[" * 300 + "]" * 300
DEEPER = "[" * 100_000 + "]" * 100_000

#: (raw line, the answer's id, its error code) for lines the SDK's parser refuses.
UNREADABLE: list[tuple[str, Any, int]] = [
    ("{not json", None, -32700),
    ('{"jsonrpc":"2.0","id":"p","method":"tools/list","params":[1]}', "p", -32600),
    ('{"jsonrpc":"2.0","id":2,"method":5}', 2, -32600),
    ('{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"x":"\\ud800"}}', 3, -32600),
    ('{"jsonrpc":"2.0","id":4,"method":"ping","params":{"x":' + DEEP + "}}", 4, -32600),
    ('{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":' + DEEPER + "}}", None, -32700),
    ('{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', None, -32600),
    ('{"jsonrpc":"2.0","method":7}', None, -32600),
    ("[]", None, -32600),
    ("5", None, -32600),
    # An object that is not JSON-RPC: -32600 (the SDK's HTTP transport said 400, -32602
    # and a pydantic dump of every branch of its message union).
    ('{"foo":1}', None, -32600),
    ('{"jsonrpc":"2.0","id":9}', None, -32600),
]


class Stdio:
    """A raw line-oriented client of a process: one line out, one line back, in time."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def ask(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()
        async with asyncio.timeout(REPLY_S):
            answer = await self.proc.stdout.readline()
        assert answer, "the server closed stdout"
        decoded: dict[str, Any] = json.loads(answer)
        return decoded

    async def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()


async def start_stdio(db: Path, log: Path, capabilities: dict[str, Any] | None = None) -> Stdio:
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "mcp",
        "serve",
        "--db",
        str(db),
        "--tools",
        "_mcp_tools:registry",
        "--run-id",
        "wire",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(log),
        cwd=HERE,
        limit=1 << 20,
    )
    client = Stdio(proc)
    hello = await client.ask(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": capabilities or {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
    )
    assert "result" in hello
    await client.tell('{"jsonrpc":"2.0","method":"notifications/initialized"}')
    return client


def call(call_id: Any, arguments: str, name: str = "lookup") -> str:
    return (
        f'{{"jsonrpc":"2.0","id":{json.dumps(call_id)},"method":"tools/call",'
        f'"params":{{"name":"{name}","arguments":{arguments}}}}}'
    )


def error_of(answer: dict[str, Any]) -> tuple[Any, int]:
    return answer["id"], answer["error"]["code"]


def kind_of(answer: dict[str, Any]) -> tuple[Any, bool, str]:
    result = answer["result"]
    return answer["id"], result["isError"], result["structuredContent"]["error"]["kind"]


async def ledger_calls(db: Path) -> dict[str, list[str]]:
    ledger = SQLiteLedger(str(db))
    try:
        out: dict[str, list[str]] = {}
        async for event in ledger.read():
            if event.call_id:
                out.setdefault(event.call_id, []).append(event.type)
        return out
    finally:
        await ledger.close()


async def test_stdio_answers_every_line_the_sdk_cannot_read(tmp_path: Path) -> None:
    """Invalid JSON is -32700 with id null; a readable but invalid request is -32600 with
    its id (null when the id itself is unreadable); the server serves on afterwards,
    with no traceback on stderr."""
    db, log = tmp_path / "ledger.db", tmp_path / "ran.log"
    client = await start_stdio(db, log)
    try:
        answers = [error_of(await client.ask(line)) for line, _, _ in UNREADABLE]
        after = await client.ask(call(9, '{"order_id":"A1"}'))
    finally:
        assert client.proc.stdin is not None
        client.proc.stdin.close()
        async with asyncio.timeout(30):
            _, stderr = await client.proc.communicate()
    assert answers == [(rid, code) for _, rid, code in UNREADABLE]
    assert after["result"]["structuredContent"] == {"result": "order A1: shipped"}
    assert client.proc.returncode == 0
    assert "Traceback" not in stderr.decode()


async def test_stdio_arguments_with_a_lone_surrogate_are_recorded_invalid(
    tmp_path: Path,
) -> None:
    """A tools/call whose arguments hold a lone surrogate (in an object or in a list) is
    the model's invalid arguments: an isError tool-args-invalid result, recorded as
    call.invalid, never a protocol error."""
    db, log = tmp_path / "ledger.db", tmp_path / "ran.log"
    client = await start_stdio(db, log)
    meta = '"_meta":{"io.agent-adapter/call-id":"%s"}'
    try:
        answers = [
            kind_of(await client.ask(line))
            for line in [
                call(1, '{"order_id":"\\ud800"}').replace(
                    '"params":{', '"params":{' + meta % "c-object" + ","
                ),
                call(2, '["\\ud800"]').replace('"params":{', '"params":{' + meta % "c-list" + ","),
                call(3, '{"order_id":' + DEEP + "}").replace(
                    '"params":{', '"params":{' + meta % "c-deep" + ","
                ),
            ]
        ]
    finally:
        assert client.proc.stdin is not None
        client.proc.stdin.close()
        async with asyncio.timeout(30):
            _, stderr = await client.proc.communicate()
    assert answers == [
        (1, True, "tool-args-invalid"),
        (2, True, "tool-args-invalid"),
        (3, True, "tool-args-invalid"),
    ]
    assert await ledger_calls(db) == {
        "c-object": ["call.requested", "call.invalid"],
        "c-list": ["call.requested", "call.invalid"],
        "c-deep": ["call.requested", "call.invalid"],
    }
    assert "Traceback" not in stderr.decode()
    assert not log.exists()


async def start_http(db: Path, log: Path) -> tuple[asyncio.subprocess.Process, int]:
    """`mcp serve --http 127.0.0.1:0` on the test registry, and the port it announces."""
    proc, url = await start_cli_http("--db", str(db), "--tools", "_mcp_tools:registry", log=log)
    return proc, int(url.rsplit(":", 1)[1].split("/")[0])


def post(port: int, body: str, headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    """One raw POST to /mcp; the JSON-RPC message answered (from JSON or from SSE)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REPLY_S)
    try:
        connection.request(
            "POST",
            "/mcp",
            body=body.encode(),
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **headers,
            },
        )
        response = connection.getresponse()
        text = response.read().decode()
        found = dict(response.getheaders())
    finally:
        connection.close()
    if not text:
        return response.status, {k.lower(): v for k, v in found.items()}, None
    if "text/event-stream" in found.get("content-type", ""):
        data = [line[5:] for line in text.splitlines() if line.startswith("data:")]
        text = next(d for d in data if d.strip())
    return response.status, {k.lower(): v for k, v in found.items()}, json.loads(text)


MODERN_META = (
    '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    '"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},'
    '"io.modelcontextprotocol/clientCapabilities":{},'
    '"io.agent-adapter/call-id":"%s"}'
)


async def test_http_answers_every_body_the_sdk_cannot_read(tmp_path: Path) -> None:
    """Over streamable HTTP the same bodies get the same answers (a 400 with -32700 or
    -32600 and the request's id), and a tools/call whose arguments hold a lone surrogate
    is recorded as call.invalid, on the handshake era and on 2026-07-28 alike."""
    db, log = tmp_path / "ledger.db", tmp_path / "ran.log"
    proc, port = await start_http(db, log)
    try:
        hello = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            }
        )
        _, headers, _ = await asyncio.to_thread(post, port, hello, {})
        session = {
            "mcp-session-id": headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        await asyncio.to_thread(
            post, port, '{"jsonrpc":"2.0","method":"notifications/initialized"}', session
        )
        answers = [
            (status, *error_of(answer))
            for status, _, answer in [
                await asyncio.to_thread(post, port, line, session) for line, _, _ in UNREADABLE
            ]
        ]
        legacy = [
            kind_of((await asyncio.to_thread(post, port, line, session))[2])
            for line in [
                call(1, '{"order_id":"\\ud800"}').replace(
                    '"params":{', '"params":{"_meta":{"io.agent-adapter/call-id":"h-obj"},'
                ),
                call(2, "[" + DEEP + "]").replace(
                    '"params":{', '"params":{"_meta":{"io.agent-adapter/call-id":"h-deep"},'
                ),
            ]
        ]
        modern = kind_of(
            (
                await asyncio.to_thread(
                    post,
                    port,
                    call(3, '{"order_id":"\\ud800"}').replace(
                        '"params":{', '"params":{' + MODERN_META % "h-modern" + ","
                    ),
                    {
                        "mcp-protocol-version": "2026-07-28",
                        "mcp-method": "tools/call",
                        "mcp-name": "lookup",
                    },
                )
            )[2]
        )
    finally:
        proc.terminate()
        async with asyncio.timeout(30):
            _, stderr = await proc.communicate()
    assert answers == [(400, rid, code) for _, rid, code in UNREADABLE]
    assert legacy == [(1, True, "tool-args-invalid"), (2, True, "tool-args-invalid")]
    assert modern == (3, True, "tool-args-invalid")
    assert await ledger_calls(db) == {
        "h-obj": ["call.requested", "call.invalid"],
        "h-deep": ["call.requested", "call.invalid"],
        "h-modern": ["call.requested", "call.invalid"],
    }
    assert "Traceback" not in stderr.decode()
    assert not log.exists()


async def test_stdio_an_unreadable_elicitation_answer_ends_the_call_denied(
    tmp_path: Path,
) -> None:
    """The client's answer to the gateway's elicitation holds a lone surrogate: the call
    waiting on it is answered (approval-denied, recorded) within the deadline, and the
    tool never runs."""
    db, log = tmp_path / "ledger.db", tmp_path / "ran.log"
    client = await start_stdio(db, log, {"elicitation": {"form": {}}})
    try:
        asked = await client.ask(
            call(1, '{"order_id":"A1","amount_cents":5}', name="refund").replace(
                '"params":{', '"params":{"_meta":{"io.agent-adapter/call-id":"c-ask"},'
            )
        )
        assert asked["method"] == "elicitation/create"
        answered = await client.ask(
            f'{{"jsonrpc":"2.0","id":{json.dumps(asked["id"])},"result":{{"action":"accept",'
            '"content":{"approve":true,"reason":"\\ud800"}}}'
        )
    finally:
        assert client.proc.stdin is not None
        client.proc.stdin.close()
        async with asyncio.timeout(30):
            _, stderr = await client.proc.communicate()
    assert kind_of(answered) == (1, True, "approval-denied")
    calls = await ledger_calls(db)
    assert calls["c-ask"][-1] == "call.denied"
    assert "Traceback" not in stderr.decode()
    assert not log.exists()
