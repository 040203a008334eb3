"""Process A of the two-process approval test: an agent waiting on a deferred approval.

Usage: python _cli_deferred_agent.py LEDGER_FILE DEADLINE_SECONDS

It calls a ``confirm=True`` tool through an executor with ``DeferredApproval`` on the
SQLite ledger, prints ``PENDING <request_id>``, then waits (``DeferredApproval.wait``: a
bounded poll of the ledger) until another process has answered, asks again once and
prints ``RESULT <value>`` (or ``DENIED <message>``) and ``EXECUTED <n>``. Exit status 0 on
a decision, 3 when the deadline passes first.
"""

from __future__ import annotations

import asyncio
import sys

from agent_adapter import DeferredApproval, Executor, Registry
from agent_adapter.errors import ApprovalDenied, ApprovalPending
from agent_adapter.ledger import SQLiteLedger

RUN_ID = "run-e2e"
ARGS = {"order_id": "A1", "amount_cents": 500}


async def main(path: str, deadline_s: float) -> int:
    executed: list[dict[str, object]] = []
    registry = Registry()

    @registry.tool(confirm=True, effect="refund:{order_id}")
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order (integer cents)."""
        executed.append({"order_id": order_id, "amount_cents": amount_cents})
        return f"refunded {amount_cents} on {order_id}"

    ledger = SQLiteLedger(path)
    deferred = DeferredApproval(ledger)
    async with await Executor.open(registry, ledger=ledger, approval=deferred) as executor:
        try:
            await executor.call("refund", ARGS, run_id=RUN_ID, call_id="call-1")
        except ApprovalPending as exc:
            request_id = exc.request_id
        else:
            print("UNEXPECTED ran without approval", flush=True)
            return 4
        print(f"PENDING {request_id}", flush=True)
        try:
            await deferred.wait(request_id, timeout=deadline_s, poll_s=0.05)
        except TimeoutError:
            print("TIMEOUT", flush=True)
            return 3
        try:
            value = await executor.call("refund", ARGS, run_id=RUN_ID, call_id="call-2")
        except ApprovalDenied as exc:
            print(f"DENIED {exc}", flush=True)
        else:
            print(f"RESULT {value}", flush=True)
    print(f"EXECUTED {len(executed)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1], float(sys.argv[2]))))
