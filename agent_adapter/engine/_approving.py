"""Step 6 of the pipeline: the confirm rule, then the context's decision or the port."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import ApprovalDenied, ApprovalPending, ToolArgsInvalid
from ..ledger import (
    ApprovalConsumed,
    ApprovalDeferred,
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    CallDenied,
    CallPending,
    CallRequested,
    CallValidated,
    Event,
    recordable,
)
from ..ledger import recordable_text as text
from ._approval import ApprovalRequest, Decision
from ._checking import _checks, _invalid
from ._context import Call, CallContext, _current
from ._effects import _render
from ._outcome import end
from ._pipeline import Pipeline
from ._prepare import approval_needed
from ._redaction import restored
from ._run import _Run, _Stop, _validated, requested_args

if TYPE_CHECKING:
    from ._spec import ToolSpec

__all__ = ["_approve", "_pending", "_port_records", "_refused"]


async def _approve(pipe: Pipeline, run: _Run, call: Call) -> Call:
    """Step 6: the confirm rule, then the context's decision or the port."""
    confirm = run.spec.confirm
    if confirm is False:
        return call
    # The one confirm rule (``Executor.prepare`` asks the same): a rule that raises asks.
    if confirm is not True and not await approval_needed(run.spec, call, run.ctx):
        return call
    ctx = run.ctx
    clock = pipe.clock
    # 128 random bits in uuid4().hex's format, without building a UUID (~4x cheaper).
    request_id = os.urandom(16).hex()
    requested = ApprovalRequested(
        ts=clock(),
        run_id=ctx.run_id,
        call_id=ctx.call_id,
        tool=call.tool,
        request_id=request_id,
        digest=call.digest,
    )
    # The projection's handler for approval.requested, called directly (see run_spec).
    pipe.state._counting(requested)
    run.buffer.append(requested)
    decision: Decision | None = None
    source = "context"
    carried = ctx.approval
    if isinstance(carried, Decision) and carried.digest in (None, call.digest):
        decision = carried
    elif pipe.approval is not None:
        source = "port"
        # Durable before a reviewer is asked: the request may outlive this process.
        await pipe.flush(run)
        run.count_durable = True  # approval.requested (the counting event) is on disk
        # The key's state as of that write (other writers' events are folded by then):
        # a reviewer is told when approving cannot make the call run. Only told: the
        # effect check (step 8) decides, as for any call.
        key = call.effect_key
        held = pipe.state.effects.get(key) if key is not None else None
        request = ApprovalRequest(
            request_id=request_id,
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=call.tool,
            args=call.args,
            digest=call.digest,
            metadata=ctx.metadata,
            redact=run.spec.redact,
            json_schema=run.spec.json_schema,
            effect_key=key,
            effect_state=None if held is None else held.status,
            effect_by_run_id="" if held is None else held.run_id,
            effect_by_call_id="" if held is None else held.call_id,
            description=run.spec.description or "",
        )
        try:
            answer = await pipe.approval.decide(request)
        except ApprovalPending as exc:
            if pipe.observed:
                await _port_records(pipe, requested)
            raise _Stop(_pending(pipe, run, exc.request_id), exc) from None
        except Exception as exc:
            answer = Decision(
                approved=False,
                reason=f"approval port failed: {type(exc).__name__}: {exc}",
            )
        if pipe.observed:
            await _port_records(pipe, requested)
        if answer is None:
            raise _Stop(
                _pending(pipe, run, request_id),
                ApprovalPending(
                    f"approval {request_id} for {call.tool} is pending",
                    request_id=request_id,
                ),
            )
        decision = answer if isinstance(answer, Decision) else Decision(approved=bool(answer))
    if decision is None or not decision.approved:
        reviewer = decision.reviewer if decision is not None else ""
        reason = (
            decision.reason
            if decision is not None
            else "no approval port and no decision in the call context"
        )
        denied = _deny(
            pipe,
            run,
            request_id,
            call.digest,
            reviewer,
            source if decision is not None else "none",
            reason,
        )
        message = f"{call.tool} was not approved" + (f": {reason}" if reason else "")
        raise _Stop(denied, ApprovalDenied(message))
    if decision.edits is not None:
        # An edit is an approval of new arguments: validated and checked again, and
        # then the only arguments the tool sees.
        edits = decision.edits
        if run.spec.redact:
            # A reviewer never saw a redacted value (the ledger holds "[redacted]"):
            # leaving it as shown keeps the value the call was requested with.
            edits = restored(edits, call.args, run.spec.redact)
        try:
            edited, edited_digest = _validated(run.spec, edits)
        except ToolArgsInvalid as exc:
            raise _Stop(_invalid(pipe, run, f"edited {exc}"), exc) from None
        call = msgspec.structs.replace(
            call, args=edited, digest=edited_digest, effect_key=_render(pipe, run, edited)
        )
        run.call = call
        _current.set(call)
    # The projection does not fold approval.granted (Projection.apply ignores it): only
    # buffered for the ledger.
    run.buffer.append(
        ApprovalGranted(
            ts=clock(),
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=call.tool,
            request_id=request_id,
            reviewer=decision.reviewer,
            source=source,
            digest=call.digest,
            reason=decision.reason,
            edited=decision.edits is not None,
        )
    )
    if decision.edits is not None:
        # (An edit is rare: its guards are joined here, as the plan joined them.)
        call = await _checks(pipe, run, call, run.spec.guards + pipe.guards)
    return call


