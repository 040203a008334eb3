"""A request the OpenAI Agents bridge asks a deferred port records what the tool does.

The approval inbox reads the description from the ledger (it has no registry): the
bridge's requests carry it as the engine's own do.
"""

from __future__ import annotations

from test_openai_agents_deferred import build, paused, refund_call

from agent_adapter import DeferredApproval, Executor
from agent_adapter.integrations.openai_agents import review_interruptions
from agent_adapter.ledger import MemoryLedger


async def test_a_bridge_request_records_the_tools_description() -> None:
    """review_interruptions on a DeferredApproval records approval.pending with the tool's
    description (its docstring), read back by the port as the request's."""
    registry, ran = build()
    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger)
    _, _, result = await paused(registry, executor, refund_call("A1", "c1"))
    await review_interruptions(result, deferred, run_id="r-1")
    [request] = await deferred.pending()
    recorded = [e.description async for e in ledger.read() if e.type == "approval.pending"]
    assert (request.description, recorded, ran) == ("Refund an order.", ["Refund an order."], [])
