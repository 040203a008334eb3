"""``resolve_interruptions``: ask a port about each paused call, then approve or reject it.

The SDK's approval only lets it call the tool; the executor's approval comes from the
one-use token issued here, bound to this state copy, the call id, the tool and the
digest of the validated arguments. ``review_interruptions`` does the same pass and also
says what it left open (the request ids a deferred port still holds), so a service can
wait for those answers instead of asking again in a loop.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from ...engine import ApprovalPort, ApprovalRequest, CallContext, Decision, ask_port, digest
from ...errors import (
    ApprovalDenied,
    LedgerError,
    ToolUsageError,
)
from ._compat import check_sdk, sdk_name
from ._errors import error_output
from ._integration import INTEGRATION, NAME, OpenAIAgentsIntegration, state_run_id
from ._tools import Export, export_of

__all__ = ["Review", "resolve_interruptions", "review_interruptions"]

if TYPE_CHECKING:
    from agents import RunState
    from agents.agent_tool_state import get_agent_tool_state_scope, peek_agent_tool_run_result
    from agents.items import ToolApprovalItem
else:
    RunState = sdk_name("agents", "RunState")
    get_agent_tool_state_scope = sdk_name("agents.agent_tool_state", "get_agent_tool_state_scope")
    peek_agent_tool_run_result = sdk_name("agents.agent_tool_state", "peek_agent_tool_run_result")
    ToolApprovalItem = sdk_name("agents.items", "ToolApprovalItem")

logger = logging.getLogger("agent_adapter.bridges.openai_agents")


class _Item(msgspec.Struct):
    """One pending call and what was decided about it (None: still undecided)."""

    item: ToolApprovalItem
    export: Export | None
    call_id: str
    digest: str
    decision: Decision | None = None
    #: the port's open request, while ``decision`` is None (what the caller can wait for)
    request_id: str = ""


@dataclass(frozen=True)
class Review:
    """What one pass of ``review_interruptions`` did, and what it left open.

    ``state`` is the ``RunState`` that ``resolve_interruptions`` returns. ``pending`` holds
    the request ids of the calls still waiting for a decision, in interruption order (with
    ``DeferredApproval``: ``await port.wait(request_id)``, then review ``state`` again); an
    empty ``pending`` means every paused call is decided and ``state`` can be resumed.
    ``approved`` and ``denied`` are the call ids this pass decided (calls decided by an
    earlier pass are in neither).
    """

    state: RunState[Any, Any]
    pending: tuple[str, ...] = ()
    approved: tuple[str, ...] = ()
    denied: tuple[str, ...] = ()


def _scope_of(state: RunState[Any, Any]) -> str | None:
    scope = getattr(state, "_agent_tool_state_scope_id", None)
    if isinstance(scope, str) and scope:
        return scope
    return get_agent_tool_state_scope(getattr(state, "_context", None))


def _tool_of(item: ToolApprovalItem) -> Any:
    agent = item.agent
    name = item.tool_name
    for tool in getattr(agent, "tools", None) or ():
        if getattr(tool, "name", None) == name:
            return tool
    return None


def _raw_args(text: str | None) -> Any:
    """The model's own arguments for a tool the bridge did not export: parsed if possible."""
    if text is None:
        return {}
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text


def _decided(state: RunState[Any, Any], item: ToolApprovalItem, call_id: str) -> bool:
    """True when this call already has an SDK decision (an earlier pass decided it)."""
    context = getattr(state, "_context", None)
    if context is None or not call_id:
        return False
    try:
        status = context.is_tool_approved(item.tool_name, call_id)
    except Exception:
        return False
    return status is not None


def _denial(tool: str, reason: str) -> str:
    message = f"{tool} was not approved" + (f": {reason}" if reason else "")
    return error_output(ApprovalDenied(message))


async def resolve_interruptions(result: Any, port: ApprovalPort, *, run_id: str = "") -> Any:
    """Ask ``port`` once per paused call, then approve or reject it on the run state.

    Returns the state; ``review_interruptions`` is the same pass and also tells which
    calls are still pending (see there). The rest of this docstring holds for both.

    ``result`` is a ``RunResult`` (its ``to_state()`` is returned) or a ``RunState``
    (updated in place and returned). For tools this bridge exported the port sees the
    validated arguments and, when it approves, the bridge issues a one-use token (at most
    256 per resolve) for the executor; for other tools it sees the model's raw arguments
    and the SDK's approval is all there is. Requests carry ``run_id`` and
    ``metadata={"integration": "openai_agents"}``. Denied calls are rejected with a
    model-visible approval-denied error. A call still pending at a deferred port stays
    paused: resolve again, with the same state and run_id, after it is answered.

    Raises IntegrationError, before the port is asked, for an SDK outside 0.22 to below
    1.0 or without a name the bridge uses. Raises ToolUsageError, before any decision is
    applied, when a decision edits the
    arguments of a tool this bridge did not export. Raises LedgerError when a denial
    could not be recorded in its executor's ledger, after trying every one: the calls
    stay rejected, and ``error.state`` is the decided state (resumable as is).
    """
    return (await review_interruptions(result, port, run_id=run_id)).state


