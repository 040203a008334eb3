"""Step 10's last part: the one writer of every call's outcome.

Every outcome (a success, a refusal, a failure, a cancel) is written by ``write``: it is
folded into the projection, appended with whatever the call still had buffered, and the
run stays warm (``Projection.pin``) until the append has landed, so that a repeat of the
call id never finds the run evicted with its outcome applied and not yet durable. A
MemoryLedger appends without suspending, so nothing can see the gap: no pin there.

``end`` is ``write`` followed by what observers get (``on_event`` hooks, subscribers,
``after_tool`` hooks); ``end_cancelled`` writes a cancelled call's outcome in a shielded
task, so that a second cancel cannot tear the append in half.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ..ledger import CallCancelled, Event, UnrecordableEvent, append_repaired
from ._context import Outcome
from ._pipeline import Pipeline
from ._run import _Run
from ._state import Projection

__all__ = ["end", "end_cancelled", "write"]


async def write(pipe: Pipeline, run: _Run, outcome: Event) -> list[Event]:
    """Record ``outcome`` (durable before this returns) with the call's buffered events;
    returns the events written. Appends the buffer and the outcome, in one batch."""
    state = pipe.state
    run_id = run.ctx.run_id
    pin = not pipe.sync_appends
    if pin:
        state.pin(run_id)  # warm until the outcome is written (see Projection.pinned)
    try:
        # Every outcome type folds through Projection._outcome: called directly (the
        # type is known to be an outcome), not through apply's dispatch.
        state._outcome(outcome)
        run.buffer.append(outcome)
        run.ended = True
        events, run.buffer = run.buffer, []
        append_now = pipe.append_now
        if append_now is not None:
            try:
                append_now(events)  # a MemoryLedger: stored now, no coroutine
            except UnrecordableEvent as refused:  # (never for what the boundary checked)
                await append_repaired(pipe.ledger, events, refused)
        else:
            await pipe.append(events)
    except asyncio.CancelledError:
        if pin:
            pipe.unpin_when_written(run_id)
        raise
    except BaseException:
        if pin:
            state.unpin(run_id)
        if pipe.waiters:
            pipe.wake(run)
        raise
    if pin:
        state.unpin(run_id)
    if pipe.waiters:
        pipe.wake(run)  # durable now: a waiting same-key call decides again
    return events


async def end(
    pipe: Pipeline, run: _Run, outcome: Event, value: Any = None, error: BaseException | None = None
) -> None:
    """``write`` the outcome, then show it: ``on_event`` hooks and subscribers, then
    ``after_tool`` hooks (for a call that reached its body)."""
    events = await write(pipe, run, outcome)
    if pipe.observed:
        await pipe.dispatch(events)
    if run.reached_body and pipe.after and run.call is not None:
        kind = outcome.type.rpartition(".")[2]
        await pipe.after_hooks(run.call, Outcome(kind=kind, value=value, error=error), outcome)


async def end_cancelled(pipe: Pipeline, run: _Run) -> None:
    """A cancelled call's outcome (``call.cancelled``), unless it has one: written in a
    shielded task (a second cancel cannot tear the append in half), then shown."""
    if run.ended:
        return
    clock = pipe.clock
    ctx = run.ctx
    inflight = pipe.state.inflight.get(run.key)
    cancelled = CallCancelled(
        ts=clock(),
        run_id=ctx.run_id,
        call_id=ctx.call_id,
        tool=run.spec.name,
        duration_ms=(clock() - run.t0) * 1000.0,
        started=run.started,
        counted=inflight is not None and inflight.counted,
    )
    state = pipe.state
    run_id = run.ctx.run_id
    # Pinned here, unpinned when the task is done (written, or failed for good): the
    # caller's cancel does not end the write.
    state.pin(run_id)
    state._outcome(cancelled)
    run.buffer.append(cancelled)
    run.ended = True
    events, run.buffer = run.buffer, []
    task = asyncio.ensure_future(pipe.append(events))
    task.add_done_callback(lambda t: _unpin_done(state, run_id, t))
    task.add_done_callback(lambda _: pipe.wake(run))
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.shield(task)
    if pipe.observed and task.done() and not task.cancelled():
        await pipe.dispatch(events)
    if run.reached_body and pipe.after and run.call is not None:
        # after_tool sees every outcome of a call that reached the body.
        with contextlib.suppress(asyncio.CancelledError):
            await pipe.after_hooks(
                run.call, Outcome(kind="cancelled", error=asyncio.CancelledError()), cancelled
            )


def _unpin_done(state: Projection, run_id: str, task: asyncio.Future[Any]) -> None:
    """A shielded outcome append finished: written (or failed for good), so unpin; its
    error was the cancelled caller's and has no one left to hear it."""
    if not task.cancelled():
        task.exception()
    state.unpin(run_id)
