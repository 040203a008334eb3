"""Step 8 of the pipeline and its operator side: effect keys claimed, resolved, listed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import AmbiguousEffect, DuplicateEffect, ToolUsageError
from ..ledger._events import CallAmbiguous, CallDuplicate, EffectClaimed, EffectResolved
from ..ledger._recordable import text
from ._context import Call
from ._run import _Run, _Stop

if TYPE_CHECKING:
    from ._executor import Executor

__all__ = ["_Stale", "_ambiguous", "_claim", "_render", "ambiguous_effects", "resolve_effect"]


class _Stale(Exception):
    """Internal: the key is claimed by another process as of our last news of it."""


def _render(self: Executor, run: _Run, args: dict[str, Any]) -> str | None:
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
        failed = self._failed(run, error)
        # The call passed the limit check with no counting event since: say so, so
        # that replay counts it as the live executor did.
        inflight = self.state.inflight.get(run.key)
        failed.counted = inflight is not None and inflight.counted
        raise _Stop(failed, error) from None
    return text(key)


def _claim(self: Executor, run: _Run, call: Call, *, fresh: bool = True) -> str:
    """Step 8: claim the call's effect key (``effect.claimed``) and return it.

    A committed key ends the call with ``call.duplicate`` (DuplicateEffect), a key claimed
    by a call with no outcome with ``call.ambiguous`` (AmbiguousEffect); neither runs.
    With ``fresh`` False, a key that is not committed raises ``_Stale``: on a ledger
    shared with other processes its state here may be old (the claimer may have finished
    since), so the caller catches up with the ledger and asks again.
    """
    spec = run.spec
    key = call.effect_key
    assert key is not None
    state = self.state.effects.get(key)
    ctx = run.ctx
    if state is not None:
        if not fresh and state.status != "committed":
            raise _Stale
        now = self._clock()
        if state.status == "committed":
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
        if state.status == "claimed":
            # A claim whose call has not finished as far as we have heard: it may be
            # running right now (here, in another executor, or another process), so
            # nothing here may suggest resolving it by hand (that would run it twice).
            reason = (
                f"effect {key} is claimed by call {state.call_id} (run {state.run_id}), "
                "which has not finished (it may still be running); it does not run "
                "twice: ask again once that call has finished"
            )
        else:
            reason = (
                f"effect {key} is claimed by call {state.call_id} (run {state.run_id}) "
                "whose outcome is unknown; resolve it with resolve_effect"
            )
        raise _ambiguous(self, run, key, reason)
    self._emit(
        run,
        EffectClaimed(
            ts=self._clock(),
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=spec.name,
            key=key,
            digest=call.digest,
        ),
    )
    return key


def _ambiguous(self: Executor, run: _Run, key: str, reason: str) -> _Stop:
    """End the call with ``call.ambiguous`` (AmbiguousEffect): the key's fate is unknown."""
    now = self._clock()
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
    self: Executor, key: str, *, outcome: str, reviewer: str, reason: str | None = None
) -> None:
    """Resolve an ambiguous effect key: ``"failed"`` frees it, ``"committed"`` commits it.

    Recorded as ``effect.resolved``. Raises ToolUsageError for a key that is not
    ambiguous (unknown, committed, or claimed by a call running in this process, a
    timed-out sync body's thread included).
    """
    if outcome not in ("committed", "failed"):
        raise ToolUsageError('outcome must be "committed" or "failed"')
    if not isinstance(reviewer, str) or not reviewer:
        raise ToolUsageError("resolving an effect needs a reviewer name")
    if reason is not None and not isinstance(reason, str):
        raise ToolUsageError(f"reason must be text, not {type(reason).__name__}")
    reviewer, reason = text(reviewer), text(reason or "")
    if not self._started:
        await self._ensure_started()
    state = self.state.effects.get(key)
    if state is None or state.status != "ambiguous":
        status = "unknown" if state is None else state.status
        raise ToolUsageError(f"effect {key} is {status}, not ambiguous; nothing to resolve")
    if key in self._running_keys:
        raise ToolUsageError(
            f"effect {key} is ambiguous but its body is still running in a worker thread "
            "(a sync tool past its timeout); resolve it once that thread has returned"
        )
    await self._record(
        [
            EffectResolved(
                ts=self._clock(),
                run_id=state.run_id,
                call_id=state.call_id,
                key=key,
                outcome=outcome,
                reviewer=reviewer,
                reason=reason,
            )
        ]
    )


def ambiguous_effects(self: Executor) -> dict[str, tuple[str, str]]:
    """Ambiguous keys and the (run_id, call_id) that claimed each."""
    return {
        k: (s.run_id, s.call_id) for k, s in self.state.effects.items() if s.status == "ambiguous"
    }
