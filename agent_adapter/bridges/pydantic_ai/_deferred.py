"""``resolve_deferred``: ask a port about each paused call, answer pydantic-ai with the result.

An unapproved confirm call ends the run with ``DeferredToolRequests``. The answers the
host resumes with (``DeferredToolResults``) are plain data a client could have written, so
none of them counts as an approval by itself: an approval the port gave is held as a
one-use token in the toolset, bound to (conversation id, tool call id, tool) and to the
digest of the validated arguments, and the resumed call takes it. A ``ToolApproved()``
without a token, ``DeferredToolResults.metadata`` and ``override_args`` for other
arguments leave the decision to the executor's own port (none: denied).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied

from ...engine import (
    ApprovalPort,
    ApprovalRequest,
    Executor,
    TokenTable,
    ToolSpec,
    ask_port,
)
from ...errors import ApprovalDenied, ToolUsageError
from ._errors import error_output
from ._integration import META_KEY, NAME, call_context

__all__ = ["Review", "resolve"]


@dataclass(frozen=True)
class Review:
    """What one ``resolve_deferred`` pass decided, and what it left open.

    ``results`` is the ``DeferredToolResults`` to resume with (``deferred_tool_results=``):
    ``ToolApproved()`` for the approved calls (their approval is the token the toolset
    holds, not this object), ``ToolDenied`` with the JSON error for the denied ones
    (already recorded as ``call.denied``). ``pending`` holds the request ids a deferred port
    still holds open: wait for them (``await deferred.wait(request_id)``) and resolve the
    same requests again before resuming. ``approved`` and ``denied`` are the call ids this
    pass decided; a call the ledger already shows started or finished (a history resumed
    again) is answered ``ToolApproved()`` without asking, in neither, and the executor
    answers it from the ledger. Calls of tools this toolset does not hold are not in
    ``results``.
    """

    results: DeferredToolResults = field(default_factory=DeferredToolResults)
    pending: tuple[str, ...] = ()
    approved: tuple[str, ...] = ()
    denied: tuple[str, ...] = ()


def _run_of(requests: DeferredToolRequests, part: ToolCallPart, run_id: str | None) -> str:
    """The call's run id: the caller's, else the conversation id the bridge recorded."""
    if run_id:
        return run_id
    entry = (requests.metadata.get(part.tool_call_id) or {}).get(META_KEY)
    found = entry.get("run_id") if isinstance(entry, Mapping) else None
    if isinstance(found, str) and found:
        return found
    raise ToolUsageError(
        f"the deferred call {part.tool_call_id} ({part.tool_name}) carries no run id: pass "
        "run_id= (the run's conversation_id) to resolve_deferred"
    )


async def resolve(
    executor: Executor,
    specs: Mapping[str, ToolSpec],
    tokens: TokenTable,
    requests: DeferredToolRequests,
    port: ApprovalPort,
    run_id: str | None,
) -> Review:
    """``ExecutorToolset.resolve_deferred``'s pass over ``requests.approvals`` (see there)."""
    ours = [(p, specs[p.tool_name]) for p in requests.approvals if p.tool_name in specs]
    # Every run id is found before anything is asked: a reviewer's answer must never be
    # spent on a call the resume could not bind it to.
    runs = [_run_of(requests, part, run_id) for part, _ in ours]
    approvals: dict[str, ToolApproved | ToolDenied] = {}
    pending: list[str] = []
    approved: list[str] = []
    denied: list[str] = []
    for (part, spec), run in zip(ours, runs, strict=True):
        call_id = part.tool_call_id
        raw: Any = part.args or {}
        ctx = call_context(run, call_id)
        prepared = await executor.prepare(spec, raw, ctx)
        if prepared.recorded:
            # Already on record (an outcome, or a start): not asked again, and a deferred
            # port's answer is not spent on it a second time. No token: step 0 answers it
            # from the ledger (its recorded value or refusal), nothing runs.
            approvals[call_id] = ToolApproved()
            continue
        if not prepared.ok:
            # Only requests edited after the pause get here (the toolset never defers a call
            # whose arguments are invalid): recorded as call.invalid, never asked.
            await executor.refuse(spec, raw, ctx)
            assert prepared.error is not None
            approvals[call_id] = ToolDenied(error_output(prepared.error))
            denied.append(call_id)
            continue
        if not prepared.needs_approval:
            approvals[call_id] = ToolApproved()  # the rule says no approval: the executor runs it
            approved.append(call_id)
            continue
        request = ApprovalRequest(
            request_id=uuid.uuid4().hex,
            run_id=run,
            call_id=call_id,
            tool=spec.name,
            description=spec.description,
            args=prepared.args,
            digest=prepared.digest,
            metadata={"integration": NAME},
            redact=spec.redact,
            json_schema=spec.json_schema,
            effect_key=prepared.effect_key,
            effect_state=prepared.effect_state,
            effect_by_run_id=prepared.effect_by_run_id,
            effect_by_call_id=prepared.effect_by_call_id,
        )
        decision, held = await ask_port(port, request)
        if decision is None:
            pending.append(held)
        elif decision.approved:
            # Edits travel in the token (the executor validates and checks them again), never
            # as override_args: the history keeps the model's own arguments, and so does the
            # ledger's call.validated.
            tokens.issue((run, call_id, spec.name), prepared.digest, decision)
            approvals[call_id] = ToolApproved()
            approved.append(call_id)
        else:
            await executor.refuse(
                spec, raw, ctx, reviewer=decision.reviewer, reason=decision.reason
            )
            message = f"{spec.name} was not approved" + (
                f": {decision.reason}" if decision.reason else ""
            )
            approvals[call_id] = ToolDenied(error_output(ApprovalDenied(message)))
            denied.append(call_id)
    return Review(
        results=DeferredToolResults(approvals=dict(approvals)),
        pending=tuple(pending),
        approved=tuple(approved),
        denied=tuple(denied),
    )
