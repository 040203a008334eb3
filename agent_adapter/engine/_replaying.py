"""Step 0 of the pipeline: a repeat of (run_id, call_id) never runs the tool again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec

from ..errors import (
    AmbiguousEffect,
    ApprovalDenied,
    ApprovalPending,
    DuplicateEffect,
    EffectInFlight,
    RunLimitExceeded,
    ToolArgsInvalid,
    ToolFailed,
    ToolTimeout,
    ToolUsageError,
    error_from_kind,
)
from ..ledger import (
    IN_FLIGHT,
    CallAmbiguous,
    CallBlocked,
    CallCached,
    CallCancelled,
    CallDenied,
    CallDuplicate,
    CallFailed,
    CallInvalid,
    CallLimited,
    CallPending,
    CallReplayed,
    CallSucceeded,
    CallTimedOut,
    Event,
)
from ._context import CallContext
from ._pipeline import Pipeline
from ._run import _validated
from ._spec import ToolSpec

__all__ = ["_repeat", "_replayed_value", "recorded_error", "typed_result"]


async def _repeat(pipe: Pipeline, spec: ToolSpec, args: Any, ctx: CallContext) -> Any:
    """Step 0: a repeat of a known (run_id, call_id); the body never runs again.

    Same digest: ``call.replayed`` and the recorded value or error. Other digest:
    ToolUsageError. A started call without an outcome: AmbiguousEffect.
    """
    key = (ctx.run_id, ctx.call_id)
    recorded = pipe.state.outcomes.get(key)
    if recorded is None:
        raise AmbiguousEffect(
            f"call {ctx.call_id} (run {ctx.run_id}) already started and has no outcome "
            "(still running, or its process died); it does not run again"
        )
    recorded_digest, tag = recorded
    try:
        repeat_digest: str | None = _validated(spec, args)[1]
    except ToolArgsInvalid:
        repeat_digest = None
    if repeat_digest != recorded_digest:
        raise ToolUsageError(
            f"call {ctx.call_id} (run {ctx.run_id}) already ran with other arguments; "
            "a call id cannot be reused for new arguments"
        )
    outcome = await _last_outcome(pipe.ledger.read(run_id=ctx.run_id, call_id=ctx.call_id))
    # (An in-flight refusal's tag is IN_FLIGHT, not its event type: nothing to compare.)
    missed = outcome is None or (outcome.type != tag and tag != IN_FLIGHT)
    if missed and ctx.run_id not in pipe.state.pinned:
        # The projection has an outcome (of type ``tag``) that the read by (call, run) did
        # not find: it went through an index that misses it (a damaged one), or found an
        # earlier attempt's only. The table, read in seq order without an index, has it.
        found = await _last_outcome(
            event
            async for event in pipe.ledger.read()
            if event.run_id == ctx.run_id and event.call_id == ctx.call_id
        )
        outcome = found if found is not None else outcome
    if outcome is None:
        if ctx.run_id in pipe.state.pinned:
            # The first call finished a moment ago and its outcome is still being written.
            raise AmbiguousEffect(
                f"call {ctx.call_id} (run {ctx.run_id}) has just finished and its outcome "
                "is still being written; it does not run again (ask again to get its value)"
            )
        raise ToolUsageError(f"the outcome of call {ctx.call_id} is not in the ledger")
    await pipe.record(
        [
            CallReplayed(
                ts=pipe.clock(),
                run_id=ctx.run_id,
                call_id=ctx.call_id,
                tool=spec.name,
                digest=recorded_digest or "",
                outcome_seq=outcome.seq,
            )
        ]
    )
    return typed_result(spec, _replayed_value(pipe, outcome))


async def _last_outcome(events: AsyncIterator[Event]) -> Event | None:
    """The last outcome in ``events`` (one call's): earlier attempts of a call id ended in
    in-flight refusals, which are not final (redecided); the call's is its last attempt's."""
    outcome: Event | None = None
    async for event in events:
        if event.is_outcome:
            outcome = event
    return outcome


def typed_result(spec: ToolSpec, value: Any) -> Any:
    """A value stored as JSON (cache, ledger) as the tool's declared return type.

    The first call returns what the body returned (a Struct, a dataclass, a datetime);
    a cache hit or a replay gets the same type back, not its JSON form. A value that
    does not fit the annotation (the body broke its own signature) stays as stored.
    """
    result_type = spec.result_type
    if result_type is None:
        return value
    try:
        # strict: only the conversions JSON needs (text to datetime, bytes, UUID, ...),
        # never "false" to False or 2.0 to 2 for a value that broke its annotation.
        return msgspec.convert(value, result_type, strict=True)
    except Exception:  # any failure (a __post_init__ too): as stored
        return value


def _replayed_value(pipe: Pipeline, outcome: Event) -> Any:
    """The recorded outcome's value, or raise its error (ToolUsageError when none)."""
    if isinstance(outcome, CallSucceeded):
        if outcome.redacted:
            raise ToolUsageError(
                f"call {outcome.call_id} succeeded but its result was stored only as a "
                "digest (redact_result); it cannot be replayed"
            )
        return outcome.result
    if isinstance(outcome, CallCached):
        return outcome.result
    if isinstance(outcome, CallCancelled):
        raise ToolUsageError(f"call {outcome.call_id} was cancelled; it has no value to replay")
    error = recorded_error(outcome)
    raise error


def recorded_error(outcome: Event) -> BaseException:
    """The error a recorded outcome stands for, rebuilt from its kind and fields."""
    if isinstance(outcome, CallFailed):
        return error_from_kind(outcome.error_kind, outcome.error)
    if isinstance(outcome, CallTimedOut):
        return ToolTimeout(f"{outcome.tool} did not finish within {outcome.timeout_s} s")
    if isinstance(outcome, CallInvalid):
        return ToolArgsInvalid(outcome.error)
    if isinstance(outcome, CallBlocked):
        return error_from_kind(outcome.error_kind, outcome.reason)
    if isinstance(outcome, CallLimited):
        return RunLimitExceeded(outcome.reason)
    if isinstance(outcome, CallDenied):
        return ApprovalDenied(f"{outcome.tool} was not approved: {outcome.reason}")
    if isinstance(outcome, CallPending):
        return ApprovalPending(request_id=outcome.request_id)
    if isinstance(outcome, CallDuplicate):
        return DuplicateEffect(
            f"effect {outcome.key} was already committed by call {outcome.by_call_id}",
            key=outcome.key,
            run_id=outcome.by_run_id,
            call_id=outcome.by_call_id,
            same_args=outcome.same_args,
        )
    if isinstance(outcome, CallAmbiguous):
        if outcome.in_flight:
            return EffectInFlight(outcome.reason, key=outcome.key)
        return AmbiguousEffect(outcome.reason, key=outcome.key)
    return ToolFailed(f"unknown recorded outcome {outcome.type}")
