"""A proxied call whose upstream asks one question mid-call, in both protocol eras.

In-process (``Client(server)``, no transport), the same upstream ``MCPServer`` behind the
gateway (its upstream client on the handshake era, so the question is a request nested
in the upstream's running ``tools/call``); every variant awaits one ``tools/call`` on
an entered ``mcp.Client`` whose elicitation callback accepts at once:

- ``legacy client, ask`` (baseline): the gateway relays the upstream's
  ``elicitation/create`` to the client inside the client's running call.
- ``2026-07-28 client, ask``: the client's call is answered with an
  ``InputRequiredResult``; its retry (a second ``tools/call``, sealed ``requestState``)
  brings the answer to the waiting upstream request (``_waiting.py``).
- ``legacy client, echo`` and ``2026-07-28 client, echo``: the same upstream's tool that
  asks nothing, so "ask - echo" is what one question costs in each era.

Run: ``python benchmarks/bench_mcp_mrtr.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from agent_adapter import Executor, Registry
from agent_adapter.integrations.mcp import Relay, mcp_server, proxy
from agent_adapter.ledger import MemoryLedger

PACKAGES = ("agent-adapter", "mcp", "msgspec")
LEGACY, MODERN = "legacy", "2026-07-28"


class Go(BaseModel):
    go: bool


def upstream() -> MCPServer:
    """``ask()`` asks one yes/no question; ``echo(text)`` asks nothing."""
    server = MCPServer("bench-asking")

    @server.tool()
    async def ask(ctx: Context) -> str:
        """Ask once."""
        answer = await ctx.elicit("Go?", Go)
        return answer.action

    @server.tool()
    async def echo(text: str) -> str:
        """Give the text back."""
        return text

    return server


async def accept(ctx: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"go": True})


def _op(client: Client, tool: str, args: dict[str, Any], expected: str) -> Any:
    async def call() -> Any:
        result = await client.call_tool(tool, args)
        block = result.content[0]
        assert isinstance(block, types.TextContent) and block.text == expected, result
        return result

    return call


async def run(args: Any) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        relay = Relay()
        registry = Registry()
        up = await stack.enter_async_context(
            Client(upstream(), mode=LEGACY, **relay.client_options())
        )
        await proxy(registry, up, relay=relay)
        executor = Executor(registry, ledger=MemoryLedger())
        stack.push_async_callback(executor.close)
        server = mcp_server(registry, executor=executor)
        clients = {
            era: await stack.enter_async_context(
                Client(server, mode=era, elicitation_callback=accept)
            )
            for era in (LEGACY, MODERN)
        }
        return await abench(
            [
                Variant("legacy client, ask", _op(clients[LEGACY], "ask", {}, "accept")),
                Variant("2026-07-28 client, ask", _op(clients[MODERN], "ask", {}, "accept")),
                Variant("legacy client, echo", _op(clients[LEGACY], "echo", {"text": "hi"}, "hi")),
                Variant(
                    "2026-07-28 client, echo", _op(clients[MODERN], "echo", {"text": "hi"}, "hi")
                ),
            ],
            baseline="legacy client, ask",
            rounds=args.rounds,
            block_ms=args.block_ms,
        )


def main() -> None:
    args = parse_args(__doc__ or "")
    results = asyncio.run(run(args))
    print(header(PACKAGES))
    print(results_table(results, title="A proxied call whose upstream asks once, by client era"))
    rows = []
    for era in ("legacy", "2026-07-28"):
        ask = results[f"{era} client, ask"].samples
        echo = results[f"{era} client, echo"].samples
        added, spread = summarize([a - e for a, e in zip(ask, echo, strict=True)])
        rows.append((f"{era}: one question (ask - echo)", fmt_ns(added), fmt_pct(spread)))
    print(markdown_table(["paired per round", "ns", "spread"], rows))
    print(f"{args.rounds} rounds, median; spread = inter-quartile range / median.")


if __name__ == "__main__":
    main()
