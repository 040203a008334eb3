"""What the steps of one executor's calls read and write, in one object passed to each.

``Executor.__init__`` builds one ``Pipeline`` and every step function of the pipeline
(``_checking``, ``_approving``, ``_effects``, ``_executing``, ``_replaying``,
``_outcome``) takes it as its first argument: a reader of a step sees everything it may
touch here, and the step modules never import the executor (no import cycle).

What is fixed at construction (the ledger and its append path, the clock, the hooks'
methods, the guards, the limits, the approval port, the effect lease settings, this
executor's id) is set once; what changes over its life is named so: ``state`` (replaced
when ``start`` replays the ledger), ``follower`` and ``shared`` (set by ``start``),
``observed`` (subscribers come and go).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import AdapterError
from ..ledger import (
    CallFailed,
    Event,
    Follow,
    HookFailed,
    UnrecordableEvent,
    append_repaired,
    appending,
)
from ..ledger import recordable_text as text
from ._context import Call, Outcome
from ._extensions import ApprovalPort, CatchUp, Store
from ._holders import process_start
from ._leases import Leases
from ._limits import RunLimits
from ._run import _maybe_await, _Run, _scrub
from ._state import Projection

__all__ = ["Around", "Pipeline", "compose_around"]

#: The composed ``around_body`` chain: ``around(call, body)`` runs ``body()`` (the tool
#: body's awaitable) inside every hook's ``around_body``.
Around = Callable[[Call, Callable[[], Awaitable[Any]]], Awaitable[Any]]


class Pipeline:
    """One executor's call-path state and its plumbing: the buffer, the append, the
    dispatch to hooks and subscribers."""

    __slots__ = (
        "after",
        "always_full",
        "append_now",
        "approval",
        "around",
        "background",
        "before",
        "catch_up",
        "clock",
        "executor_id",
        "follower",
        "guards",
        "host",
        "lease_s",
        "leases",
        "ledger",
        "limits",
        "observed",
        "on_event",
        "output_guards",
        "pid",
        "pid_start",
        "running_keys",
        "shared",
        "skew_margin_s",
        "state",
        "subscribers",
        "sync_appends",
        "waiters",
    )

    def __init__(
        self,
        *,
        ledger: Store,
        state: Projection,
        clock: Callable[[], float],
        approval: ApprovalPort | None,
        limits: RunLimits | None,
        before: tuple[tuple[Callable[..., Any], str], ...],
        after: tuple[tuple[Callable[..., Any], str], ...],
        on_event: tuple[tuple[Callable[..., Any], str], ...],
        around: Around | None,
        guards: tuple[Callable[..., Any], ...],
        output_guards: tuple[Callable[..., Any], ...],
        executor_id: str,
        pid: int,
        host: str,
        lease_s: float,
        skew_margin_s: float,
        sync_appends: bool,
        append_now: Callable[[list[Event]], None] | None,
    ) -> None:
        self.ledger = ledger
        #: the ledger's ``catch_up`` (a store other processes write to), checked once
        self.catch_up: Callable[[], Any] | None = (
            ledger.catch_up if isinstance(ledger, CatchUp) else None
        )
        self.state = state
        self.clock = clock
        self.approval = approval
        self.limits = limits
        self.before = before
        self.after = after
        self.on_event = on_event
        #: the hooks' ``around_body`` methods composed into one (None: no hook has one)
        self.around = around
        # What sends every call down the full path, fixed for this executor's life
        # (``observed`` is not: subscribers come and go).
        self.always_full = bool(after or output_guards or around is not None)
        self.guards = guards
        self.output_guards = output_guards
        self.executor_id = executor_id
        self.pid = pid
        #: this process's start time, recorded in its claims (see _holders)
        self.pid_start = process_start(pid)
        self.host = host
        self.lease_s = lease_s
        self.skew_margin_s = skew_margin_s
        # A MemoryLedger appends without suspending (nothing can see an event applied
        # and not stored), and is written with no coroutine at all (append_now).
        self.sync_appends = sync_appends
        self.append_now = append_now
        self.subscribers: list[asyncio.Queue[Event]] = []
        self.observed = bool(on_event)
        # This executor as a follower of its ledger (set by start): its appends are made
        # in its name (``appending``), so that the ledger never hands them back to it.
        self.follower: Follow | None = None
        # True once started on a ledger other processes may append to.
        self.shared = False
        #: effect keys whose sync body is still running in a worker thread
        self.running_keys: dict[str, int] = {}
        # Tasks that outlive the call that started them (see unpin_when_written).
        self.background: set[asyncio.Task[None]] = set()
        #: effect key -> set when the outcome of this executor's call holding it is
        #: written: calls of this executor that met that claim in flight wait for it
        self.waiters: dict[str, asyncio.Event] = {}
        #: running effect calls' leases, renewed on one timer
        self.leases = Leases(clock, lease_s, self.record)

    def emit(self, run: _Run, event: Event) -> None:
        """Fold ``event`` now (so checks and claims are atomic); durable at the next flush."""
        self.state.apply(event)
        run.buffer.append(event)

    async def append(self, events: list[Event]) -> None:
        """``ledger.append_many(events)``; an event the ledger refuses as unrecordable
        (a value that got past the boundary checks) is repaired and the batch appended
        again, so that a call never ends without its outcome for want of a value."""
        try:
            append_now = self.append_now
            if append_now is not None:
                append_now(events)  # a MemoryLedger: stored now, no coroutine
            else:
                await self.ledger.append_many(events)
        except UnrecordableEvent as refused:
            await append_repaired(self.ledger, events, refused)

    async def flush(self, run: _Run) -> None:
        """Make the call's buffered events durable, then show them to observers."""
        if not run.buffer:
            return
        events, run.buffer = run.buffer, []
        await self.append(events)
        if self.observed:
            await self.dispatch(events)

    async def record(self, events: list[Event]) -> None:
        """Append events outside any call (``effect.resolved``, ``call.replayed``, ...)."""
        for event in events:
            self.state.apply(event)
        mine = appending.set(self.follower)  # ours: never handed back to us
        try:
            await self.append(events)
            if self.observed:
                await self.dispatch(events)
        finally:
            appending.reset(mine)

    async def dispatch(self, events: list[Event]) -> None:
        """Hand ``events`` to subscribers and ``on_event`` hooks (appends ``hook.failed``)."""
        for event in events:
            for queue in self.subscribers:
                queue.put_nowait(event)
            for hook, name in self.on_event:
                try:
                    await _maybe_await(hook(event))
                except Exception as exc:
                    await self.hook_failed(event, name, "on_event", exc)

    async def hook_failed(self, about: Event, name: str, stage: str, exc: Exception) -> None:
        """Appends ``hook.failed``. Observers never change a call's outcome; their
        failure is a record, not dispatched to on_event hooks again (it cannot loop)."""
        failed = HookFailed(
            ts=self.clock(),
            run_id=about.run_id,
            call_id=about.call_id,
            tool=about.tool,
            hook=name,
            stage=stage,
            error=text(f"{type(exc).__name__}: {exc}"),
        )
        await self.append([failed])
        for queue in self.subscribers:
            queue.put_nowait(failed)

    async def after_hooks(self, call: Call, outcome: Outcome, about: Event) -> None:
        """``after_tool`` hooks, in order; one that raises is a ``hook.failed`` record."""
        for hook, name in self.after:
            try:
                await _maybe_await(hook(call, outcome))
            except Exception as exc:
                await self.hook_failed(about, name, "after_tool", exc)

    def failed(self, run: _Run, error: AdapterError) -> CallFailed:
        """The ``call.failed`` outcome of ``error`` (its message scrubbed of redactions)."""
        now = self.clock()
        return CallFailed(
            ts=now,
            run_id=run.ctx.run_id,
            call_id=run.ctx.call_id,
            tool=run.spec.name,
            duration_ms=(now - run.t0) * 1000.0,
            error_kind=error.kind,
            error=_scrub(str(error), run),
        )

    def wake(self, run: _Run) -> None:
        """``run``'s outcome is written (or will never be): wake the calls waiting for
        the effect key it held."""
        call = run.call
        if call is not None and call.effect_key is not None:
            waiting = self.waiters.pop(call.effect_key, None)
            if waiting is not None:
                waiting.set()

    def unpin_when_written(self, run_id: str) -> None:
        """The caller was cancelled while its outcome was being appended; the append may
        still land (SQLite's writer finishes its queue). The run stays warm until the
        ledger has caught up past it, or for good when the ledger cannot say."""
        catch_up = self.catch_up
        if catch_up is None:
            return
        state = self.state

        async def later() -> None:
            try:
                await catch_up()
            except Exception:
                return  # not known to be written: stays pinned (warm), which is safe
            state.unpin(run_id)

        task = asyncio.ensure_future(later())
        self.background.add(task)
        task.add_done_callback(self.background.discard)


def compose_around(
    arounds: tuple[Callable[[Call, Callable[[], Awaitable[Any]]], Awaitable[Any]], ...],
) -> Around | None:
    """The hooks' ``around_body`` methods as one callable, built once, in reverse (as
    temporalio's interceptors): the first hook is the outermost, and ``next()`` of the
    last runs the body. None when no hook has one, so that a call pays nothing."""
    if not arounds:
        return None

    def innermost(call: Call, body: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
        return body()

    chain: Around = innermost
    for around in reversed(arounds):
        chain = _link(around, chain)
    return chain


def _link(
    around: Callable[[Call, Callable[[], Awaitable[Any]]], Awaitable[Any]], inner: Around
) -> Around:
    def link(call: Call, body: Callable[[], Awaitable[Any]]) -> Awaitable[Any]:
        return around(call, lambda: inner(call, body))

    return link
