"""The executor: one pipeline for every tool call, every step a ledger event.

Steps (DESIGN.md, "Executor.run_spec pipeline"): 0 replay-safe repeat, 1 requested,
2 validate, 3 before_tool hooks, 4 input guards, 5 run limits, 6 approval, 7 cache,
8 effect claim, 9 started + body under timeout, 10 output guards and exactly one outcome.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from hashlib import sha256
from typing import Any

import msgspec

from ..errors import (
    AdapterError,
    AmbiguousEffect,
    ApprovalDenied,
    ApprovalPending,
    DuplicateEffect,
    GuardrailBlocked,
    RunLimitExceeded,
    ToolArgsInvalid,
    ToolFailed,
    ToolTimeout,
    ToolUsageError,
    error_from_kind,
)
from ..ledger._events import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
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
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallTimedOut,
    CallValidated,
    EffectClaimed,
    EffectResolved,
    Event,
    GuardChecked,
    GuardVerdict,
    HookFailed,
)
from ..ledger._memory import MemoryLedger
from ..ledger._protocol import Ledger
from ._approval import REDACTED, ApprovalPort, ApprovalRequest, Decision, redacted
from ._context import Call, CallContext, Outcome, _current
from ._digest import canonical, digest
from ._limits import RunLimits
from ._spec import MAX_ARGS_BYTES, Registry, ToolSpec
from ._state import Projection

__all__ = ["Executor", "get_default_executor"]

_ID_PREFIX = os.urandom(6).hex()
_ids = itertools.count(1)


def _new_id(kind: str) -> str:
    # A process-random prefix and a counter: unique across processes, and ~10x cheaper
    # than uuid4 on the per-call path.
    return f"{kind}_{_ID_PREFIX}{next(_ids):x}"


def _name_of(obj: Any) -> str:
    return str(getattr(obj, "name", None) or getattr(obj, "__name__", None) or type(obj).__name__)


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _validated(spec: ToolSpec, args: Any) -> tuple[dict[str, Any], str]:
    """Validate ``args`` for ``spec`` and digest them (the digest is ``digest(validated)``).

    Raises ToolArgsInvalid also for values JSON cannot hold (a dict can carry any Python
    object) and for a dict whose canonical form is over the size limit (text is measured
    before it is parsed, in ``validate``).
    """
    validated = spec.validate(args)
    try:
        data = canonical(validated)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ToolArgsInvalid(f"arguments for {spec.name} are not JSON values: {exc}") from None
    if len(data) > MAX_ARGS_BYTES and isinstance(args, Mapping):
        raise ToolArgsInvalid(
            f"arguments for {spec.name} are {len(data)} bytes as JSON, over the "
            f"{MAX_ARGS_BYTES} byte limit"
        )
    return validated, sha256(data).hexdigest()


class _Stop(Exception):
    """Internal: end the call with ``outcome`` and raise ``error`` to the caller."""

    def __init__(self, outcome: Event, error: BaseException) -> None:
        self.outcome = outcome
        self.error = error


class _Run:
    """The mutable state of one call on its way through the pipeline."""

    __slots__ = ("buffer", "call", "ctx", "ended", "key", "reached_body", "spec", "started", "t0")

    def __init__(self, spec: ToolSpec, ctx: CallContext, t0: float) -> None:
        self.spec = spec
        self.ctx = ctx
        self.key = (ctx.run_id, ctx.call_id)
        self.t0 = t0
        self.buffer: list[Event] = []
        self.call: Call | None = None
        self.started = False
        self.reached_body = False
        # Set once the outcome is emitted: a cancel that lands later (in an after_tool
        # hook, or while the outcome is being written) must not add a second outcome.
        self.ended = False


class Executor:
    """Runs tool calls through the pipeline and records every step in the ledger.

    ``Executor(registry=None, *, ledger=None, approval=None, hooks=(), guards=(),
    output_guards=(), limits=None, clock=None)``. Without a ledger it keeps a
    ``MemoryLedger``; without an approval port, calls that need approval are denied
    unless their context carries a decision. Open one on an existing ledger with
    ``await Executor.open(...)`` so that its projections are rebuilt first.
    """

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
    ) -> None:
        self.registry = registry if registry is not None else Registry()
        self.ledger: Ledger = ledger if ledger is not None else MemoryLedger()
        self.approval = approval
        self.limits = limits
        self._clock = clock or time.time
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
        self.state = Projection()
        for spec in self.registry:
            if spec.cache is not None:
                self.state.cache_ttl[spec.name] = spec.cache
        self._started = False
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------

    @classmethod
    async def open(cls, registry: Registry | None = None, **kwargs: Any) -> Executor:
        """Build an executor and replay its ledger into the projections first."""
        executor = cls(registry, **kwargs)
        await executor.start()
        return executor

    async def start(self) -> None:
        """Replay the ledger: limits, cache, effect keys and the outcome index come back.

        Calls that started and never finished (the process died) make their effect keys
        ambiguous and their ids refuse to run again. Call it before making calls: the
        projections are rebuilt from the whole ledger, so calls this executor already made
        are folded once (never on top of the live state, which would count them twice).
        """
        if self._started:
            return
        opener = getattr(self.ledger, "open", None)
        if opener is not None:
            await opener()
        state = Projection()
        state.cache_ttl.update(self.state.cache_ttl)
        apply = state.apply
        async for event in self.ledger.read():
            apply(event)
        state.settle()
        self.state = state
        self._started = True

    async def close(self) -> None:
        """Close the ledger (idempotent)."""
        if not self._closed:
            self._closed = True
            await self.ledger.close()

    async def __aenter__(self) -> Executor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- events -------------------------------------------------------------------------

    def _emit(self, run: _Run, event: Event) -> None:
        # Applied at once (so checks and claims are atomic), durable at the next flush.
        self.state.apply(event)
        run.buffer.append(event)

    async def _flush(self, run: _Run) -> None:
        if not run.buffer:
            return
        events, run.buffer = run.buffer, []
        await self.ledger.append_many(events)
        if self._observed:
            await self._dispatch(events)

    async def _record(self, events: list[Event]) -> None:
        """Append events outside any call (for records like ``effect.resolved``)."""
        for event in events:
            self.state.apply(event)
        await self.ledger.append_many(events)
        if self._observed:
            await self._dispatch(events)

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
            error=f"{type(exc).__name__}: {exc}",
        )
        await self.ledger.append(failed)
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
            run_id=run_id or _new_id("run"),
            call_id=call_id or _new_id("call"),
            metadata=dict(metadata) if metadata else {},
        )
        return await self.run_spec(spec, args, ctx)

    async def run_spec(self, spec: ToolSpec, args: Any, ctx: CallContext) -> Any:
        """Run one call of ``spec`` with ``args`` (a dict, or JSON text from a model).

        Appends, in order: ``call.requested``, ``call.validated``, ``guard.checked``,
        ``approval.*``, ``effect.claimed``, ``call.started`` (durable before the body
        runs) and exactly one outcome (durable before this returns). Returns the tool's
        value or raises the error of the outcome's kind.
        """
        key = (ctx.run_id, ctx.call_id)
        if key in self.state.outcomes or key in self.state.inflight:
            return await self._repeat(spec, args, ctx)
        clock = self._clock
        run = _Run(spec, ctx, clock())
        if spec.cache is not None and spec.name not in self.state.cache_ttl:
            self.state.cache_ttl[spec.name] = spec.cache
        self._emit(
            run,
            CallRequested(
                ts=run.t0,
                run_id=ctx.run_id,
                call_id=ctx.call_id,
                tool=spec.name,
                args=self._requested_args(spec, args),
                metadata=ctx.metadata,
            ),
        )
        token = None
        try:
            try:
                validated, call_digest = _validated(spec, args)
            except ToolArgsInvalid as exc:
                raise _Stop(self._invalid(run, str(exc)), exc) from None
            self._emit(
                run,
                CallValidated(
                    ts=clock(),
                    run_id=ctx.run_id,
                    call_id=ctx.call_id,
                    tool=spec.name,
                    digest=call_digest,
                ),
            )
            call = Call(tool=spec.name, spec=spec, args=validated, digest=call_digest, ctx=ctx)
            run.call = call
            token = _current.set(call)
            call = await self._checks(run, call)
            call = await self._approve(run, call)
            return await self._execute(run, call)
        except _Stop as stop:
            await self._end(run, stop.outcome)
            raise stop.error from getattr(stop.error, "__cause__", None)
        except asyncio.CancelledError:
            # Never swallowed: recorded as the call's outcome (unless it has one), re-raised.
            if not run.ended:
                inflight = self.state.inflight.get(run.key)
                await self._end_shielded(
                    run,
                    CallCancelled(
                        ts=clock(),
                        run_id=ctx.run_id,
                        call_id=ctx.call_id,
                        tool=spec.name,
                        duration_ms=(clock() - run.t0) * 1000.0,
                        started=run.started,
                        counted=inflight is not None and inflight.counted,
                    ),
                )
            raise
        finally:
            if token is not None:
                _current.reset(token)

    # -- steps --------------------------------------------------------------------------

    def _requested_args(self, spec: ToolSpec, args: Any) -> Any:
        # Raw text is recorded as given unless it names redacted values: then it is
        # parsed, and text that does not parse is withheld rather than leak a secret.
        # Text over the size limit is never parsed nor stored (validation refuses it).
        if isinstance(args, str | bytes | bytearray | memoryview) and len(args) > MAX_ARGS_BYTES:
            return f"[withheld: {len(args)} bytes, over the size limit]"
        if isinstance(args, dict) or not spec.redact:
            if isinstance(args, bytes | bytearray | memoryview):
                return bytes(args).decode("utf-8", "replace")
            return redacted(args, spec.redact)
        if not isinstance(args, str | bytes | bytearray | memoryview):
            return args
        try:
            parsed = msgspec.json.decode(args)
        except msgspec.DecodeError:
            return "[redacted: unparsable arguments]"
        return redacted(parsed, spec.redact)

    def _invalid(self, run: _Run, message: str) -> Event:
        now = self._clock()
        return CallInvalid(
            ts=now,
            run_id=run.ctx.run_id,
            call_id=run.ctx.call_id,
            tool=run.spec.name,
            duration_ms=(now - run.t0) * 1000.0,
            error=message,
        )

    def _blocked(self, run: _Run, stage: str, by: str, reason: str, kind: str) -> Event:
        now = self._clock()
        return CallBlocked(
            ts=now,
            run_id=run.ctx.run_id,
            call_id=run.ctx.call_id,
            tool=run.spec.name,
            duration_ms=(now - run.t0) * 1000.0,
            stage=stage,
            by=by,
            reason=reason,
            error_kind=kind,
        )

    async def _checks(self, run: _Run, call: Call) -> Call:
        """Steps 3-5: before_tool hooks, input guards, run limits."""
        for hook, name in self._before:
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
                raise _Stop(self._blocked(run, "hook", name, str(exc), error.kind), error) from None
        guards = run.spec.guards + self._guards
        if guards:
            await self._guard(run, call, "input", guards, (call,))
        if self.limits is not None:
            self._limit(run, call)
        return call

    async def _guard(
        self,
        run: _Run,
        call: Call,
        stage: str,
        guards: tuple[Callable[..., Any], ...],
        guard_args: tuple[Any, ...],
    ) -> None:
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
                verdicts.append(GuardVerdict(name=name, ok=False, reason=str(blocked)))
                break
            verdicts.append(GuardVerdict(name=name, ok=True))
        self._emit(
            run,
            GuardChecked(
                ts=self._clock(),
                run_id=run.ctx.run_id,
                call_id=run.ctx.call_id,
                tool=run.spec.name,
                stage=stage,
                verdicts=verdicts,
            ),
        )
        if blocked is not None:
            raise _Stop(
                self._blocked(run, stage, verdicts[-1].name, str(blocked), blocked.kind), blocked
            )

    def _limit(self, run: _Run, call: Call) -> None:
        limits = self.limits
        assert limits is not None
        inflight = self.state.inflight[run.key]
        if inflight.counted:
            return  # an edited call re-checks; it already counts once
        run_id = run.ctx.run_id
        reason = ""
        if limits.max_calls is not None and self.state.run_calls.get(run_id, 0) >= limits.max_calls:
            reason = f"run {run_id} reached max_calls={limits.max_calls}"
        per_tool = limits.per_tool(call.tool)
        if (
            not reason
            and per_tool is not None
            and self.state.tool_calls.get((run_id, call.tool), 0) >= per_tool
        ):
            reason = f"run {run_id} reached max_calls_per_tool={per_tool} for {call.tool}"
        if reason:
            now = self._clock()
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
        self.state.count(run_id, inflight)

    async def _approve(self, run: _Run, call: Call) -> Call:
        """Step 6: the confirm rule, then the context's decision or the port."""
        confirm = run.spec.confirm
        if confirm is False:
            return call
        if confirm is not True:
            try:
                needed = bool(await _maybe_await(confirm(call, run.ctx)))
            except Exception as exc:
                needed = True  # fail closed: a broken rule asks for approval
                del exc
            if not needed:
                return call
        ctx = run.ctx
        clock = self._clock
        # 128 random bits in uuid4().hex's format, without building a UUID (~4x cheaper).
        request_id = os.urandom(16).hex()
        self._emit(
            run,
            ApprovalRequested(
                ts=clock(),
                run_id=ctx.run_id,
                call_id=ctx.call_id,
                tool=call.tool,
                request_id=request_id,
                digest=call.digest,
            ),
        )
        decision: Decision | None = None
        source = "context"
        carried = ctx.approval
        if isinstance(carried, Decision) and carried.digest in (None, call.digest):
            decision = carried
        elif self.approval is not None:
            source = "port"
            # Durable before a reviewer is asked: the request may outlive this process.
            await self._flush(run)
            request = ApprovalRequest(
                request_id=request_id,
                run_id=ctx.run_id,
                call_id=ctx.call_id,
                tool=call.tool,
                args=call.args,
                digest=call.digest,
                metadata=ctx.metadata,
                redact=run.spec.redact,
            )
            try:
                answer = await self.approval.decide(request)
            except ApprovalPending as exc:
                raise _Stop(self._pending(run, exc.request_id), exc) from None
            except Exception as exc:
                answer = Decision(
                    approved=False,
                    reason=f"approval port failed: {type(exc).__name__}: {exc}",
                )
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
            now = clock()
            self._emit(
                run,
                ApprovalRejected(
                    ts=now,
                    run_id=ctx.run_id,
                    call_id=ctx.call_id,
                    tool=call.tool,
                    request_id=request_id,
                    reviewer=reviewer,
                    source=source if decision is not None else "none",
                    digest=call.digest,
                    reason=reason,
                ),
            )
            message = f"{call.tool} was not approved" + (f": {reason}" if reason else "")
            raise _Stop(
                CallDenied(
                    ts=now,
                    run_id=ctx.run_id,
                    call_id=ctx.call_id,
                    tool=call.tool,
                    duration_ms=(now - run.t0) * 1000.0,
                    reviewer=reviewer,
                    reason=reason,
                ),
                ApprovalDenied(message),
            )
        if decision.edits is not None:
            # An edit is an approval of new arguments: validated and checked again, and
            # then the only arguments the tool sees.
            edits = decision.edits
            if run.spec.redact:
                # A reviewer never saw a redacted value (the ledger holds "[redacted]"):
                # leaving it as shown keeps the value the call was requested with.
                edits = {
                    k: call.args[k] if k in run.spec.redact and v == REDACTED else v
                    for k, v in edits.items()
                }
            try:
                edited, edited_digest = _validated(run.spec, edits)
            except ToolArgsInvalid as exc:
                raise _Stop(self._invalid(run, f"edited {exc}"), exc) from None
            call = msgspec.structs.replace(call, args=edited, digest=edited_digest)
            run.call = call
            _current.set(call)
        self._emit(
            run,
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
            ),
        )
        if decision.edits is not None:
            call = await self._checks(run, call)
        return call

    def _pending(self, run: _Run, request_id: str) -> Event:
        now = self._clock()
        return CallPending(
            ts=now,
            run_id=run.ctx.run_id,
            call_id=run.ctx.call_id,
            tool=run.spec.name,
            duration_ms=(now - run.t0) * 1000.0,
            request_id=request_id,
        )

    async def _execute(self, run: _Run, call: Call) -> Any:
        """Steps 7-10: cache, effect claim, started, body, output guards, outcome."""
        spec = run.spec
        ctx = run.ctx
        clock = self._clock
        if spec.cache is not None:
            hit, value = self.state.cached(spec.name, call.digest, clock())
            if hit:
                now = clock()
                await self._end(
                    run,
                    CallCached(
                        ts=now,
                        run_id=ctx.run_id,
                        call_id=ctx.call_id,
                        tool=spec.name,
                        duration_ms=(now - run.t0) * 1000.0,
                        result=value,
                        digest=call.digest,
                    ),
                )
                return value
        effect_key = None
        if spec.effect is not None:
            effect_key = self._claim(run, call)
            call = msgspec.structs.replace(call, effect_key=effect_key)
            run.call = call
            _current.set(call)
        self._emit(
            run,
            CallStarted(
                ts=clock(),
                run_id=ctx.run_id,
                call_id=ctx.call_id,
                tool=spec.name,
                digest=call.digest,
                effect_key=effect_key or "",
            ),
        )
        run.started = True
        # Durable before the body runs, so a crash leaves an ambiguous call, never a
        # forgotten one.
        await self._flush(run)
        run.reached_body = True
        result = await self._body(run, call)
        if spec.output_guards or self._output_guards:
            await self._guard(
                run, call, "output", spec.output_guards + self._output_guards, (call, result)
            )
        try:
            builtins = msgspec.to_builtins(result)
        except (TypeError, ValueError, OverflowError) as exc:
            error = ToolFailed(f"{spec.name} returned a value that cannot be encoded: {exc}")
            error.__cause__ = exc
            raise _Stop(self._failed(run, error), error) from None
        now = clock()
        if spec.redact_result:
            outcome = CallSucceeded(
                ts=now,
                run_id=ctx.run_id,
                call_id=ctx.call_id,
                tool=spec.name,
                duration_ms=(now - run.t0) * 1000.0,
                result_digest=digest(builtins),
                redacted=True,
            )
        else:
            outcome = CallSucceeded(
                ts=now,
                run_id=ctx.run_id,
                call_id=ctx.call_id,
                tool=spec.name,
                duration_ms=(now - run.t0) * 1000.0,
                result=builtins,
            )
        await self._end(run, outcome, value=result)
        return result

    def _claim(self, run: _Run, call: Call) -> str:
        spec = run.spec
        try:
            key = spec.effect_key(call.args)
        except Exception as exc:
            error = ToolUsageError(f"effect key of {spec.name} cannot be rendered: {exc}")
            failed = self._failed(run, error)
            # The call passed the limit check with no counting event since: say so, so
            # that replay counts it as the live executor did.
            failed.counted = self.state.inflight[run.key].counted
            raise _Stop(failed, error) from None
        assert key is not None
        state = self.state.effects.get(key)
        ctx = run.ctx
        if state is not None:
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
            reason = (
                f"effect {key} is claimed by call {state.call_id} (run {state.run_id}) "
                "whose outcome is unknown; resolve it with resolve_effect"
            )
            raise _Stop(
                CallAmbiguous(
                    ts=now,
                    run_id=ctx.run_id,
                    call_id=ctx.call_id,
                    tool=spec.name,
                    duration_ms=(now - run.t0) * 1000.0,
                    key=key,
                    reason=reason,
                ),
                AmbiguousEffect(reason, key=key),
            )
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

    async def _body(self, run: _Run, call: Call) -> Any:
        spec = run.spec
        fn = spec.fn
        try:
            if spec.timeout is None:
                if spec.is_async:
                    return await fn(**call.args)
                return await asyncio.to_thread(fn, **call.args)
            async with asyncio.timeout(spec.timeout) as scope:
                if spec.is_async:
                    return await fn(**call.args)
                return await asyncio.to_thread(fn, **call.args)
        except TimeoutError as exc:
            if spec.timeout is not None and scope.expired():
                now = self._clock()
                raise _Stop(
                    CallTimedOut(
                        ts=now,
                        run_id=run.ctx.run_id,
                        call_id=run.ctx.call_id,
                        tool=spec.name,
                        duration_ms=(now - run.t0) * 1000.0,
                        timeout_s=spec.timeout,
                    ),
                    ToolTimeout(f"{spec.name} did not finish within {spec.timeout} s"),
                ) from None
            error = ToolFailed(f"{spec.name} failed: TimeoutError: {exc}")
            error.__cause__ = exc
            raise _Stop(self._failed(run, error), error) from None
        except AdapterError as exc:
            raise _Stop(self._failed(run, exc), exc) from None
        except Exception as exc:
            error = ToolFailed(f"{spec.name} failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            raise _Stop(self._failed(run, error), error) from None

    def _failed(self, run: _Run, error: AdapterError) -> CallFailed:
        now = self._clock()
        return CallFailed(
            ts=now,
            run_id=run.ctx.run_id,
            call_id=run.ctx.call_id,
            tool=run.spec.name,
            duration_ms=(now - run.t0) * 1000.0,
            error_kind=error.kind,
            error=str(error),
        )

    async def _end(self, run: _Run, outcome: Event, value: Any = None) -> None:
        """Record the one outcome (durable before the caller hears), then after_tool hooks."""
        self._emit(run, outcome)
        run.ended = True
        await self._flush(run)
        if run.reached_body and self._after and run.call is not None:
            kind = outcome.type.rpartition(".")[2]
            error = None if kind == "succeeded" else RuntimeError(getattr(outcome, "error", ""))
            await self._after_hooks(run.call, Outcome(kind=kind, value=value, error=error), outcome)

    async def _end_shielded(self, run: _Run, outcome: Event) -> None:
        # The task is being cancelled: write the outcome in a shielded task so that a
        # second cancel cannot tear the append in half.
        self._emit(run, outcome)
        run.ended = True
        events, run.buffer = run.buffer, []
        task = asyncio.ensure_future(self.ledger.append_many(events))
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

    # -- step 0: repeats of a finished call ---------------------------------------------

    async def _repeat(self, spec: ToolSpec, args: Any, ctx: CallContext) -> Any:
        key = (ctx.run_id, ctx.call_id)
        recorded = self.state.outcomes.get(key)
        if recorded is None:
            raise AmbiguousEffect(
                f"call {ctx.call_id} (run {ctx.run_id}) already started and has no outcome "
                "(still running, or its process died); it does not run again"
            )
        recorded_digest, _tag = recorded
        try:
            repeat_digest: str | None = _validated(spec, args)[1]
        except ToolArgsInvalid:
            repeat_digest = None
        if repeat_digest != recorded_digest:
            raise ToolUsageError(
                f"call {ctx.call_id} (run {ctx.run_id}) already ran with other arguments; "
                "a call id cannot be reused for new arguments"
            )
        outcome: Event | None = None
        async for event in self.ledger.read(run_id=ctx.run_id, call_id=ctx.call_id):
            if event.is_outcome:
                outcome = event
                break
        if outcome is None:
            raise ToolUsageError(f"the outcome of call {ctx.call_id} is not in the ledger")
        await self._record(
            [
                CallReplayed(
                    ts=self._clock(),
                    run_id=ctx.run_id,
                    call_id=ctx.call_id,
                    tool=spec.name,
                    digest=recorded_digest or "",
                    outcome_seq=outcome.seq,
                )
            ]
        )
        return self._replayed_value(outcome)

    def _replayed_value(self, outcome: Event) -> Any:
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
        error = self._recorded_error(outcome)
        raise error

    @staticmethod
    def _recorded_error(outcome: Event) -> BaseException:
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
            return AmbiguousEffect(outcome.reason, key=outcome.key)
        return ToolFailed(f"unknown recorded outcome {outcome.type}")

    # -- operators ----------------------------------------------------------------------

    async def resolve_effect(
        self, key: str, *, outcome: str, reviewer: str, reason: str | None = None
    ) -> None:
        """Resolve an ambiguous effect key: ``"failed"`` frees it, ``"committed"`` commits it.

        Recorded as ``effect.resolved``. Raises ToolUsageError for a key that is not
        ambiguous (unknown, committed, or claimed by a call running in this process).
        """
        if outcome not in ("committed", "failed"):
            raise ToolUsageError('outcome must be "committed" or "failed"')
        if not reviewer:
            raise ToolUsageError("resolving an effect needs a reviewer name")
        state = self.state.effects.get(key)
        if state is None or state.status != "ambiguous":
            status = "unknown" if state is None else state.status
            raise ToolUsageError(f"effect {key} is {status}, not ambiguous; nothing to resolve")
        await self._record(
            [
                EffectResolved(
                    ts=self._clock(),
                    run_id=state.run_id,
                    call_id=state.call_id,
                    key=key,
                    outcome=outcome,
                    reviewer=reviewer,
                    reason=reason or "",
                )
            ]
        )

    def ambiguous_effects(self) -> dict[str, tuple[str, str]]:
        """Ambiguous keys and the (run_id, call_id) that claimed each."""
        return {
            k: (s.run_id, s.call_id)
            for k, s in self.state.effects.items()
            if s.status == "ambiguous"
        }


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


_default: Executor | None = None


def get_default_executor() -> Executor:
    """The process-wide executor for ``executor=None``: a memory ledger, no approval port."""
    global _default
    if _default is None:
        _default = Executor()
    return _default
