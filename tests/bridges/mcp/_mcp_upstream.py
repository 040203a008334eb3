"""A small upstream MCP server (the SDK's MCPServer) that the gateway tests proxy.

Run as ``python _mcp_upstream.py LOG`` (stdio). Every tool body that runs appends one
line ``<tool> <json args>`` to LOG first, so a test counts executions across processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

LOG = sys.argv[1] if len(sys.argv) > 1 else os.devnull
server = MCPServer("upstream")


def ran(tool: str, **args: object) -> None:
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(f"{tool} {json.dumps(args, sort_keys=True)}\n")


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def search_documents(query: str) -> dict[str, object]:
    """Search the documents."""
    ran("search_documents", query=query)
    return {"hits": [f"{query}-1", f"{query}-2"]}


@server.tool(annotations=types.ToolAnnotations(destructive_hint=True))
def delete_document(doc_id: str) -> str:
    """Delete one document."""
    ran("delete_document", doc_id=doc_id)
    return f"deleted {doc_id}"


@server.tool()
def charge(order_id: str, amount_cents: int) -> str:
    """Charge an order; this upstream always reports an error after trying."""
    ran("charge", order_id=order_id, amount_cents=amount_cents)
    raise ToolError("card declined")


@server.tool()
async def hang(order_id: str) -> str:
    """Never answers."""
    ran("hang", order_id=order_id)
    await asyncio.Event().wait()
    return "never"


@server.tool()
def crash(order_id: str) -> str:
    """The process dies mid-call."""
    ran("crash", order_id=order_id)
    os._exit(3)


if __name__ == "__main__":
    server.run()