async def review_interruptions(result: Any, port: ApprovalPort, *, run_id: str = "") -> Review:
    """``resolve_interruptions``, reporting what is still open: a ``Review``.

    ``review.state`` is what ``resolve_interruptions`` returns; ``review.pending`` the
    request ids of the calls the port left undecided (a deferred port's open requests).
    With ``DeferredApproval``, wait for each (``await deferred.wait(request_id)``), then
    review ``review.state`` again with the same ``run_id``; resume once ``pending`` is
    empty. Asking again without waiting finds the same requests open (nothing is asked
    twice or recorded), so a loop that does not wait only spins.
    """
    # Before the port is asked anything: an SDK the bridge cannot drive must not cost a
    # reviewer's decisions.
    check_sdk()
    state: RunState[Any, Any] = result if isinstance(result, RunState) else result.to_state()
    # Without a run_id from the caller, the state's own (its trace id, or a run_id in its
    # mapping context) keeps a deferred decision for one run from serving another's.
    request_run_id = run_id or state_run_id(state, fallback="", fresh=False)
    items: list[_Item] = []
    for item in state.get_interruptions():
        call_id = item.call_id or ""
        if _decided(state, item, call_id):
            continue
        export = export_of(_tool_of(item))
        tool = item.tool_name or ""
        if export is not None:
            if not call_id:
                reason = "the call has no call id, so no approval can be bound to it"
                items.append(
                    _Item(item, export, call_id, "", Decision(approved=False, reason=reason))
                )
                continue
            # The engine's own view of the call (validation, digest, the effect key and
            # its state now): the reviewer is told when the key already ran, as every
            # bridge's reviewer is, from the one implementation.
            prepared = await export.executor.prepare(
                export.spec,
                item.arguments or "",
                CallContext(
                    run_id=state_run_id(state, run_id),
                    call_id=call_id,
                    metadata={"integration": NAME},
                ),
            )
            if prepared.error is not None:
                reason = f"its arguments are invalid ({prepared.error})"
                items.append(
                    _Item(item, export, call_id, "", Decision(approved=False, reason=reason))
                )
                continue
            request = ApprovalRequest(
                request_id=uuid.uuid4().hex,
                run_id=request_run_id,
                call_id=call_id,
                tool=tool,
                description=export.spec.description,
                args=prepared.args,
                digest=prepared.digest,
                metadata={"integration": NAME},
                redact=export.spec.redact,
                # Recorded with the request, so the CLI and the inbox check an edit against
                # it before recording it, without the registry.
                json_schema=export.spec.json_schema,
                effect_key=prepared.effect_key,
                effect_state=prepared.effect_state,
                effect_by_run_id=prepared.effect_by_run_id,
                effect_by_call_id=prepared.effect_by_call_id,
            )
        else:
            args = _raw_args(item.arguments)
            request = ApprovalRequest(
                request_id=uuid.uuid4().hex,
                run_id=request_run_id,
                call_id=call_id,
                tool=tool,
                description=export.spec.description if export is not None else "",
                args=args,
                digest=digest(args),
                metadata={"integration": NAME},
            )
        decision, held = await ask_port(port, request)
        items.append(_Item(item, export, call_id, request.digest, decision, held))
    _check_edits(items)
    _decide(state, items)
    try:
        await _record_refusals(state, items, run_id)
    finally:
        # Last, so a token's lifetime starts when the resolve returns (not while hundreds of
        # decisions are applied), and also when a denial's record failed: the state is
        # resumable as it is, and its approved calls must find their tokens.
        _issue_tokens(state, items)
    return Review(
        state=state,
        pending=tuple(e.request_id for e in items if e.decision is None),
        approved=tuple(e.call_id for e in items if e.decision is not None and e.decision.approved),
        denied=tuple(
            e.call_id for e in items if e.decision is not None and not e.decision.approved
        ),
    )


def _check_edits(items: Iterable[_Item]) -> None:
    # Checked before anything is applied: an edit the bridge cannot deliver must not leave
    # half the batch approved.
    for entry in items:
        decision = entry.decision
        if entry.export is None and decision is not None and decision.edits is not None:
            raise ToolUsageError(
                f"the decision for {entry.item.tool_name} (call {entry.call_id}) edits its "
                "arguments, but agent-adapter did not export that tool, so the edit cannot "
                "reach it; reject the item yourself (state.reject(item)) or decide it again "
                "under a new run_id"
            )


