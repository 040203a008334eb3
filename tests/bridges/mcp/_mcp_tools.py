"""A registry for ``agent-adapter mcp serve --tools _mcp_tools:registry`` in the CLI tests."""

from __future__ import annotations

import os

from agent_adapter import Registry

registry = Registry()


@registry.tool(confirm=True, effect="refund:{order_id}")
def refund(order_id: str, amount_cents: int) -> dict[str, object]:
    """Refund an order (integer cents)."""
    with open(os.environ["MCP_TEST_LOG"], "a", encoding="utf-8") as log:
        log.write(f"refund {order_id} {amount_cents}\n")
    return {"refunded": amount_cents, "order_id": order_id}


@registry.tool(readonly=True)
def lookup(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}: shipped"
