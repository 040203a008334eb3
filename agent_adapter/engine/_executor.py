"""The executor: one pipeline for every tool call, every step a ledger event.

Steps (DESIGN.md, "Executor.run_spec pipeline"): 0 replay-safe repeat, 1 requested,
2 validate, 3 before_tool hooks, 4 input guards, 5 run limits, 6 approval, 7 cache,
8 effect claim, 9 started + body under timeout, 10 output guards and exactly one outcome.

Steps 0 (``_replaying``), 3-5 (``_checking``), 6 (``_approving``) and 8 (``_effects``) live
in their own modules as functions of the executor, bound below as its methods: one
concept per module, and the same attribute lookups on the per-call path as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import msgspec

from ..errors import (
    AdapterError,
    LedgerError,
    ToolArgsInvalid,
    ToolUsageError,
)
from ..ledger import (
    DEFAULT_LEASE_S,
    DEFAULT_SKEW_MARGIN_S,
    CallCancelled,
    CallFailed,
    CallRequested,
    CallValidated,
    ChainWatch,
    Event,
    Follow,
    HookFailed,
    Ledger,
    MemoryLedger,
    UnrecordableEvent,
    append_repaired,
    appending,
    checked_clock,
    decode_event,
    recordable,
)
from ..ledger import (
    recordable_text as text,
)
from . import _approving, _checking, _effects, _executing, _replaying
from ._approval import ApprovalPort, redacted
from ._context import Call, CallContext, Outcome, _current
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
from ._prepare import Prepared, prepare
from ._run import _maybe_await, _name_of, _Run, _scrub, _Stop, _validated, new_id
from ._spec import MAX_ARGS_BYTES, Registry, ToolSpec, check_registry
from ._state import Projection

__all__ = ["Executor", "get_default_executor"]

_log = logging.getLogger("agent_adapter")

# Tuples, not ``A | B`` unions: a union is built anew each time the expression runs, and
# _requested_args runs on every call.
_TEXT = (str, bytes, bytearray, memoryview)
_BINARY = (bytes, bytearray, memoryview)


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

    The options are checked here, once: a path as ``ledger``, a function as ``approval``,
    a dict as ``limits``, a hook with no hook method or a guard that cannot take its
    arguments is a ``ToolUsageError`` saying what to pass.
    """

    # Steps kept in their own modules (one concept per module), bound here as methods.
    _invalid = _checking._invalid
    _blocked = _checking._blocked
    _checks = _checking._checks
    _guard = _checking._guard
    _limit = _checking._limit
    _approve = _approving._approve
    _pending = _approving._pending
    _port_records = _approving._port_records
    refuse = _approving.refuse
    _claim = _effects._claim
    _render = _effects._render
    _execute = _executing._execute
    _execute_plain = _executing._execute_plain
    _timed = _executing._timed
    _in_thread = _executing._in_thread
    _unchanged = _executing._unchanged
    _rollback = _executing._rollback
    resolve_effect = _effects.resolve_effect
    ambiguous_effects = _effects.ambiguous_effects
    in_flight_effects = _effects.in_flight_effects
    effect_status = _effects.effect_status
    _repeat = _replaying._repeat
    _replayed_value = _replaying._replayed_value
    recorded_error = staticmethod(_replaying.recorded_error)

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        ledger: Ledger | None = None,
        approval: ApprovalPort | None = None,
        hooks: Sequence[Any] = (),
        guards: Sequence[Callable[..., Any]] = (),
        output_guards: Sequence[Callable[..., Any]] = (),
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
        self.lease_s = check_seconds("lease_s", lease_s, positive=True)
        self.skew_margin_s = check_seconds("skew_margin_s", skew_margin_s, positive=False)
        #: This executor's id, recorded as the holder of every effect key it claims.
        self.executor_id = uuid.uuid4().hex[:12]
        self._pid = os.getpid()
        self._host = socket.gethostname()
        self._leases = _executing.Leases(self)
        self.registry = registry if registry is not None else Registry()
        self.remember = remember
        # Runs being recalled from the ledger: their waiters, and other writers' events
        # for them that arrive meanwhile (see _recall).
        self._recalling: dict[str, tuple[asyncio.Future[None], list[Event]]] = {}
        # Tasks that outlive the call that started them (see _unpin_when_written).
        self._background: set[asyncio.Task[None]] = set()
        # Recalled runs -> the last seq their recall read (see _apply_foreign).
        self._recalled: OrderedDict[str, int] = OrderedDict()
        self.ledger: Ledger = ledger if ledger is not None else MemoryLedger()
        # MemoryLedger appends without suspending (a subclass may not), and the per-call
        # path stores into it with no coroutine at all (append_now), unless either method
        # is overridden.
        memory = self.ledger
        self._sync_appends = type(memory).append_many is MemoryLedger.append_many
        self._append_now: Callable[[list[Event]], None] | None = None
        if (
            self._sync_appends
            and isinstance(memory, MemoryLedger)
            and type(memory).append_now is MemoryLedger.append_now
        ):
            self._append_now = memory.append_now
        self.approval = approval
        self.limits = limits
        # A clock of the caller's is checked at each reading (time.time needs no check).
        self._clock = time.time if clock is None else checked_clock(clock)
        self._guards = tuple(guards)
        self._output_guards = tuple(output_guards)
        self.hooks = tuple(hooks)
        # Composed once: the per-call path never re-inspects hooks.
        self._before = tuple(
            (h.before_tool, _name_of(h)) for h in hooks if hasattr(h, "before_tool")
        )
        self._after = tuple((h.after_tool, _name_of(h)) for h in hooks if hasattr(h, "after_tool"))
        self._on_event = tuple((h.on_event, _name_of(h)) for h in hooks if hasattr(h, "on_event"))
        self._subscribers: list[asyncio.Queue[Event]] = []
        self._observed = bool(self._on_event)
        self.state = Projection(remember)
        for spec in self.registry:
            if spec.cache is not None:
                self.state.cache_ttl[spec.name] = spec.cache
        self._started = False
        # True once started on a ledger other processes may append to (see _apply_foreign).
        self._shared = False
        # This executor as a follower of its ledger (see start): its appends are made in
        # its name (``appending``), so that the ledger never hands them back to it.
        self._follower: Follow | None = None
        self._start_lock: asyncio.Lock | None = None
        #: effect keys whose sync body is still running in a worker thread
        self._running_keys: dict[str, int] = {}
        self._closed = False

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
            opener = getattr(self.ledger, "open", None)
            if opener is not None:
                await opener()
            state = Projection(self.remember)
            state.cache_ttl.update(self.state.cache_ttl)
            apply = state.apply
            last = 0
            watch = ChainWatch(keyed=getattr(self.ledger, "keyed", None))
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
            follow = getattr(self.ledger, "follow", None)
            if follow is not None:
                # A ledger shared with other executors (other processes, or others on
                # this object) hands us their events at each of our commits, and refuses
                # our claim of a key they claimed first.
                self._follower = follow(self._apply_foreign, last)
                self._shared = hasattr(self.ledger, "catch_up")
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
        self._leases.close()
        follower = self._follower
        if follower is not None:
            follower.close()
        if getattr(self.ledger, "followed", False):
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
            last = events[-1].seq if events else 0
            # Another writer's events for this run that the read did not reach yet.
            events.extend(e for e in arrived if e.seq > last)
            self.state.recall(run_id, events)
            if events and self._shared:
                # Events the read saw that another writer committed may still be handed
                # over at a later commit: _apply_foreign folds those into live state only.
                self._recalled[run_id] = events[-1].seq
                self._recalled.move_to_end(run_id)
                while len(self._recalled) > 10_000:
                    self._recalled.popitem(last=False)
        finally:
            del self._recalling[run_id]
            done.set_result(None)

    def _emit(self, run: _Run, event: Event) -> None:
        # Applied at once (so checks and claims are atomic), durable at the next flush.
        self.state.apply(event)
        run.buffer.append(event)

    async def _append(self, events: list[Event]) -> None:
        """``ledger.append_many(events)``; an event the ledger refuses as unrecordable
        (a value that got past the boundary checks) is repaired and the batch appended
        again, so that a call never ends without its outcome for want of a value."""
        try:
            append_now = self._append_now
            if append_now is not None:
                append_now(events)  # a MemoryLedger: stored now, no coroutine
            else:
                await self.ledger.append_many(events)
        except UnrecordableEvent as refused:
            await append_repaired(self.ledger, events, refused)

    async def _flush(self, run: _Run) -> None:
        if not run.buffer:
            return
        events, run.buffer = run.buffer, []
        await self._append(events)
        if self._observed:
            await self._dispatch(events)

    async def _record(self, events: list[Event]) -> None:
        """Append events outside any call (for records like ``effect.resolved``)."""
        for event in events:
            self.state.apply(event)
        mine = appending.set(self._follower)  # ours: never handed back to us
        try:
            await self._append(events)
            if self._observed:
                await self._dispatch(events)
        finally:
            appending.reset(mine)

    async def _dispatch(self, events: list[Event]) -> None:
        for event in events:
            for queue in self._subscribers:
                queue.put_nowait(event)
            for hook, name in self._on_event:
                try:
                    await _maybe_await(hook(event))
                except Exception as exc:
                    await self._hook_failed(event, name, "on_event", exc)

    async def _hook_failed(self, about: Event, name: str, stage: str, exc: Exception) -> None:
        # Observers never change a call's outcome; their failure is a record, and it is
        # not dispatched to on_event hooks again (a failing hook cannot loop).
        failed = HookFailed(
            ts=self._clock(),
            run_id=about.run_id,
            call_id=about.call_id,
            tool=about.tool,
            hook=name,
            stage=stage,
            error=text(f"{type(exc).__name__}: {exc}"),
        )
        await self._append([failed])
        for queue in self._subscribers:
            queue.put_nowait(failed)

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
        return await prepare(spec, args, ctx, self.state.effects)

    async def run_spec(self, spec: ToolSpec, args: Any, ctx: CallContext) -> Any:
        """Run one call of ``spec`` with ``args`` (a dict, or JSON text from a model).

        Appends, in order: ``call.requested``, ``call.validated``, ``guard.checked``,
        ``approval.*``, ``effect.claimed``, ``call.started`` (durable before the body
        runs) and exactly one outcome (durable before this returns). Returns the tool's
        value or raises the error of the outcome's kind.
        """
        if not self._started:
            await self._ensure_started()
        while ctx.run_id in self.state.cold:  # (again if a recall we waited for failed)
            await self._recall(ctx.run_id)
        key = (ctx.run_id, ctx.call_id)
        if key in self.state.outcomes or key in self.state.inflight:
            try:
                return await self._repeat(spec, args, ctx)
            except AdapterError as exc:
                exc.recorded_by = key
                raise
        clock = self._clock
        state = self.state
        run = _Run(spec, ctx, clock())
        if spec.cache is not None and spec.name not in state.cache_ttl:
            state.cache_ttl[spec.name] = spec.cache
        # The projection's handlers are called directly for the events this function
        # builds (the type is known here): the same code replay reaches through
        # Projection.apply, without its dispatch per event.
        requested = CallRequested(
            ts=run.t0,
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=spec.name,
            args=self._requested_args(spec, args),
            metadata=ctx.metadata,
        )
        state._requested(requested)
        run.buffer.append(requested)
        token = None
        # Every append of this call (a port's too) is ours: the ledger never hands it
        # back to us, and settles our claims against the other followers'.
        mine = appending.set(self._follower)
        try:
            try:
                validated, call_digest = _validated(spec, args)
            except ToolArgsInvalid as exc:
                # Arguments that do not validate may not encode either (a dict holding a
                # lone surrogate, nesting too deep): recorded as an encodable copy, so the
                # call still gets its one outcome.
                requested.args = recordable(requested.args)
                raise _Stop(self._invalid(run, str(exc)), exc) from None
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
                effect_key=None if spec.effect is None else self._render(run, validated),
            )
            run.call = call
            token = _current.set(call)
            # Steps 3-6 are awaited only when they have something to do for this call
            # (no hook, guard, limit or confirm rule: nothing to run, nothing recorded).
            checked = bool(self._before or self._guards or spec.guards)
            if checked or self.limits is not None:
                call = await self._checks(run, call)
            confirm = spec.confirm
            if confirm is not False:
                call = await self._approve(run, call)
                # User code saw the arguments only through a confirm rule or a port; a
                # decision carried in the context is checked without calling anyone
                # (edits are validated into a new dict and re-checked by _checks).
                if confirm is not True or self.approval is not None:
                    checked = True
            if checked:
                run.exposed = True
                self._unchanged(run, call)
            if (
                spec.cache is None
                and spec.effect is None
                and spec.timeout is None
                and spec.is_async
                and not spec.output_guards
                and not (run.exposed or self._observed or self._after or self._output_guards)
            ):
                return await self._execute_plain(run, call)
            return await self._execute(run, call)
        except _Stop as stop:
            await self._end(run, stop.outcome, error=stop.error)
            if isinstance(stop.error, AdapterError):
                stop.error.recorded_by = key
            raise stop.error from getattr(stop.error, "__cause__", None)
        except asyncio.CancelledError:
            # Never swallowed: recorded as the call's outcome (unless it has one), re-raised.
            if not run.ended:
                inflight = self.state.inflight.get(run.key)
                cancelled = CallCancelled(
                    ts=clock(),
                    run_id=ctx.run_id,
                    call_id=ctx.call_id,
                    tool=spec.name,
                    duration_ms=(clock() - run.t0) * 1000.0,
                    started=run.started,
                    counted=inflight is not None and inflight.counted,
                )
                await self._end_shielded(run, cancelled)
                if run.reached_body and self._after and run.call is not None:
                    # after_tool sees every outcome of a call that reached the body.
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._after_hooks(
                            run.call,
                            Outcome(kind="cancelled", error=asyncio.CancelledError()),
                            cancelled,
                        )
            raise
        finally:
            appending.reset(mine)
            if token is not None:
                _current.reset(token)

    # -- steps --------------------------------------------------------------------------

    def _requested_args(self, spec: ToolSpec, args: Any) -> Any:
        # Raw text is recorded as given unless it names redacted values: then it is
        # parsed, and text that does not parse is withheld rather than leak a secret.
        # Text over the size limit is never parsed nor stored (validation refuses it).
        # A str is measured in UTF-8 bytes (as validation measures it), only when its
        # length in characters says it may be over: up to 4 bytes per character.
        if isinstance(args, _TEXT) and len(args) > MAX_ARGS_BYTES // 4:
            size = len(args.encode("utf-8", "replace")) if isinstance(args, str) else len(args)
            if size > MAX_ARGS_BYTES:
                return f"[withheld: {size} bytes, over the size limit]"
        if type(args) is not dict and not isinstance(args, _TEXT):
            # A mapping that is not a dict (recorded as its items), or an object given as
            # arguments (validation refuses it): as its JSON form, so that redaction
            # applies to its fields too and nothing is recorded as a placeholder.
            try:
                args = dict(args) if isinstance(args, Mapping) else msgspec.to_builtins(args)
            except (TypeError, ValueError, OverflowError, RecursionError):
                return f"[not recorded: arguments of type {type(args).__name__}]"
        if isinstance(args, dict) or not spec.redact:
            if isinstance(args, _BINARY):
                return bytes(args).decode("utf-8", "replace")
            if isinstance(args, str) and not args.isascii():
                return text(args)  # (a lone surrogate: recorded as its escape)
            return redacted(args, spec.redact)
        if not isinstance(args, _TEXT):
            # Not an object (a list, a number): no field can be told apart from another.
            return "[redacted: arguments that are not an object]"
        try:
            return redacted(msgspec.json.decode(args), spec.redact)
        except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
            # (Nesting too deep, or a lone surrogate: validation refuses the text too.)
            return "[redacted: unparsable arguments]"

    def _failed(self, run: _Run, error: AdapterError) -> CallFailed:
        now = self._clock()
        return CallFailed(
            ts=now,
            run_id=run.ctx.run_id,
            call_id=run.ctx.call_id,
            tool=run.spec.name,
            duration_ms=(now - run.t0) * 1000.0,
            error_kind=error.kind,
            error=_scrub(str(error), run),
        )

    async def _end(
        self, run: _Run, outcome: Event, value: Any = None, error: BaseException | None = None
    ) -> None:
        """Record the one outcome (durable before the caller hears), then after_tool hooks."""
        state = self.state
        run_id = run.key[0]
        state.pin(run_id)  # warm until the outcome is written (see Projection.pinned)
        try:
            self._emit(run, outcome)
            run.ended = True
            events, run.buffer = run.buffer, []
            await self._append(events)
        except asyncio.CancelledError:
            self._unpin_when_written(run_id)
            raise
        except BaseException:
            state.unpin(run_id)
            raise
        state.unpin(run_id)
        if self._observed:
            await self._dispatch(events)
        if run.reached_body and self._after and run.call is not None:
            kind = outcome.type.rpartition(".")[2]
            await self._after_hooks(run.call, Outcome(kind=kind, value=value, error=error), outcome)

    def _unpin_when_written(self, run_id: str) -> None:
        """The caller was cancelled while its outcome was being appended; the append may
        still land (SQLite's writer finishes its queue). The run stays warm until the
        ledger has caught up past it, or for good when the ledger cannot say."""
        catch_up = getattr(self.ledger, "catch_up", None)
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
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _end_shielded(self, run: _Run, outcome: Event) -> None:
        # The task is being cancelled: write the outcome in a shielded task so that a
        # second cancel cannot tear the append in half.
        state = self.state
        state.pin(run.key[0])
        self._emit(run, outcome)
        run.ended = True
        events, run.buffer = run.buffer, []
        task = asyncio.ensure_future(self._append(events))
        task.add_done_callback(lambda t: _unpin_done(state, run.key[0], t))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            pass
        if self._observed and task.done() and not task.cancelled():
            await self._dispatch(events)

    async def _after_hooks(self, call: Call, outcome: Outcome, about: Event) -> None:
        for hook, name in self._after:
            try:
                await _maybe_await(hook(call, outcome))
            except Exception as exc:
                await self._hook_failed(about, name, "after_tool", exc)


class _Subscription:
    """An async iterator over a queue the executor feeds; registered when created."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        executor._subscribers.append(self._queue)
        executor._observed = True

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
            executor._subscribers.remove(self._queue)
            executor._observed = bool(executor._on_event or executor._subscribers)


async def _replayed(ledger: Ledger) -> AsyncIterator[tuple[Event, bytes | None]]:
    """Every event of ``ledger`` with its stored bytes (None from a store that cannot
    give them), so that replay can check each hash on the way."""
    read_records = getattr(ledger, "read_records", None)
    if read_records is None:
        async for event in ledger.read():
            yield event, None
        return
    async for record in read_records():
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


def _unpin_done(state: Projection, run_id: str, task: asyncio.Future[Any]) -> None:
    """A shielded outcome append finished: written (or failed for good), so unpin; its
    error was the cancelled caller's and has no one left to hear it."""
    if not task.cancelled():
        task.exception()
    state.unpin(run_id)
