"""Step 6 of the pipeline: the confirm rule, then the context's decision or the port."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import ApprovalDenied, ApprovalPending, ToolArgsInvalid, ToolUsageError
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
    appending,
    recordable,
)
from ..ledger import recordable_text as text
from ._approval import ApprovalRequest, Decision
from ._context import Call, CallContext, _current
from ._prepare import approval_needed
from ._redaction import restored
from ._run import _Run, _Stop, _validated

if TYPE_CHECKING:
    from ._executor import Executor
    from ._spec import ToolSpec

__all__ = ["_approve", "_pending", "_port_records", "refuse"]


async def _approve(self: Executor, run: _Run, call: Call) -> Call:
    """Step 6: the confirm rule, then the context's decision or the port."""
    confirm = run.spec.confirm
    if confirm is False:
        return call
    # The one confirm rule (``Executor.prepare`` asks the same): a rule that raises asks.
    if confirm is not True and not await approval_needed(run.spec, call, run.ctx):
        return call
    ctx = run.ctx
    clock = self._clock
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
    self.state._counting(requested)
    run.buffer.append(requested)
    decision: Decision | None = None
    source = "context"
    carried = ctx.approval
    if isinstance(carried, Decision) and carried.digest in (None, call.digest):
        decision = carried
    elif self.approval is not None:
        source = "port"
        # Durable before a reviewer is asked: the request may outlive this process.
        await self._flush(run)
        run.count_durable = True  # approval.requested (the counting event) is on disk
        # The key's state as of that write (other writers' events are folded by then):
        # a reviewer is told when approving cannot make the call run. Only told: the
        # effect check (step 8) decides, as for any call.
        key = call.effect_key
        held = self.state.effects.get(key) if key is not None else None
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
        )
        try:
            answer = await self.approval.decide(request)
        except ApprovalPending as exc:
            if self._observed:
                await self._port_records(requested)
            raise _Stop(self._pending(run, exc.request_id), exc) from None
        except Exception as exc:
            answer = Decision(
                approved=False,
                reason=f"approval port failed: {type(exc).__name__}: {exc}",
            )
        if self._observed:
            await self._port_records(requested)
        if answer is None:
            raise _Stop(
                self._pending(run, request_id),
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
            self,
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
            raise _Stop(self._invalid(run, f"edited {exc}"), exc) from None
        call = msgspec.structs.replace(
            call, args=edited, digest=edited_digest, effect_key=self._render(run, edited)
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
        call = await self._checks(run, call)
    return call


def _deny(
    self: Executor,
    run: _Run,
    request_id: str,
    digest: str,
    reviewer: str,
    source: str,
    reason: str,
) -> CallDenied:
    """Emit ``approval.denied`` for ``digest``; return the ``call.denied`` outcome to record."""
    now = self._clock()
    ctx = run.ctx
    self._emit(
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


def _pending(self: Executor, run: _Run, request_id: str) -> Event:
    """The ``call.pending`` outcome naming the deferred request that holds the call."""
    now = self._clock()
    return CallPending(
        ts=now,
        run_id=run.ctx.run_id,
        call_id=run.ctx.call_id,
        tool=run.spec.name,
        duration_ms=(now - run.t0) * 1000.0,
        # (A custom port may raise ApprovalPending with an id that is not text.)
        request_id=text(request_id) if isinstance(request_id, str) else "",
    )


async def _port_records(self: Executor, requested: ApprovalRequested) -> None:
    """Show hooks and subscribers what the port appended for this call.

    A deferred port writes ``approval.pending`` and ``approval.consumed`` to the ledger
    itself; read back after the request (its seq is set once durable), they reach
    ``on_event`` hooks and ``subscribe()`` like the executor's own events.
    """
    records: list[Event] = [
        event
        async for event in self.ledger.read(
            after=requested.seq, run_id=requested.run_id, call_id=requested.call_id
        )
        if isinstance(event, ApprovalDeferred | ApprovalConsumed)
    ]
    if records:
        await self._dispatch(records)


async def refuse(
    self: Executor,
    spec: ToolSpec,
    args: Any,
    ctx: CallContext,
    *,
    reviewer: str = "",
    reason: str = "",
    source: str = "port",
) -> bool:
    """Record a call that was denied before it reached the executor; nothing runs.

    A bridge calls this when a framework will never invoke the tool because a reviewer
    said no at the framework's own pause (the OpenAI Agents SDK's ``RunState.reject``),
    so the ledger still shows who denied which arguments. Appends ``call.requested``,
    then ``call.invalid`` for arguments that do not validate, else ``call.validated``,
    ``approval.requested``, ``approval.denied`` and ``call.denied``. No hook, guard,
    limit, cache, effect or body runs. Returns False, recording nothing, when the call
    id already has events (the refusal is already on record, or the call ran).
    ``reviewer`` and ``reason`` follow ``Decision``'s rules (None is "").
    """
    # Normalised (or refused) before anything is recorded, as a Decision's fields are.
    denial = Decision(approved=False, reviewer=reviewer, reason=reason)
    reviewer, reason = denial.reviewer, denial.reason
    if not isinstance(source, str):
        raise ToolUsageError(f"source must be text, not {type(source).__name__}")
    source = text(source)
    if not self._started:
        await self._ensure_started()
    while ctx.run_id in self.state.cold:  # (again if a recall we waited for failed)
        await self._recall(ctx.run_id)
    key = (ctx.run_id, ctx.call_id)
    if key in self.state.outcomes or key in self.state.inflight:
        return False
    mine = appending.set(self._follower)  # ours: never handed back to us
    try:
        await _refused(self, spec, args, ctx, reviewer, reason, source)
    finally:
        appending.reset(mine)
    return True


async def _refused(
    self: Executor,
    spec: ToolSpec,
    args: Any,
    ctx: CallContext,
    reviewer: str,
    reason: str,
    source: str,
) -> None:
    """``refuse``'s records, appended in the executor's name."""
    clock = self._clock
    run = _Run(spec, ctx, clock())
    requested = CallRequested(
        ts=run.t0,
        run_id=ctx.run_id,
        call_id=ctx.call_id,
        tool=spec.name,
        args=self._requested_args(spec, args),
        metadata=ctx.metadata,
    )
    self._emit(run, requested)
    try:
        _args, call_digest = _validated(spec, args)
    except ToolArgsInvalid as exc:
        requested.args = recordable(requested.args)  # (as in run_spec)
        await self._end(run, self._invalid(run, str(exc)), error=exc)
        return
    request_id = os.urandom(16).hex()
    self._emit(
        run,
        CallValidated(
            ts=clock(), run_id=ctx.run_id, call_id=ctx.call_id, tool=spec.name, digest=call_digest
        ),
    )
    self._emit(
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
    denied = _deny(self, run, request_id, call_digest, reviewer, source, reason)
    await self._end(run, denied)
