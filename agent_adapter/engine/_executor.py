"""The executor: one pipeline for every tool call, every step a ledger event.

Steps (DESIGN.md, "Executor.run_spec pipeline"): 0 replay-safe repeat, 1 requested,
2 validate, 3 before_tool hooks, 4 input guards, 5 run limits, 6 approval, 7 cache,
8 effect claim, 9 started + body under timeout, 10 output guards and exactly one outcome.

Steps 0 (``_replaying``), 3-5 (``_checking``), 6 (``_approving``), 7-10 (``_executing``),
8 (``_effects``) and the outcome writer (``_outcome``) live in their own modules as
functions of a ``Pipeline`` (``_pipeline``): what a step may touch is its arguments. The
executor owns the lifecycle (start, replay, follow, recall, close) and the entry points.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from ..errors import AdapterError, LedgerError, ToolArgsInvalid, ToolUsageError
from ..ledger import (
    DEFAULT_LEASE_S,
    DEFAULT_SKEW_MARGIN_S,
    IN_FLIGHT,
    CallRequested,
    CallValidated,
    ChainWatch,
    Event,
    Follow,
    MemoryLedger,
    appending,
    checked_clock,
    decode_event,
    recordable,
)
from ..ledger import recordable_text as text
from ._approval import Decision
from ._approving import _approve, _refused
from ._checking import _checks, _invalid
from ._context import Call, CallContext, _current
from ._effects import (
    _render,
    ambiguous_effects,
    effect_status,
    in_flight_effects,
    resolve_effect,
)
from ._exchanges import _running
from ._executing import _execute, _unchanged
from ._extensions import (
    AppendsNow,
    ApprovalPort,
    Followable,
    Guard,
    Hook,
    Keyed,
    Opens,
    OutputGuard,
    RecordReader,
    Store,
)
from ._holders import host_identity
from ._limits import RunLimits
from ._options import (
    check_approval,
    check_clock,
    check_guards,
    check_hooks,
    check_ledger,
    check_limits,
    check_seconds,
)
from ._outcome import end, end_cancelled
from ._pipeline import Pipeline, compose_around
from ._plan import Plan, plan_of
from ._prepare import Prepared, prepare
from ._replaying import _repeat, recorded_error
from ._run import _name_of, _Run, _Stop, _validated, new_id, requested_args
from ._spec import Registry, ToolSpec, check_registry
from ._state import EffectState, Projection

__all__ = ["Executor", "get_default_executor"]

_log = logging.getLogger("agent_adapter")


class Executor:
    """Runs tool calls through the pipeline and records every step in the ledger.

    ``Executor(registry=None, *, ledger=None, approval=None, hooks=(), guards=(),
    output_guards=(), limits=None, clock=None, lease_s=30.0, skew_margin_s=5.0)``.
    ``lease_s``: how long an effect claim stays *in flight* without renewal (the holder
    renews it every third of that while the body runs); ``skew_margin_s``: how long past
    another holder's lease (its clock) this executor still takes it for alive. Without a
    ledger it keeps a
    ``MemoryLedger``; without an approval port, calls that need approval are denied
    unless their context carries a decision. Open one on an existing ledger with
    ``await Executor.open(...)`` so that its projections are rebuilt first.

    The extension points are typed in ``agent_adapter.engine`` (``_extensions``):
    ``ledger`` a ``Store``, ``approval`` an ``ApprovalPort``, ``hooks`` objects with any
    of ``before_tool``, ``after_tool``, ``on_event`` and ``around_body`` (``Hook``; the
    ``around_body`` methods wrap the tool body, the first hook outermost), ``guards`` and
    ``output_guards`` functions (``Guard``, ``OutputGuard``). All of it is composed here,
    once, into the ``Pipeline`` every step is given.

    The options are checked here, once: a path as ``ledger``, a function as ``approval``,
    a dict as ``limits``, a hook with no hook method or a guard that cannot take its
    arguments is a ``ToolUsageError`` saying what to pass.
    """

    #: The error a recorded outcome stands for (``agent_adapter.engine.recorded_error``).
    recorded_error = staticmethod(recorded_error)
    #: What ``call.requested`` records of a call's arguments (``_run.requested_args``).
    _requested_args = staticmethod(requested_args)

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        ledger: Store | None = None,
        approval: ApprovalPort | None = None,
        hooks: Sequence[Hook] = (),
        guards: Sequence[Guard] = (),
        output_guards: Sequence[OutputGuard] = (),
        limits: RunLimits | None = None,
        clock: Callable[[], float] | None = None,
        remember: int | None = 250_000,
        lease_s: float = DEFAULT_LEASE_S,
        skew_margin_s: float = DEFAULT_SKEW_MARGIN_S,
    ) -> None:
        if remember is not None and (not isinstance(remember, int) or remember < 1):
            raise ToolUsageError("remember must be a positive number of calls, or None")
        # Checked once, here: a wrong option is then one error saying what to pass, not an
        # AttributeError (or every call denied, or a hook never called) at a later call.
        check_registry(registry)
        check_ledger(ledger)
        check_approval(approval)
        check_limits(limits)
        check_clock(clock)
        hooks = check_hooks(hooks)
        guards = check_guards("guards", guards, output=False)
        output_guards = check_guards("output_guards", output_guards, output=True)
        lease_s = check_seconds("lease_s", lease_s, positive=True)
        skew_margin_s = check_seconds("skew_margin_s", skew_margin_s, positive=False)
        self.registry = registry if registry is not None else Registry()
        self.remember = remember
        # Runs being recalled from the ledger: their waiters, and other writers' events
        # for them that arrive meanwhile (see _recall).
        self._recalling: dict[str, tuple[asyncio.Future[None], list[Event]]] = {}
        # Recalled runs -> the last seq their recall read (see _apply_foreign).
        self._recalled: OrderedDict[str, int] = OrderedDict()
        store: Store = ledger if ledger is not None else MemoryLedger()
        # MemoryLedger appends without suspending (a subclass may not), and the per-call
        # path stores into it with no coroutine at all (append_now), unless either method
        # is overridden.
        sync_appends = type(store).append_many is MemoryLedger.append_many
        append_now = None
        if (
            sync_appends
            and isinstance(store, AppendsNow)
            and type(store).append_now is MemoryLedger.append_now
        ):
            append_now = store.append_now
        self.hooks = tuple(hooks)
        state = Projection(remember)
        for spec in self.registry:
            if spec.cache is not None:
                state.cache_ttl[spec.name] = spec.cache
        # Composed once: the per-call path never re-inspects hooks, guards or the store.
        self._pipe = Pipeline(
            ledger=store,
            state=state,
            # A clock of the caller's is checked at each reading (time.time needs none).
            clock=time.time if clock is None else checked_clock(clock),
            approval=approval,
            limits=limits,
            before=tuple((h.before_tool, _name_of(h)) for h in hooks if hasattr(h, "before_tool")),
            after=tuple((h.after_tool, _name_of(h)) for h in hooks if hasattr(h, "after_tool")),
            on_event=tuple((h.on_event, _name_of(h)) for h in hooks if hasattr(h, "on_event")),
            around=compose_around(tuple(h.around_body for h in hooks if hasattr(h, "around_body"))),
            guards=tuple(guards),
            output_guards=tuple(output_guards),
            #: This executor's id, recorded as the holder of every effect key it claims.
            executor_id=uuid.uuid4().hex[:12],
            pid=os.getpid(),
            host=host_identity(),
            lease_s=lease_s,
            skew_margin_s=skew_margin_s,
            sync_appends=sync_appends,
            append_now=append_now,
        )
        # The store's optional capabilities, checked once (never per call).
        self._opens = store.open if isinstance(store, Opens) else None
        self._keyed = store if isinstance(store, Keyed) else None
        self._followable = store if isinstance(store, Followable) else None
        # Each spec's plan, built at its first call (see _plan).
        self._plans: dict[ToolSpec, Plan] = {}
        self._started = False
        self._start_lock: asyncio.Lock | None = None
        self._closed = False

    # -- what the pipeline holds, as the executor's attributes --------------------------

    @property
    def ledger(self) -> Store:
        """The store every step appends to."""
        return self._pipe.ledger

    @property
    def state(self) -> Projection:
        """The projections (outcomes, limits, cache, effect keys) folded from the ledger."""
        return self._pipe.state

    @state.setter
    def state(self, state: Projection) -> None:
        self._pipe.state = state

    @property
    def approval(self) -> ApprovalPort | None:
        """The approval port (None: calls that need approval carry a decision or are denied)."""
        return self._pipe.approval

    @property
    def limits(self) -> RunLimits | None:
        """The run limits (None: unlimited)."""
        return self._pipe.limits

    @property
    def executor_id(self) -> str:
        """This executor's id, recorded as the holder of every effect key it claims."""
        return self._pipe.executor_id

    @property
    def lease_s(self) -> float:
        """How long an effect claim stays in flight without renewal."""
        return self._pipe.lease_s

    @property
    def skew_margin_s(self) -> float:
        """How long past another holder's lease it is still taken for alive."""
        return self._pipe.skew_margin_s

    @property
    def _clock(self) -> Callable[[], float]:
        return self._pipe.clock

    @property
    def _guards(self) -> tuple[Guard, ...]:
        return self._pipe.guards

    @property
    def _output_guards(self) -> tuple[OutputGuard, ...]:
        return self._pipe.output_guards

    @property
    def _running_keys(self) -> dict[str, int]:
        return self._pipe.running_keys

    @property
    def _subscribers(self) -> list[asyncio.Queue[Event]]:
        return self._pipe.subscribers

    @property
    def _observed(self) -> bool:
        return self._pipe.observed

    @property
    def _follower(self) -> Follow | None:
        return self._pipe.follower

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    async def open(
        cls, registry: Registry | None = None, *, verify: bool = False, **kwargs: Any
    ) -> Executor:
        """Build an executor and replay its ledger into the projections first.

        With ``verify=True`` the ledger's own ``verify()`` runs too, and a ledger that is
        not intact (a record missing, altered or malformed) is refused with LedgerError.
        """
        executor = cls(registry, **kwargs)
        try:
            await executor.start(verify=verify)
        except BaseException:
            await executor.close()  # refused (or failed): its ledger is not left open
            raise
        return executor

    async def start(self, *, verify: bool = False) -> None:
        """Replay the ledger: limits, cache, effect keys and the outcome index come back.

        Calls that started and never finished (the process died) make their effect keys
        ambiguous and their ids refuse to run again. Call it before making calls: the
        projections are rebuilt from the whole ledger, so calls this executor already made
        are folded once (never on top of the live state, which would count them twice).

        As the events pass, the chain is checked (``ChainWatch``): a record deleted,
        inserted, re-chained or altered, or one that did not fit its type
        (``Event.malformed``), is logged as a warning on the ``agent_adapter`` logger, and
        the executor opens. With ``verify=True`` (see ``open``) it refuses instead, and
        the store's own ``verify()`` runs too (keyed hashes, the head).
        """
        if self._started:
            return
        if self._closed:
            raise _closed_error()
        # One replay, whoever asks first (open, async with, or a first call): a second
        # replay running beside it could replace state that calls already changed.
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            if self._closed:
                raise _closed_error()
            if self._opens is not None:
                await self._opens()
            state = Projection(self.remember)
            state.cache_ttl.update(self.state.cache_ttl)
            apply = state.apply
            last = 0
            watch = ChainWatch(keyed=None if self._keyed is None else self._keyed.keyed)
            async for event, payload in _replayed(self.ledger):
                apply(event)
                watch.see(event, payload)  # the chain as it passes: gaps, links, hashes
                last = event.seq
            problems = watch.findings()
            if verify:
                verification = await self.ledger.verify()
                if not verification.ok:
                    problems.insert(0, verification.reason or "the chain does not verify")
                if problems:
                    raise LedgerError(
                        f"ledger {self.ledger!r} is not intact: {'; '.join(problems)}; the "
                        "executor was not opened (see agent-adapter ledger audit)"
                    )
            elif problems:
                _log.warning(
                    "ledger %r is not intact: %s; opened anyway (Executor.open(..., "
                    "verify=True) refuses such a ledger; see agent-adapter ledger audit)",
                    self.ledger,
                    "; ".join(problems),
                )
            state.settle()
            self.state = state
            if self._followable is not None:
                # A ledger shared with other executors (other processes, or others on
                # this object) hands us their events at each of our commits, and refuses
                # our claim of a key they claimed first.
                pipe = self._pipe
                pipe.follower = self._followable.follow(self._apply_foreign, last)
                pipe.shared = pipe.catch_up is not None
            self._started = True

    async def _ensure_started(self) -> None:
        # An executor on an existing ledger that nobody started would forget its limits,
        # effect keys and finished calls: the first call replays the ledger instead.
        await self.start()

    async def close(self) -> None:
        """Stop following the ledger and close it, unless another executor still follows
        the same ledger object: the last one to close closes it (idempotent).

        A closed executor takes no more calls (``ToolUsageError``): its projections no
        longer hear the others'. A call it still has running keeps its outcome, but a
        claim of an effect key it makes from now on is refused by the ledger.
        """
        if self._closed:
            return
        self._closed = True
        self._started = False  # the next call asks start(), which refuses
        self._pipe.leases.close()
        follower = self._pipe.follower
        if follower is not None:
            follower.close()
        if self._followable is not None and self._followable.followed:
            return  # another executor's ledger object too: it stays open for them
        await self.ledger.close()

    async def __aenter__(self) -> Executor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- events -------------------------------------------------------------------------

    def _apply_foreign(self, event: Event) -> None:
        # Another process's event: folded like a replayed one (never dispatched to this
        # executor's hooks or subscribers: it is not one of its calls).
        state = self.state
        run_id = event.run_id
        through = self._recalled.get(run_id)
        if through is not None and event.seq <= through and run_id not in state.cold:
            # A recall already read it into the run's history: the run must not count it
            # twice.
            state.apply_live(event)
        else:
            if through is not None and event.seq > through:
                del self._recalled[run_id]  # delivered in seq order: none older will come
            state.apply(event)
        recalling = self._recalling.get(run_id)
        if recalling is not None:
            recalling[1].append(event)

    async def _recall(self, run_id: str) -> None:
        """Bring a cold run's history (outcomes, counts) back from the ledger, once."""
        recalling = self._recalling.get(run_id)
        if recalling is not None:
            await asyncio.shield(recalling[0])
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        arrived: list[Event] = []
        self._recalling[run_id] = (done, arrived)
        try:
            events = [event async for event in self.ledger.read(run_id=run_id)]
            known = self.state.cold_calls.get(run_id, 0)
            extra = self.state.cold_extra.get(run_id, set())
            found = _finished_calls(events) if known or extra else set()
            if not extra <= found or len(found - extra) < known:
                # Fewer finished calls than the run had when it went cold (plus those
                # other processes finished in it since, counted apart: a new call must
                # not make up for a hidden one): the read by run went through an index
                # (SQLite's run_id index) that misses events of it, and a call whose
                # outcome it hid would run again; or an outcome of this executor's was
                # never written (its append failed). The table, read in seq order without
                # an index, tells which, and is what the run holds.
                table = [event async for event in self.ledger.read() if event.run_id == run_id]
                if len(_finished_calls(table)) > len(found):
                    _log.warning(
                        "ledger: a read of run %r returned %d finished call(s) where the "
                        "ledger holds %d (a damaged index?); read from the whole ledger "
                        "instead: see agent-adapter ledger verify",
                        run_id,
                        len(found),
                        len(_finished_calls(table)),
                    )
                events = table
            last = events[-1].seq if events else 0
            # Another writer's events for this run that the read did not reach yet.
            events.extend(e for e in arrived if e.seq > last)
            self.state.recall(run_id, events)
            if events and self._pipe.shared:
                # Events the read saw that another writer committed may still be handed
                # over at a later commit: _apply_foreign folds those into live state only.
                self._recalled[run_id] = events[-1].seq
                self._recalled.move_to_end(run_id)
                while len(self._recalled) > 10_000:
                    self._recalled.popitem(last=False)
        finally:
            del self._recalling[run_id]
            done.set_result(None)

    def subscribe(self) -> AsyncIterator[Event]:
        """Events as this executor appends them (a live view), from this call on.

        Registered at once (not at the first ``anext``), so nothing appended between
        ``subscribe()`` and the first read is missed; ``aclose()`` ends it.
        """
        return _Subscription(self)

    # -- public entry points ------------------------------------------------------------

    async def call(
        self,
        name: str,
        args: Any,
        *,
        run_id: str | None = None,
        call_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Any:
        """Run the registered tool ``name``; missing ids are made up (a fresh run per call)."""
        spec = self.registry.get(name)
        ctx = CallContext(
            run_id=run_id or new_id("run"),
            call_id=call_id or new_id("call"),
            metadata=dict(metadata) if metadata else {},
        )
        return await self.run_spec(spec, args, ctx)

    async def prepare(self, spec: ToolSpec, args: Any, ctx: CallContext) -> Prepared:
        """What a call of ``spec`` with ``args`` would be, before it runs; records nothing.

        The bridge contract's one decision point (DESIGN.md, "The bridge contract"): the
        validated arguments and their digest, whether the confirm rule requires approval
        (the rule step 6 runs; one that raises: True), what a reviewer may be shown, the
        effect key and the notice a reviewer must read when that key is not free. A bridge
        asks its framework's reviewer with this and carries the answer in
        ``ctx.approval`` (a ``Decision`` bound to ``prepared.digest``); ``run_spec`` then
        decides again, on the ledger, whatever was prepared.
        """
        if not self._started:
            await self._ensure_started()
        pipe = self._pipe
        if pipe.catch_up is not None:
            # A ledger other processes write: what they recorded since this executor last
            # heard (a call finished elsewhere, a key committed) is folded first, so that
            # a reviewer is not asked about a call already on record (a bridge's pause:
            # one read, not a per-call cost).
            await pipe.catch_up()
        state = pipe.state
        while ctx.run_id in state.cold:  # (as run_spec: a cold run's history comes back)
            await self._recall(ctx.run_id)
            state = self._pipe.state
        key = (ctx.run_id, ctx.call_id)
        # What step 0 asks: such a call is answered from the ledger, never run again.
        recorded = key in state.outcomes or key in state.inflight
        return await prepare(
            spec,
            args,
            ctx,
            state.effects,
            recorded=recorded,
            now=pipe.clock(),
            margin_s=pipe.skew_margin_s,
        )

    async def run_spec(self, spec: ToolSpec, args: Any, ctx: CallContext) -> Any:
        """Run one call of ``spec`` with ``args`` (a dict, or JSON text from a model).

        Appends, in order: ``call.requested``, ``call.validated``, ``guard.checked``,
        ``approval.*``, ``effect.claimed``, ``call.started`` (durable before the body
        runs) and exactly one outcome (durable before this returns). Returns the tool's
        value or raises the error of the outcome's kind.
        """
        if not self._started:
            await self._ensure_started()
        pipe = self._pipe
        state = pipe.state
        while ctx.run_id in state.cold:  # (again if a recall we waited for failed)
            await self._recall(ctx.run_id)
            state = pipe.state
        key = (ctx.run_id, ctx.call_id)
        if (key in state.outcomes or key in state.inflight) and not _decides_again(state, key):
            try:
                return await _repeat(pipe, spec, args, ctx)
            except AdapterError as exc:
                exc.recorded_by = key
                raise
        # What this spec's calls need, decided at its first call (see _plan).
        plan = self._plans.get(spec)
        if plan is None:
            plan = plan_of(pipe, self._plans, spec)
        clock = pipe.clock
        run = _Run(spec, ctx, clock(), pipe)
        # The projection's handlers are called directly for the events this function
        # builds (the type is known here): the same code replay reaches through
        # Projection.apply, without its dispatch per event.
        requested = CallRequested(
            ts=run.t0,
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=spec.name,
            args=requested_args(spec, args),
            metadata=ctx.metadata,
        )
        state._requested(requested)
        run.buffer.append(requested)
        token = None
        # The running call, for its body's exchange_recorder() (reset below).
        running = _running.set(run)
        # Every append of this call (a port's too) is ours: the ledger never hands it
        # back to us, and settles our claims against the other followers'.
        mine = appending.set(pipe.follower)
        try:
            try:
                validated, call_digest = _validated(spec, args)
            except ToolArgsInvalid as exc:
                # Arguments that do not validate may not encode either (a dict holding a
                # lone surrogate, nesting too deep): recorded as an encodable copy, so the
                # call still gets its one outcome.
                requested.args = recordable(requested.args)
                raise _Stop(_invalid(pipe, run, str(exc)), exc) from None
            validated_event = CallValidated(
                ts=clock(),
                run_id=ctx.run_id,
                call_id=ctx.call_id,
                tool=spec.name,
                digest=call_digest,
            )
            state._validated(validated_event)
            run.buffer.append(validated_event)
            call = Call(
                tool=spec.name,
                spec=spec,
                args=validated,
                digest=call_digest,
                ctx=ctx,
                effect_key=_render(pipe, run, validated) if plan.effect else None,
            )
            run.call = call
            token = _current.set(call)
            # Steps 3-6 are awaited only when they have something to do for this spec
            # (no hook, guard, limit or confirm rule: nothing to run, nothing recorded).
            if plan.checks:
                call = await _checks(pipe, run, call, plan.guards)
            if plan.confirm is not False:
                call = await _approve(pipe, run, call)
            if plan.exposed:
                # User code saw the arguments (a hook, a guard, a confirm rule or a port;
                # a decision carried in the context is checked without calling anyone,
                # and edits are validated into a new dict and re-checked by _checks).
                run.exposed = True
                _unchanged(pipe, run, call)
            return await _execute(pipe, run, call, plan)
        except _Stop as stop:
            await end(pipe, run, stop.outcome, error=stop.error)
            if isinstance(stop.error, AdapterError):
                stop.error.recorded_by = key
            raise stop.error from getattr(stop.error, "__cause__", None)
        except asyncio.CancelledError:
            # Never swallowed: recorded as the call's outcome (unless it has one), re-raised.
            await end_cancelled(pipe, run)
            raise
        finally:
            appending.reset(mine)
            _running.reset(running)
            if token is not None:
                _current.reset(token)

    # -- effects and refusals (operator and bridge entry points) ------------------------

    async def refuse(
        self,
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
        mine = appending.set(self._pipe.follower)  # ours: never handed back to us
        try:
            await _refused(self._pipe, spec, args, ctx, reviewer, reason, source)
        finally:
            appending.reset(mine)
        return True

    async def resolve_effect(
        self,
        key: str,
        *,
        outcome: str,
        reviewer: str,
        reason: str | None = None,
        force: bool = False,
    ) -> None:
        """Resolve an ambiguous effect key: ``"failed"`` frees it, ``"committed"`` commits it.

        Recorded as ``effect.resolved``. Raises ToolUsageError for a key that is not
        ambiguous: unknown, committed, in flight (its holder's lease is live: its body may
        be running now, and a key resolved as failed would run again beside it), or
        claimed by a call running in this process (a timed-out sync body's thread
        included). With ``force=True``, an in-flight key (or a claim with no lease) is
        resolved anyway, for a holder known to be gone before its lease ends; recorded
        with ``forced`` (the audit reports it).
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
        await resolve_effect(
            self._pipe, key, outcome=outcome, reviewer=reviewer, reason=reason, force=force
        )

    def effect_status(self, key: str) -> str:
        """The key's status now: ``committed``, ``ambiguous``, ``in flight`` (its holder's
        lease is live), ``claimed`` (a live claim with no lease) or ``unknown``."""
        return effect_status(self._pipe, key)

    def ambiguous_effects(self) -> dict[str, tuple[str, str]]:
        """Ambiguous keys (claims whose outcome is unknown and whose holder's lease, if
        any, has expired) and the (run_id, call_id) that claimed each."""
        return ambiguous_effects(self._pipe)

    def in_flight_effects(self) -> dict[str, EffectState]:
        """Keys whose holder's lease is live (their calls have no outcome yet): each key's
        state names the holder (``holder``, ``pid``, ``host``) and ``lease_until``."""
        return in_flight_effects(self._pipe)


class _Subscription:
    """An async iterator over a queue the executor feeds; registered when created."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        executor._pipe.subscribers.append(self._queue)
        executor._pipe.observed = True

    def __aiter__(self) -> _Subscription:
        return self

    async def __anext__(self) -> Event:
        if self._executor is None:
            raise StopAsyncIteration
        return await self._queue.get()

    async def aclose(self) -> None:
        """Stop receiving events."""
        executor, self._executor = self._executor, None  # type: ignore[assignment]
        if executor is not None:
            pipe = executor._pipe
            pipe.subscribers.remove(self._queue)
            pipe.observed = bool(pipe.on_event or pipe.subscribers)


async def _replayed(ledger: Store) -> AsyncIterator[tuple[Event, bytes | None]]:
    """Every event of ``ledger`` with its stored bytes (None from a store that cannot
    give them), so that replay can check each hash on the way."""
    if not isinstance(ledger, RecordReader):
        async for event in ledger.read():
            yield event, None
        return
    async for record in ledger.read_records():
        payload, prev, hash_ = record.payload, record.prev, record.hash
        if type(payload) is not bytes or type(prev) is not str or type(hash_) is not str:
            raise LedgerError(
                f"ledger {ledger!r}: seq {record.seq} is damaged (a stored value is of the "
                "wrong type); see agent-adapter ledger verify"
            )
        event = decode_event(payload)
        event.seq, event.prev, event.hash = record.seq, prev, hash_
        yield event, payload


_default: Executor | None = None


def get_default_executor() -> Executor:
    """The process-wide executor for ``executor=None``: a memory ledger, no approval port."""
    global _default
    if _default is None:
        _default = Executor()
    return _default


def _closed_error() -> ToolUsageError:
    return ToolUsageError(
        "this executor is closed; open a new one on the ledger to make more calls"
    )


def _decides_again(state: Projection, key: tuple[str, str]) -> bool:
    """True when the call id's recorded outcome is an in-flight refusal and nothing of it
    is running: not final (``redecided``), so this repeat is a new attempt of the call
    (its own ``call.requested`` and outcome) rather than a replay of the refusal."""
    recorded = state.outcomes.get(key)
    return recorded is not None and recorded[1] == IN_FLIGHT and key not in state.inflight


def _finished_calls(events: list[Event]) -> set[str]:
    """The calls ``events`` (one run's) hold an outcome of."""
    return {event.call_id for event in events if event.is_outcome}
