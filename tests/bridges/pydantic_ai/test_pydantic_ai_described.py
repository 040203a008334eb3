"""A request the pydantic-ai toolset asks a port carries what the tool does."""

from __future__ import annotations

from typing import Any

from test_pydantic_ai_approvals import Paused

from agent_adapter import CallbackApproval, DeferredApproval
from agent_adapter.ledger import MemoryLedger


async def test_a_deferred_request_of_the_toolset_records_the_tools_description() -> None:
    """resolve_deferred asks the port with the tool's description; a DeferredApproval
    records it with the request (the approval inbox reads it from there)."""
    paused = Paused()
    requests = await paused.pause()
    seen: list[str] = []

    def look(request: Any) -> bool:
        seen.append(request.description)
        return False

    await paused.toolset.resolve_deferred(requests, CallbackApproval(look))
    later = Paused()
    deferred = DeferredApproval(MemoryLedger())
    review = await later.toolset.resolve_deferred(await later.pause(), deferred)
    [request] = await deferred.pending()
    described = paused.support.registry.get("refund").description
    assert described
    assert (seen, request.description, review.pending) == (
        [described],
        described,
        (request.request_id,),
    )
