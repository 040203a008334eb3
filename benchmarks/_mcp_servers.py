"""Servers for ``bench_mcp.py``: the upstream, and a gateway on a memory ledger, over stdio.

``python _mcp_servers.py upstream`` serves the upstream (one trivial tool, ``echo``);
``python _mcp_servers.py gateway CMD...`` serves the gateway, on a ``MemoryLedger``,
proxying the upstream started as ``CMD...`` (with a relay, as ``mcp serve`` does) and
offering one tool of its own, ``own_echo`` (the gateway's hop without the upstream's).
(The SQLite gateway is the real ``agent-adapter mcp serve``.)
"""

from __future__ import annotations

import asyncio
import sys

from mcp.server.mcpserver import MCPServer


def upstream() -> MCPServer:
    """The upstream MCP server: ``echo(text) -> text``."""
    server = MCPServer("bench-upstream")

    # Async: a sync tool runs in a worker thread, and that hop would dominate both sides.
    @server.tool()
    async def echo(text: str) -> str:
        """Give the text back."""
        return text

    return server


async def gateway(command: list[str]) -> None:
    from mcp import Client, StdioServerParameters
    from mcp.server.stdio import stdio_server

    from agent_adapter import Executor, Registry
    from agent_adapter.integrations.mcp import Relay, mcp_server, proxy
    from agent_adapter.ledger import MemoryLedger

    registry = Registry()

    @registry.tool
    async def own_echo(text: str) -> str:
        """Give the text back (the gateway's own tool)."""
        return text

    params = StdioServerParameters(command=command[0], args=command[1:])
    relay = Relay()
    async with Client(params, **relay.client_options()) as up:
        await proxy(registry, up, relay=relay)
        server = mcp_server(registry, executor=Executor(registry, ledger=MemoryLedger()))
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    if sys.argv[1] == "upstream":
        upstream().run()
    else:
        asyncio.run(gateway(sys.argv[2:]))