async def _record_refusals(state: RunState[Any, Any], items: list[_Item], run_id: str) -> None:
    """Put each denial of an exported tool's call in its executor's ledger.

    The SDK never invokes a rejected tool, so without this the ledger would not show who
    denied which arguments; the executor records it (``Executor.refuse``), nothing runs.
    """
    denied = [
        entry
        for entry in items
        if entry.export is not None
        and entry.call_id
        and entry.decision is not None
        and not entry.decision.approved
    ]
    if not denied:
        return
    run = state_run_id(state, run_id)
    failed: list[tuple[str, Exception]] = []
    for entry in denied:
        assert entry.export is not None and entry.decision is not None
        try:
            await entry.export.executor.refuse(
                entry.export.spec,
                entry.item.arguments or "",
                CallContext(run_id=run, call_id=entry.call_id, metadata={"integration": NAME}),
                reviewer=entry.decision.reviewer,
                reason=entry.decision.reason,
            )
        except Exception as exc:  # one failing write must not cost the others their record
            failed.append((entry.call_id, exc))
    if failed:
        # The calls stay rejected on the state (nothing runs); only their record is
        # missing, and the caller must hear it.
        call_id, first = failed[0]
        ids = ", ".join(c for c, _ in failed)
        error = LedgerError(
            f"{len(failed)} of {len(denied)} denials could not be recorded (calls {ids}); "
            f"the calls stay rejected. First error, for call {call_id}: {first}"
        )
        error.state = state  # type: ignore[attr-defined]  # decided: resumable as is
        raise error from first


def _direct(state: RunState[Any, Any]) -> tuple[Any, dict[str, ToolApprovalItem]] | None:
    """The state's run context and its pending items by call id, when deciding on that
    context is exactly what ``state.approve`` would do; None otherwise.

    ``RunState.approve(item)`` finds the state's own pending item that matches ``item`` (a
    detached copy from ``get_interruptions``) and then calls ``approve_tool`` on the run
    context with it; to find it, it deep-copies every pending item, twice per call, so N
    decisions cost N^2 copies (259 took 89 s). When no agent-as-tool run nested in the
    state has pending approvals (the SDK would route the decision there) and every pending
    call id is distinct (the SDK would refuse an ambiguous one), that match is the one
    pending item with the call id: found here once for all, in one pass.
    """
    context = getattr(state, "_context", None)
    pending = getattr(getattr(state, "_current_step", None), "interruptions", None)
    if (
        context is None
        or not callable(getattr(context, "approve_tool", None))
        or not callable(getattr(context, "reject_tool", None))
        or not isinstance(pending, list)
    ):
        return None
    scope = getattr(state, "_agent_tool_state_scope_id", None)
    response = getattr(state, "_last_processed_response", None)
    for function_run in getattr(response, "functions", None) or ():
        nested = peek_agent_tool_run_result(function_run.tool_call, scope_id=scope)
        if getattr(nested, "interruptions", None):
            return None
    by_call: dict[str, ToolApprovalItem] = {}
    for item in pending:
        call_id = getattr(item, "call_id", None)
        if not isinstance(item, ToolApprovalItem) or not call_id or call_id in by_call:
            return None
        by_call[call_id] = item
    return context, by_call


def _decide(state: RunState[Any, Any], items: list[_Item]) -> None:
    """Approve or reject each decided call on the SDK's state: linear in the calls."""
    direct = _direct(state)
    for entry in items:
        decision = entry.decision
        if decision is None:
            continue
        found = direct[1].get(entry.call_id) if direct is not None else None
        message = None
        if not decision.approved:
            message = _denial(entry.item.tool_name or "", decision.reason)
        if direct is None or found is None:
            if decision.approved:
                state.approve(entry.item)
            else:
                state.reject(entry.item, rejection_message=message)
        elif decision.approved:
            direct[0].approve_tool(found)
        else:
            direct[0].reject_tool(found, rejection_message=message)


def _issue_tokens(state: RunState[Any, Any], items: list[_Item]) -> None:
    """Issue one token per approved call of an exported tool (up to the per-resolve cap).

    Each integration's tokens are issued at one instant (``TokenTable.issue_many``), the
    end of the resolve, so all of them live their whole TTL from its return.
    """
    scope = _scope_of(state)
    issued = 0
    fallback = 0
    limit = INTEGRATION.max_tokens_per_resolve
    batches: dict[int, tuple[OpenAIAgentsIntegration, list[Any]]] = {}
    for entry in items:
        decision = entry.decision
        if decision is None or not decision.approved or entry.export is None:
            continue
        integration: OpenAIAgentsIntegration = entry.export.integration
        limit = integration.max_tokens_per_resolve
        if scope is None or issued >= limit:
            fallback += 1
            continue
        binding = (scope, entry.call_id, entry.export.spec.name)
        batches.setdefault(id(integration), (integration, []))[1].append(
            (binding, entry.digest, decision)
        )
        issued += 1
    for integration, batch in batches.values():
        # A full table drops its oldest tokens: those calls fall back to the executor's port.
        fallback += integration.tokens.issue_many(batch)
    if fallback:
        logger.warning(
            "%d approved call(s) hold no approval token (over the %d-token limit of one "
            "resolve, or dropped from a full token table); the executor's own approval "
            "port decides them",
            fallback,
            limit,
        )