def _deny(
    pipe: Pipeline,
    run: _Run,
    request_id: str,
    digest: str,
    reviewer: str,
    source: str,
    reason: str,
) -> CallDenied:
    """Emit ``approval.denied`` for ``digest``; return the ``call.denied`` outcome to record."""
    now = pipe.clock()
    ctx = run.ctx
    pipe.emit(
        run,
        ApprovalRejected(
            ts=now,
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=run.spec.name,
            request_id=request_id,
            reviewer=reviewer,
            source=source,
            digest=digest,
            reason=reason,
        ),
    )
    return CallDenied(
        ts=now,
        run_id=ctx.run_id,
        call_id=ctx.call_id,
        tool=run.spec.name,
        duration_ms=(now - run.t0) * 1000.0,
        reviewer=reviewer,
        reason=reason,
    )


def _pending(pipe: Pipeline, run: _Run, request_id: str) -> Event:
    """The ``call.pending`` outcome naming the deferred request that holds the call."""
    now = pipe.clock()
    return CallPending(
        ts=now,
        run_id=run.ctx.run_id,
        call_id=run.ctx.call_id,
        tool=run.spec.name,
        duration_ms=(now - run.t0) * 1000.0,
        # (A custom port may raise ApprovalPending with an id that is not text.)
        request_id=text(request_id) if isinstance(request_id, str) else "",
    )


async def _port_records(pipe: Pipeline, requested: ApprovalRequested) -> None:
    """Show hooks and subscribers what the port appended for this call.

    A deferred port writes ``approval.pending`` and ``approval.consumed`` to the ledger
    itself; read back after the request (its seq is set once durable), they reach
    ``on_event`` hooks and ``subscribe()`` like the executor's own events.
    """
    records: list[Event] = [
        event
        async for event in pipe.ledger.read(
            after=requested.seq, run_id=requested.run_id, call_id=requested.call_id
        )
        if isinstance(event, ApprovalDeferred | ApprovalConsumed)
    ]
    if records:
        await pipe.dispatch(records)


async def _refused(
    pipe: Pipeline,
    spec: ToolSpec,
    args: Any,
    ctx: CallContext,
    reviewer: str,
    reason: str,
    source: str,
) -> None:
    """``refuse``'s records, appended in the executor's name."""
    clock = pipe.clock
    run = _Run(spec, ctx, clock())
    requested = CallRequested(
        ts=run.t0,
        run_id=ctx.run_id,
        call_id=ctx.call_id,
        tool=spec.name,
        args=requested_args(spec, args),
        metadata=ctx.metadata,
    )
    pipe.emit(run, requested)
    try:
        _args, call_digest = _validated(spec, args)
    except ToolArgsInvalid as exc:
        requested.args = recordable(requested.args)  # (as in run_spec)
        await end(pipe, run, _invalid(pipe, run, str(exc)), error=exc)
        return
    request_id = os.urandom(16).hex()
    pipe.emit(
        run,
        CallValidated(
            ts=clock(), run_id=ctx.run_id, call_id=ctx.call_id, tool=spec.name, digest=call_digest
        ),
    )
    pipe.emit(
        run,
        ApprovalRequested(
            ts=clock(),
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=spec.name,
            request_id=request_id,
            digest=call_digest,
        ),
    )
    denied = _deny(pipe, run, request_id, call_digest, reviewer, source, reason)
    await end(pipe, run, denied)
