"""Steps 3-5 of the pipeline: before_tool hooks, input (and output) guards, run limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import AdapterError, GuardrailBlocked, RunLimitExceeded
from ..ledger import (
    CallBlocked,
    CallInvalid,
    CallLimited,
    Event,
    GuardChecked,
    GuardVerdict,
)
from ..ledger import recordable_text as text
from ._context import Call
from ._pipeline import Pipeline
from ._run import _maybe_await, _name_of, _Run, _scrub, _Stop

__all__ = ["_blocked", "_checks", "_guard", "_invalid", "_limit"]


def _invalid(pipe: Pipeline, run: _Run, message: str) -> Event:
    """The ``call.invalid`` outcome for ``message`` (bad arguments or a bad edit)."""
    now = pipe.clock()
    return CallInvalid(
        ts=now,
        run_id=run.ctx.run_id,
        call_id=run.ctx.call_id,
        tool=run.spec.name,
        duration_ms=(now - run.t0) * 1000.0,
        error=text(message),
    )


def _blocked(pipe: Pipeline, run: _Run, stage: str, by: str, reason: str, kind: str) -> Event:
    """The ``call.blocked`` outcome: ``stage`` hook/input/output, ``by`` the hook or guard."""
    now = pipe.clock()
    return CallBlocked(
        ts=now,
        run_id=run.ctx.run_id,
        call_id=run.ctx.call_id,
        tool=run.spec.name,
        duration_ms=(now - run.t0) * 1000.0,
        stage=stage,
        by=by,
        reason=_scrub(reason, run),
        error_kind=kind,
    )


async def _checks(
    pipe: Pipeline, run: _Run, call: Call, guards: tuple[Callable[..., Any], ...]
) -> Call:
    """Steps 3-5: before_tool hooks, the input ``guards`` (the plan's: the spec's then the
    executor's), run limits."""
    for hook, name in pipe.before:
        try:
            await _maybe_await(hook(call))
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, AdapterError)
                else GuardrailBlocked(f"before_tool hook {name} stopped the call: {exc}")
            )
            if error is not exc:
                error.__cause__ = exc
            raise _Stop(_blocked(pipe, run, "hook", name, str(exc), error.kind), error) from None
    if guards:
        await _guard(pipe, run, call, "input", guards, (call,))
    if pipe.limits is not None:
        _limit(pipe, run, call)
    return call


async def _guard(
    pipe: Pipeline,
    run: _Run,
    call: Call,
    stage: str,
    guards: tuple[Callable[..., Any], ...],
    guard_args: tuple[Any, ...],
) -> None:
    """Run ``guards`` in order; append ``guard.checked``; the first block stops the call.

    Any exception other than GuardrailBlocked blocks too (fail closed), with its error.
    """
    verdicts: list[GuardVerdict] = []
    blocked: GuardrailBlocked | None = None
    for guard in guards:
        name = _name_of(guard)
        try:
            await _maybe_await(guard(*guard_args))
        except GuardrailBlocked as exc:
            blocked = exc
        except Exception as exc:
            # Fail closed: a guard that breaks blocks, with its error recorded.
            blocked = GuardrailBlocked(f"guard {name} failed: {type(exc).__name__}: {exc}")
            blocked.__cause__ = exc
        if blocked is not None:
            verdicts.append(GuardVerdict(name=name, ok=False, reason=_scrub(str(blocked), run)))
            break
        verdicts.append(GuardVerdict(name=name, ok=True))
    pipe.emit(
        run,
        GuardChecked(
            ts=pipe.clock(),
            run_id=run.ctx.run_id,
            call_id=run.ctx.call_id,
            tool=run.spec.name,
            stage=stage,
            verdicts=verdicts,
        ),
    )
    if blocked is not None:
        raise _Stop(
            _blocked(pipe, run, stage, verdicts[-1].name, str(blocked), blocked.kind), blocked
        )


def _limit(pipe: Pipeline, run: _Run, call: Call) -> None:
    """Step 5: ``call.limited`` when the run is over a limit, else count the call (once)."""
    limits = pipe.limits
    assert limits is not None
    inflight = pipe.state.inflight[run.key]
    if inflight.counted:
        return  # an edited call re-checks; it already counts once
    run_id = run.ctx.run_id
    reason = ""
    if limits.max_calls is not None and pipe.state.run_calls.get(run_id, 0) >= limits.max_calls:
        reason = f"run {run_id} reached max_calls={limits.max_calls}"
    per_tool = limits.per_tool(call.tool)
    if (
        not reason
        and per_tool is not None
        and pipe.state.tool_calls.get((run_id, call.tool), 0) >= per_tool
    ):
        reason = f"run {run_id} reached max_calls_per_tool={per_tool} for {call.tool}"
    if reason:
        now = pipe.clock()
        raise _Stop(
            CallLimited(
                ts=now,
                run_id=run_id,
                call_id=run.ctx.call_id,
                tool=call.tool,
                duration_ms=(now - run.t0) * 1000.0,
                reason=reason,
            ),
            RunLimitExceeded(reason),
        )
    # Counted now, with no await since the check: concurrent calls cannot both pass.
    pipe.state.count(run_id, inflight)
