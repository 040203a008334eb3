"""Step 8 of the pipeline and its operator side: effect keys claimed, resolved, listed."""

from __future__ import annotations

from typing import Any

from ..errors import AmbiguousEffect, DuplicateEffect, EffectInFlight, ToolUsageError
from ..ledger import (
    AMBIGUOUS,
    IN_FLIGHT,
    CallAmbiguous,
    CallDuplicate,
    EffectClaimed,
    EffectResolved,
    lease_live,
    lease_text,
)
from ..ledger import recordable_text as text
from ._context import Call
from ._pipeline import Pipeline
from ._run import _Run, _Stop
from ._state import EffectState

__all__ = [
    "_Ours",
    "_Stale",
    "_ambiguous",
    "_claim",
    "_render",
    "ambiguous_effects",
    "effect_status",
    "in_flight_effects",
    "lease_text",
    "resolve_effect",
]


def _in_flight_reason(key: str, state: EffectState) -> str:
    # Never "resolve it": the holder is alive and its body may be running right now, so
    # resolving the key as failed would run the effect a second time beside it. "Retry
    # later": this refusal is not final for the call id (redecided), so the same call
    # asked again decides again; the key still dedups it.
    return (
        f"effect {key} is in flight: held by {state.holder_text()} for call "
        f"{state.call_id} (run {state.run_id}), lease until {lease_text(state.lease_until)}; "
        "it does not run twice: retry later, once that call has finished (the same call "
        "id decides again)"
    )


class _Stale(Exception):
    """Internal: the key is claimed by another process as of our last news of it."""


class _Ours(Exception):
    """Internal: the key is in flight for another call of this very executor: wait for
    that call's outcome, then decide again (as a duplicate would be, or run)."""


def _render(pipe: Pipeline, run: _Run, args: dict[str, Any]) -> str | None:
    """The effect key of ``args`` (None for a tool without one), rendered right after
    validation (and again after an edit), so that confirm rules, guards and hooks see
    the key the call will claim. A template that cannot be rendered ends the call with
    ``call.failed`` (ToolUsageError)."""
    spec = run.spec
    if spec.effect is None:
        return None
    try:
        key = spec.effect_key(args)
        if not isinstance(key, str):
            raise TypeError(f"it is {type(key).__name__}, not text")
    except Exception as exc:
        error = ToolUsageError(f"effect key of {spec.name} cannot be rendered: {exc}")
        failed = pipe.failed(run, error)
        # The call passed the limit check with no counting event since: say so, so
        # that replay counts it as the live executor did.
        inflight = pipe.state.inflight.get(run.key)
        failed.counted = inflight is not None and inflight.counted
        raise _Stop(failed, error) from None
    return text(key)


def _claim(
    pipe: Pipeline,
    run: _Run,
    call: Call,
    *,
    fresh: bool = True,
    wait: bool = False,
    settled: bool = True,
) -> str:
    """Step 8: claim the call's effect key (``effect.claimed``) and return it.

    A committed key ends the call with ``call.duplicate`` (DuplicateEffect), a key claimed
    by a call with no outcome with ``call.ambiguous`` (AmbiguousEffect); neither runs.
    With ``fresh`` False, a key that is not committed raises ``_Stale``: on a ledger
    shared with other processes its state here may be old (the claimer may have finished
    since), so the caller catches up with the ledger and asks again. With ``wait``, a
    key in flight for another call of this executor raises ``_Ours`` instead of the
    in-flight refusal: its outcome is known here the moment it is written. With
    ``settled`` False, a claim whose holder is gone or whose lease ran out raises
    ``_Stale`` rather than ``call.ambiguous``: the holder may have written its outcome
    just before it stopped, and only news read after its end proves it left none.
    """
    spec = run.spec
    key = call.effect_key
    assert key is not None
    state = pipe.state.effects.get(key)
    ctx = run.ctx
    if state is not None:
        if not fresh and state.status != "committed":
            raise _Stale
        now = pipe.clock()
        status = state.status_at(now, pipe.skew_margin_s, pipe.host)
        if not settled and status == AMBIGUOUS and state.status == "claimed":
            raise _Stale
        if status == "committed":
            same = state.digest == call.digest
            message = (
                f"effect {key} was already committed by call {state.call_id} "
                f"(run {state.run_id}) "
                + ("with the same arguments" if same else "with other arguments (conflict)")
            )
            raise _Stop(
                CallDuplicate(
                    ts=now,
                    run_id=ctx.run_id,
                    call_id=ctx.call_id,
                    tool=spec.name,
                    duration_ms=(now - run.t0) * 1000.0,
                    key=key,
                    by_run_id=state.run_id,
                    by_call_id=state.call_id,
                    same_args=same,
                ),
                DuplicateEffect(
                    message,
                    key=key,
                    run_id=state.run_id,
                    call_id=state.call_id,
                    same_args=same,
                ),
            )
        if status == IN_FLIGHT:
            if (
                wait
                and state.holder == pipe.executor_id
                and state.pid == pipe.pid
                and state.host == pipe.host
            ):
                raise _Ours
            reason = _in_flight_reason(key, state)
            stop = _ambiguous(pipe, run, key, reason)
            assert isinstance(stop.outcome, CallAmbiguous)
            stop.outcome.in_flight = True
            stop.error = EffectInFlight(
                reason,
                key=key,
                holder=state.holder,
                pid=state.pid,
                host=state.host,
                lease_until=state.lease_until,
            )
            raise stop
        if status == "claimed":
            # A claim (with no lease: an older writer's) whose call has not finished as
            # far as we have heard: it may be
            # running right now (here, in another executor, or another process), so
            # nothing here may suggest resolving it by hand (that would run it twice).
            reason = (
                f"effect {key} is claimed by call {state.call_id} (run {state.run_id}), "
                "which has not finished (it may still be running); it does not run "
                "twice: ask again once that call has finished"
            )
        elif state.status == "claimed" and lease_live(state.lease_until, now, pipe.skew_margin_s):
            # Its lease still runs, but its process on this host is gone (status_at).
            reason = (
                f"effect {key} is claimed by call {state.call_id} (run {state.run_id}) "
                f"whose holder, {state.holder_text()}, is no longer running (its process "
                "is gone) and left no outcome; it may or may not have happened: check, "
                "then resolve it with resolve_effect"
            )
        elif state.lease_until and state.status == "claimed":
            # The lease expired with no outcome: the holder died (or stopped renewing).
            reason = (
                f"effect {key} is claimed by call {state.call_id} (run {state.run_id}) "
                f"whose holder, {state.holder_text()}, stopped renewing its lease "
                f"(expired {lease_text(state.lease_until)}) with no outcome; it may or may "
                "not have happened: check, then resolve it with resolve_effect"
            )
        else:
            reason = (
                f"effect {key} is claimed by call {state.call_id} (run {state.run_id}) "
                "whose outcome is unknown; resolve it with resolve_effect"
            )
        raise _ambiguous(pipe, run, key, reason)
    pipe.emit(
        run,
        EffectClaimed(
            ts=pipe.clock(),
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=spec.name,
            key=key,
            digest=call.digest,
            holder=pipe.executor_id,
            pid=pipe.pid,
            host=pipe.host,
            pid_start=pipe.pid_start,
            # Renewed every third of it while the body runs (_executing._Lease).
            lease_until=pipe.clock() + pipe.lease_s,
        ),
    )
    return key


