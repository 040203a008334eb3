"""The example's tools: an order lookup and a refund that needs approval.

The refund's effect key makes the refund of one order happen once, whatever Temporal
retries; ``REFUNDS`` is the "payment provider" (a file: one line per refund made).
"""

from __future__ import annotations

import os
from pathlib import Path

from agent_adapter import Registry

registry = Registry()

ORDERS = {"A1": 500, "B2": 12_000}


def _refunds() -> Path:
    return Path(os.environ.get("REFUNDS_FILE", "refunds.log"))


@registry.tool
async def lookup_order(order_id: str) -> dict[str, object]:
    """Look an order up: its amount in cents."""
    return {"order_id": order_id, "amount_cents": ORDERS.get(order_id, 0)}


@registry.tool(confirm=True, effect="refund:{order_id}")
async def refund(order_id: str, amount_cents: int) -> str:
    """Refund an order. Amounts are integer minor units."""
    with _refunds().open("a", encoding="utf-8") as out:
        out.write(f"refund {order_id} {amount_cents}\n")
    return f"refunded {amount_cents} on {order_id}"
