"""The conformance kit's driver for the MCP gateway: calls through the real ``mcp.Client``.

Each attempt opens an in-process client on ``mcp_server(...)`` in the chosen protocol era;
the person answers through the client's elicitation callback (approve, deny) or is not
there at all (the client declares no elicitation: the executor's deferred port decides).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp import Client

from ..bridges.mcp import META_CALL_ID, META_KIND, META_RUN_ID, NAME, mcp_server
from ..engine import Executor
from ._kit import Approve, Attempt, Channel, Deny, Edit, Reply

__all__ = ["MCPDriver"]


class MCPDriver:
    """Drives the MCP gateway; ``mode`` is the client's era (``"legacy"`` or ``"2026-07-28"``).

    Every refusal is an ``isError`` result (channel ``"result"``): the MCP server is the
    host boundary. Edits cannot travel (the approval form has no arguments).
    """

    name = NAME
    supports_edit = False

    def __init__(self, mode: str = "legacy") -> None:
        self.mode = mode

    def channel(self, kind: str) -> Channel:
        """Every kind is an ``isError`` result."""
        return "result"

    async def call(self, executor: Executor, attempt: Attempt) -> Reply:
        """One ``tools/call`` through a fresh in-process client."""
        asked = 0
        answer = attempt.answer

        async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
            nonlocal asked
            asked += 1
            if isinstance(answer, Approve):
                return types.ElicitResult(action="accept", content={"approve": True})
            if isinstance(answer, Deny):
                return types.ElicitResult(
                    action="accept", content={"approve": False, "reason": answer.reason}
                )
            return types.ElicitResult(action="cancel")

        if isinstance(answer, Edit):
            raise NotImplementedError("an MCP approval cannot carry edited arguments")
        # Without an answer to give, the client declares no elicitation at all.
        callback: Any = elicit if isinstance(answer, Approve | Deny) else None
        meta: Any = {}  # (the SDK's TypedDict names only its own keys)
        if attempt.run_id:
            meta[META_RUN_ID] = attempt.run_id
        if attempt.call_id:
            meta[META_CALL_ID] = attempt.call_id
        server = mcp_server(executor.registry, executor=executor)
        async with Client(server, mode=self.mode, elicitation_callback=callback) as client:
            result = await client.call_tool(attempt.tool, attempt.args, meta=meta or None)
        if result.is_error:
            kind = (result.meta or {}).get(META_KIND)
            return Reply(kind=kind, channel="result", asked=asked)
        return Reply(value=result.structured_content, asked=asked)