def _ambiguous(pipe: Pipeline, run: _Run, key: str, reason: str) -> _Stop:
    """End the call with ``call.ambiguous`` (AmbiguousEffect): the key's fate is unknown."""
    now = pipe.clock()
    return _Stop(
        CallAmbiguous(
            ts=now,
            run_id=run.ctx.run_id,
            call_id=run.ctx.call_id,
            tool=run.spec.name,
            duration_ms=(now - run.t0) * 1000.0,
            key=key,
            reason=reason,
        ),
        AmbiguousEffect(reason, key=key),
    )


async def resolve_effect(
    pipe: Pipeline,
    key: str,
    *,
    outcome: str,
    reviewer: str,
    reason: str,
    force: bool = False,
) -> None:
    """Resolve an ambiguous effect key: ``"failed"`` frees it, ``"committed"`` commits it.

    Recorded as ``effect.resolved``. Raises ToolUsageError for a key that is not
    ambiguous: unknown, committed, in flight (its holder's lease is live: its body may be
    running now, and a key resolved as failed would run again beside it), or claimed by
    a call running in this process (a timed-out sync body's thread included). With
    ``force=True``, an in-flight key (or a claim with no lease) is resolved anyway, for
    a holder known to be gone before its lease ends; recorded with ``forced`` (the
    audit reports it).
    """
    state = pipe.state.effects.get(key)
    status = (
        "unknown" if state is None else state.status_at(pipe.clock(), pipe.skew_margin_s, pipe.host)
    )
    forced = False
    if state is not None and status in (IN_FLIGHT, "claimed") and force:
        forced = True
    elif status == IN_FLIGHT:
        assert state is not None
        raise ToolUsageError(
            f"effect {key} is in flight, not ambiguous: held by {state.holder_text()} for "
            f"call {state.call_id} (run {state.run_id}), lease until "
            f"{lease_text(state.lease_until)}; its body may be running now, so it is not "
            "resolved: wait for that call's outcome, or for its lease to expire "
            "(force overrides this only for a holder known to be gone)"
        )
    elif status != AMBIGUOUS:
        raise ToolUsageError(f"effect {key} is {status}, not ambiguous; nothing to resolve")
    assert state is not None
    if key in pipe.running_keys:
        raise ToolUsageError(
            f"effect {key} is ambiguous but its body is still running in a worker thread "
            "(a sync tool past its timeout); resolve it once that thread has returned"
        )
    await pipe.record(
        [
            EffectResolved(
                ts=pipe.clock(),
                run_id=state.run_id,
                call_id=state.call_id,
                key=key,
                outcome=outcome,
                reviewer=reviewer,
                reason=reason,
                forced=forced,
            )
        ]
    )


def effect_status(pipe: Pipeline, key: str) -> str:
    """The key's status now: ``committed``, ``ambiguous``, ``in flight`` (its holder's
    lease is live), ``claimed`` (a live claim with no lease) or ``unknown``."""
    state = pipe.state.effects.get(key)
    if state is None:
        return "unknown"
    return state.status_at(pipe.clock(), pipe.skew_margin_s, pipe.host)


def ambiguous_effects(pipe: Pipeline) -> dict[str, tuple[str, str]]:
    """Ambiguous keys (claims whose outcome is unknown and whose holder's lease, if any,
    has expired) and the (run_id, call_id) that claimed each."""
    now, margin, host = pipe.clock(), pipe.skew_margin_s, pipe.host
    return {
        k: (s.run_id, s.call_id)
        for k, s in pipe.state.effects.items()
        if s.status_at(now, margin, host) == AMBIGUOUS
    }


def in_flight_effects(pipe: Pipeline) -> dict[str, EffectState]:
    """Keys whose holder's lease is live (their calls have no outcome yet): each key's
    state names the holder (``holder``, ``pid``, ``host``) and ``lease_until``."""
    now, margin, host = pipe.clock(), pipe.skew_margin_s, pipe.host
    return {
        k: s for k, s in pipe.state.effects.items() if s.status_at(now, margin, host) == IN_FLIGHT
    }
