"""An upstream MCP server (the SDK's MCPServer) whose tools ask the client mid-call.

Run as ``python _mcp_asking_upstream.py LOG`` (stdio). ``transfer`` and ``summarize`` ask
through the handshake era (the gateway's upstream client must speak it): each question is
an ``elicitation/create`` or ``sampling/createMessage`` request nested in the running
``tools/call``, open until the gateway answers it. ``pay`` asks through a resolver, so it
asks in whichever era the upstream client speaks (on 2026-07-28 with an
``InputRequiredResult`` of its own, which the upstream client drives). Every body appends
``<tool> <what happened>`` to LOG, so a test sees across processes what ran and what each
question was answered.
"""

from __future__ import annotations

import sys
from typing import Annotated

import mcp_types as types
from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel

LOG = sys.argv[1] if len(sys.argv) > 1 else "/dev/null"
server = MCPServer("asking")


class Go(BaseModel):
    go: bool


def ran(line: str) -> None:
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(line + "\n")


@server.tool()
async def transfer(amount: int, ctx: Context) -> str:
    """Send money after asking twice; each answer is logged."""
    ran(f"transfer started {amount}")
    for question in (f"Send {amount}?", "Really?"):
        try:
            answer = await ctx.elicit(question, Go)
        except Exception as exc:
            ran(f"transfer {question} failed: {exc}")
            raise
        ran(f"transfer {question} {answer.action}")
        if answer.action != "accept" or not answer.data.go:
            return f"not sent: {answer.action}"
    ran(f"transfer sent {amount}")
    return f"sent {amount}"


@server.tool()
async def summarize(text: str, ctx: Context) -> str:
    """Ask the client's model for a summary."""
    result = await ctx.request_context.session.create_message(
        messages=[
            types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))
        ],
        max_tokens=5,
        related_request_id=ctx.request_id,
    )
    content = result.content
    said = content.text if isinstance(content, types.TextContent) else "?"
    ran(f"summarize {said}")
    return f"summary: {said}"


def pay_question(amount: int) -> Elicit[Go]:
    return Elicit(f"Pay {amount}?", Go)


@server.tool()
async def pay(amount: int, answer: Annotated[ElicitationResult[Go], Resolve(pay_question)]) -> str:
    """Pay after one question, asked in the upstream client's era."""
    ran(f"pay {amount} {answer.action}")
    return f"pay {answer.action}"


if __name__ == "__main__":
    server.run()
