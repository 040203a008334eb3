"""A proxied call through the MCP gateway beside the same call made straight to the upstream.

Every variant awaits ``client.call_tool("echo", {"text": "hi"})`` on an entered
``mcp.Client`` (legacy era) to the same trivial upstream tool:

In-process (``Client(server)``: no transport, so the gateway's share is the largest):

- ``direct: Client(upstream)`` (baseline): the upstream ``MCPServer`` alone.
- ``gateway, MemoryLedger``: ``Client(mcp_server(...))`` whose tool is ``proxy``'s
  schema tool calling the same upstream through its own in-process client.
- ``run_spec(proxied tool) alone, MemoryLedger``: the executor calling the upstream,
  without the gateway's own server hop in front (the split of the memory figure).
- ``gateway, SQLiteLedger (FULL)``: the same on an SQLite file (``synchronous="FULL"``).
- ``SQLite: one append (one commit)``: one event appended to another SQLite file: the
  cost of one durable commit, measured beside the gateway (the SQLite target).
- ``pass-through: record + rebuild the result``: what transparency costs per call: the
  upstream's ``CallToolResult`` dumped as the recorded value, and rebuilt from it.

Over stdio (every hop a real process and pipe):

- ``direct: stdio upstream`` (baseline): a client to the upstream process.
- ``gateway stdio, MemoryLedger``: a client to a gateway process (``_mcp_servers.py
  gateway``) that proxies an upstream process of its own.
- ``gateway stdio, its own tool``: the same gateway process answering ``own_echo``, a
  registry tool of its own: the client-to-gateway hop and the engine, no upstream hop.
- ``gateway stdio, SQLiteLedger``: the same through ``agent-adapter mcp serve --db``.

All variants of a table run on their own entered clients, interleaved block by block
(``abench``), so load moves them together; the stdio proxy's added time splits into the
gateway's own hop (``its own tool`` minus ``direct``) and the upstream hop behind it
(``MemoryLedger`` minus ``its own tool``).

Targets (issue 12): the gateway adds at most 15% to an in-process proxied call with a
memory ledger, and at most one ledger commit's time with SQLite.

Run: ``python benchmarks/bench_mcp.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import mcp_types as types
from _harness import (
    Variant,
    abench,
    fmt_ns,
    fmt_pct,
    header,
    markdown_table,
    parse_args,
    results_table,
    summarize,
)
from _mcp_servers import upstream
from mcp import Client, StdioServerParameters

from agent_adapter import CallContext, Executor, Registry
from agent_adapter.integrations.mcp import mcp_server, proxy
from agent_adapter.ledger import CallRequested, MemoryLedger, SQLiteLedger

HERE = Path(__file__).resolve().parent
ARGS = {"text": "hi"}
PACKAGES = ("agent-adapter", "mcp", "msgspec")


async def _gateway(
    stack: contextlib.AsyncExitStack, target: Any, ledger: Any
) -> tuple[Client, Executor]:
    registry = Registry()
    up = await stack.enter_async_context(Client(target, mode="legacy"))
    await proxy(registry, up)
    executor = Executor(registry, ledger=ledger)
    stack.push_async_callback(executor.close)
    server = mcp_server(registry, executor=executor)
    return await stack.enter_async_context(Client(server, mode="legacy")), executor


def _op(client: Client, tool: str = "echo") -> Any:
    async def call() -> Any:
        result = await client.call_tool(tool, ARGS)
        assert not result.is_error, result
        return result

    return call


async def in_process(args: Any, tmp: Path) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        direct = await stack.enter_async_context(Client(upstream(), mode="legacy"))
        memory, executor = await _gateway(stack, upstream(), MemoryLedger())
        sqlite, _ = await _gateway(stack, upstream(), SQLiteLedger(str(tmp / "gateway.db")))
        spec = executor.registry.get("echo")
        commits = SQLiteLedger(str(tmp / "commits.db"))
        stack.push_async_callback(commits.close)
        counter = iter(range(10**9))

        async def one_commit() -> Any:
            n = next(counter)
            return await commits.append(
                CallRequested(ts=0.0, run_id="bench", call_id=f"c{n}", tool="echo", args=ARGS)
            )

        async def engine_only() -> Any:
            n = next(counter)
            return await executor.run_spec(spec, ARGS, CallContext(run_id=f"r{n}", call_id=f"c{n}"))

        sent = await direct.call_tool("echo", ARGS)

        async def pass_through() -> Any:
            # What the proxy does per call (``_proxy._value``, ``proxied_result``).
            value = sent.model_dump(mode="json", by_alias=True, exclude_none=True)
            return types.CallToolResult.model_validate(value)

        return await abench(
            [
                Variant("direct: Client(upstream)", _op(direct)),
                Variant("gateway, MemoryLedger", _op(memory)),
                Variant("run_spec(proxied tool) alone, MemoryLedger", engine_only),
                Variant("gateway, SQLiteLedger (FULL)", _op(sqlite)),
                Variant("SQLite: one append (one commit)", one_commit),
                Variant("pass-through: record + rebuild the result", pass_through),
            ],
            baseline="direct: Client(upstream)",
            rounds=args.rounds,
            block_ms=args.block_ms,
        )


async def over_stdio(args: Any, tmp: Path) -> dict[str, Any]:
    upstream_cmd = [sys.executable, str(HERE / "_mcp_servers.py"), "upstream"]
    direct_params = StdioServerParameters(command=upstream_cmd[0], args=upstream_cmd[1:])
    # The gateways get this environment (an MCP client passes a server only a few
    # variables): with PYTHONPATH they import the same agent_adapter as this process.
    memory_params = StdioServerParameters(
        command=sys.executable,
        args=[str(HERE / "_mcp_servers.py"), "gateway", *upstream_cmd],
        env=dict(os.environ),
    )
    sqlite_params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "agent_adapter.cli",
            "mcp",
            "serve",
            "--db",
            str(tmp / "serve.db"),
            "--upstream",
            " ".join(upstream_cmd),
        ],
        env=dict(os.environ),
    )
    async with contextlib.AsyncExitStack() as stack:
        direct = await stack.enter_async_context(Client(direct_params, mode="legacy"))
        memory = await stack.enter_async_context(Client(memory_params, mode="legacy"))
        sqlite = await stack.enter_async_context(Client(sqlite_params, mode="legacy"))
        return await abench(
            [
                Variant("direct: stdio upstream", _op(direct)),
                Variant("gateway stdio, MemoryLedger", _op(memory)),
                Variant("gateway stdio, its own tool", _op(memory, "own_echo")),
                Variant("gateway stdio, SQLiteLedger (agent-adapter mcp serve)", _op(sqlite)),
            ],
            baseline="direct: stdio upstream",
            rounds=args.rounds,
            block_ms=args.block_ms,
        )


def main() -> None:
    args = parse_args(__doc__ or "")
    with tempfile.TemporaryDirectory() as tmp:
        inproc = asyncio.run(in_process(args, Path(tmp)))
        stdio = asyncio.run(over_stdio(args, Path(tmp)))
    print(header(PACKAGES))
    print(results_table(inproc, title="MCP gateway, in-process: a proxied call vs the upstream"))
    direct = inproc["direct: Client(upstream)"].samples
    rows = []
    for name, budget in (
        ("gateway, MemoryLedger", "<= 15% of direct"),
        ("gateway, SQLiteLedger (FULL)", "<= one commit"),
    ):
        added, spread = summarize(
            [g - d for g, d in zip(inproc[name].samples, direct, strict=True)]
        )
        rows.append((name, fmt_ns(added), fmt_pct(spread), budget))
    commit = inproc["SQLite: one append (one commit)"].median_ns
    print(markdown_table(["added per call (paired)", "ns", "spread", "target"], rows))
    print(f"\nOne SQLite commit, measured beside it: {fmt_ns(commit)} ns.\n")
    print(results_table(stdio, title="MCP gateway over stdio: a proxied call vs the upstream"))
    base = stdio["direct: stdio upstream"].samples
    own = stdio["gateway stdio, its own tool"].samples
    proxied = stdio["gateway stdio, MemoryLedger"].samples
    split = []
    for name, pairs in (
        ("proxied call, added (MemoryLedger - direct)", zip(proxied, base, strict=True)),
        ("the gateway's own hop (its own tool - direct)", zip(own, base, strict=True)),
        ("the upstream hop behind it (MemoryLedger - own tool)", zip(proxied, own, strict=True)),
    ):
        added, spread = summarize([a - b for a, b in pairs])
        split.append((name, fmt_ns(added), fmt_pct(spread)))
    print(markdown_table(["over stdio, paired per round", "ns", "spread"], split))
    print(f"{args.rounds} rounds, median; spread = inter-quartile range / median.")


if __name__ == "__main__":
    main()
