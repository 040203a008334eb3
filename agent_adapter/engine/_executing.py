"""Steps 7-10 of the pipeline: cache, effect claim, the write-ahead, the body under its
deadline, output guards and the outcome; and what protects the body's arguments."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from hashlib import sha256
from typing import Any

import msgspec

from ..errors import (
    AdapterError,
    ToolError,
    ToolFailed,
    ToolTimeout,
    ToolUsageError,
)
from ..ledger import (
    CallCached,
    CallStarted,
    CallSucceeded,
    CallTimedOut,
    EffectClaimed,
    EffectTaken,
    Event,
    UnrecordableEvent,
    append_repaired,
)
from ._checking import _guard
from ._context import Call, Outcome, _current
from ._deadline import deadline
from ._digest import canonical, digest
from ._effects import _ambiguous, _claim, _Ours, _Stale
from ._outcome import end, end_cancelled, write
from ._pipeline import Pipeline
from ._plan import Plan
from ._replaying import _repeat, typed_result
from ._run import _Run, _Stop
from ._spec import ToolSpec

__all__ = ["_execute", "_rollback", "_unchanged"]

_CLAIM_EVENTS = (EffectClaimed, CallStarted)
_CONTAINERS = (dict, list)
_encode = msgspec.json.encode


def _unchanged(pipe: Pipeline, run: _Run, call: Call, *, fresh: bool = False) -> Call:
    """Refuse arguments changed in place since their digest was taken (``call.failed``).

    Hooks, guards and confirm rules get the validated dict itself; approvals, the
    cache and effect keys bind to its digest, so a change made in place would run
    arguments nobody approved under the approved digest. Checked only when such
    code ran for the call. With ``fresh``, returns the call with its own copy of the
    arguments, decoded from the bytes just digested: code that kept a reference to the
    objects it was shown can no longer change what the body runs.
    """
    try:
        data = canonical(call.args)
        same = sha256(data).hexdigest() == call.digest
    except (TypeError, ValueError, OverflowError, RecursionError):
        same = False
    if not same:
        error = ToolUsageError(
            f"the arguments of {call.tool} were changed in place after validation (by a "
            "hook, guard or confirm rule); approvals, cache and effects bind to their digest"
        )
        failed = pipe.failed(run, error)
        failed.counted = pipe.state.inflight[run.key].counted
        failed.ran = False  # checked before the body: it never ran
        raise _Stop(failed, error)
    if not fresh:
        return call
    args_type = run.spec.args_type
    if args_type is not None:
        copy = msgspec.structs.asdict(msgspec.json.decode(data, type=args_type))
    else:
        copy = msgspec.json.decode(data)
    call = msgspec.structs.replace(call, args=copy)
    run.call = call
    _current.set(call)
    return call


def _body(pipe: Pipeline, spec: ToolSpec, call: Call) -> Awaitable[Any]:
    """The tool body's awaitable: the async function's coroutine, or a worker thread."""
    if spec.is_async:
        return spec.fn(**call.args)  # type: ignore[no-any-return]
    return _in_thread(pipe, spec.fn, call)


async def _around(pipe: Pipeline, run: _Run, call: Call) -> Any:
    """The body inside the hooks' ``around_body`` chain: once, on its checked arguments,
    with its own outcome.

    A hook is handed the call; ``next()`` checks the arguments against their digest again
    (a hook that changed them in place: ``call.failed``, the body never ran) and runs the
    body on its own copy. ``next()`` runs the body once: a second call is a ToolUsageError
    and no second run. The body's error (or that refusal) is the call's outcome even when
    a hook caught it and returned a value; a chain that returned without calling
    ``next()`` fails the call (ToolUsageError), and its effect key is ambiguous: what the
    hook did instead is not known.
    """
    around = pipe.around
    assert around is not None
    spec = run.spec
    ran = False
    failures: list[BaseException] = []

    async def body() -> Any:
        nonlocal ran
        if ran:
            raise ToolUsageError(
                f"an around_body hook called next() twice for {call.tool}; the body runs once"
            )
        ran = True
        try:
            return await _body(pipe, spec, _unchanged(pipe, run, call, fresh=True))
        except BaseException as exc:
            failures.append(exc)
            raise

    try:
        result = await around(call, body)
    except BaseException:
        if failures:
            raise failures[0]  # noqa: B904 (the body's own error, with its own cause)
        raise
    if failures:
        raise failures[0]
    if not ran:
        raise ToolUsageError(
            f"an around_body hook returned without calling next() for {call.tool}: the "
            "body did not run through the executor"
        )
    return result


async def _in_thread(pipe: Pipeline, fn: Callable[..., Any], call: Call) -> Any:
    """A sync body in a worker thread (which sees ``current_call()``).

    A timeout or cancel stops the wait, not the thread: while the thread runs, its
    effect key is held in ``_running_keys`` so that nobody resolves it as failed and
    runs the effect a second time beside it.
    """
    key = call.effect_key
    if key is None:
        return await asyncio.to_thread(fn, **call.args)
    running = pipe.running_keys
    running[key] = running.get(key, 0) + 1
    lock = threading.Lock()
    stage = ["queued"]  # -> "running" in the thread, or "abandoned" here; under ``lock``

    def release() -> None:
        left = running.get(key, 1) - 1  # under the GIL; one writer per key
        if left:
            running[key] = left
        else:
            running.pop(key, None)

    def body() -> Any:
        with lock:
            if stage[0] == "abandoned":
                return None  # the wait was cancelled before the thread began: never ran
            stage[0] = "running"
        try:
            return fn(**call.args)
        finally:
            release()

    try:
        return await asyncio.to_thread(body)
    except BaseException:
        with lock:
            if stage[0] == "queued":
                # Cancelled (a timeout) while still queued for a worker: the body will
                # never run, so the key is not held by a running thread.
                stage[0] = "abandoned"
                release()
        raise


def _rollback(pipe: Pipeline, run: _Run) -> None:
    """Undo a call's claims when its pre-body events could not be made durable.

    Nothing of that batch is in the ledger (a batch commits whole), and the body never
    ran: the in-memory projection must not keep an effect claim, a run count or an
    in-flight entry that a replay of the ledger would not have. The caller gets the
    ledger's error; no outcome is recorded (the ledger is failing).
    """
    run.ended = True
    state = pipe.state
    inflight = state.inflight.pop(run.key, None)
    if inflight is None:
        return
    if inflight.counted and not run.count_durable:
        run_id, tool = run.key[0], inflight.tool
        state.run_calls[run_id] = state.run_calls.get(run_id, 1) - 1
        state.tool_calls[(run_id, tool)] = state.tool_calls.get((run_id, tool), 1) - 1
    key = inflight.effect_key
    claim = state.effects.get(key) if key is not None else None
    if claim is not None and (claim.run_id, claim.call_id) == run.key:
        del state.effects[key]  # type: ignore[arg-type]


def _unclaim(
    pipe: Pipeline, run: _Run, call: Call, events: list[Event], before: tuple[Any, bool, Any]
) -> Call:
    """Undo a claim whose write-ahead was refused (``EffectTaken``): nothing was written.

    The call is back where it stood before the claim step: its earlier events buffered
    again, no claim, not started, counted only if it was before. ``before`` holds this
    call's own in-flight entry, whether it was counted, and its own effect state: by now
    the other writer's events are folded in, and when it ran the same (run_id, call_id)
    they have replaced both in the projection; those must stay.
    """
    state = pipe.state
    inflight, counted, claim = before
    key = call.effect_key
    if key is not None and state.effects.get(key) is claim:
        del state.effects[key]
    inflight.started = False
    inflight.effect_key = None
    inflight.run_digest = ""
    if inflight.counted and not counted:
        inflight.counted = False
        run_id, tool = run.key[0], inflight.tool
        state.run_calls[run_id] -= 1
        state.tool_calls[(run_id, tool)] -= 1
    run.started = False
    run.buffer = [e for e in events if not isinstance(e, _CLAIM_EVENTS)]
    return call


async def _execute(pipe: Pipeline, run: _Run, call: Call, plan: Plan) -> Any:
    """Steps 7-10, the one body path: cache, effect claim, started, body, output guards,
    outcome; each step only when the spec's plan has it.

    A call with nothing to decide (``plan.straight``: an async body; no cache, effect key,
    timeout, output guard, ``after_tool`` or ``around_body`` hook) goes straight through:
    ``call.started`` appended (a MemoryLedger with no coroutine, ``append_now``), the
    body awaited, the outcome written. Appends ``call.cached``, or ``effect.claimed`` and
    ``call.started`` (durable before the body, unless ``durability="outcome"``), then
    ``guard.checked`` (output) and the outcome.
    """
    spec = run.spec
    if plan.cache is not None:
        hit, value = pipe.state.cached(spec.name, call.digest, pipe.clock())
        if hit:
            return await _cached(pipe, run, call, value)
    events: list[Event]
    if plan.effect:
        claimed = await _claim_and_start(pipe, run, call)
        if claimed is None:
            # The catch-up found this very call id finished by another process (its
            # outcome took the call out of flight): answer from the ledger, as step 0
            # would have. Nothing of this attempt is recorded, and the body never runs.
            run.ended = True
            return await _repeat(pipe, spec, call.args, run.ctx)
        effect_key, call, events, held = claimed
    else:
        effect_key = None
        held = False
        ctx = run.ctx
        started = CallStarted(
            ts=pipe.clock(),
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=spec.name,
            digest=call.digest,
        )
        pipe.state._started(started)
        run.buffer.append(started)
        run.started = True
        if plan.durable_start:
            # Durable before the body runs, so a crash leaves an ambiguous call, never a
            # forgotten one. (Pipeline.append inlined: its coroutine is ~3% of an
            # in-memory call, benchmarks/ab_core.py.)
            events, run.buffer = run.buffer, []
            try:
                append_now = pipe.append_now
                try:
                    if append_now is not None:
                        append_now(events)
                    else:
                        await pipe.ledger.append_many(events)
                except UnrecordableEvent as refused:  # (never for what the boundary checked)
                    await append_repaired(pipe.ledger, events, refused)
            except Exception:
                _rollback(pipe, run)
                raise
        else:
            # No effect key, no approval (Registry refuses them): a crash during the body
            # can lose only the record that this call started, and running it again is
            # harmless. The buffer is committed with the outcome, in one append.
            events = []
    if pipe.observed:
        if events:
            await pipe.dispatch(events)
        # Code that saw the arguments may have run during that await (an on_event
        # hook, or a task holding what a hook or guard was given): the body gets
        # exactly the digested arguments, in a copy nobody else holds, or does not run.
        call = _unchanged(pipe, run, call, fresh=True)
    elif run.exposed:
        call = _unchanged(pipe, run, call, fresh=True)
    run.reached_body = True
    if effect_key is not None:
        # A started effect body is never cancelled half-way (DESIGN, Ledger): it runs to
        # its end in a task of its own, with its outcome, whatever cancels the caller.
        return await _held(pipe, run, _effect_body(pipe, run, call, plan, effect_key), held)
    # (The plain path, inline: _after_body's steps without its await, see ab_core.py.)
    try:
        if plan.direct:
            result = await spec.fn(**call.args)
        else:
            result = await _run_body(pipe, run, call, plan, None)
    except _Stop:
        raise
    except Exception as exc:
        raise _body_failed(pipe, run, exc) from None
    if plan.output_guards:
        await _guard(pipe, run, call, "output", plan.output_guards, (call, result))
    outcome = _succeeded(pipe, run, result)
    events = await write(pipe, run, outcome)
    if pipe.observed:
        # (A subscriber that arrived while the body ran sees the outcome too.)
        await pipe.dispatch(events)
    if pipe.after:
        await pipe.after_hooks(call, Outcome(kind="succeeded", value=result, error=None), outcome)
    return result


async def _after_body(pipe: Pipeline, run: _Run, call: Call, plan: Plan, result: Any) -> Any:
    """Step 10 for a body that returned ``result``: output guards, ``call.succeeded``,
    observers, ``after_tool`` hooks (the plain path has these steps inline)."""
    if plan.output_guards:
        await _guard(pipe, run, call, "output", plan.output_guards, (call, result))
    outcome = _succeeded(pipe, run, result)
    events = await write(pipe, run, outcome)
    if pipe.observed:
        await pipe.dispatch(events)
    if pipe.after:
        await pipe.after_hooks(call, Outcome(kind="succeeded", value=result, error=None), outcome)
    return result


async def _effect_body(pipe: Pipeline, run: _Run, call: Call, plan: Plan, key: str) -> Any:
    """Steps 9-10 of a call with an effect key, from its body to its recorded outcome and
    ``after_tool`` hooks, as one task that ``_held`` keeps from the caller's cancels.

    Every outcome is written here, in this task (``run_spec`` finds the call ended): a
    caller's cancel is delivered only once the body's own outcome (``call.succeeded``,
    ``call.failed``, ``call.timed_out``, ``call.blocked``) is durable. Only a cancel of
    this task itself (the loop shutting down) records ``call.cancelled``.
    """
    try:
        try:
            result = await _run_body(pipe, run, call, plan, key)
        except _Stop:
            raise
        except Exception as exc:
            raise _body_failed(pipe, run, exc) from None
        return await _after_body(pipe, run, call, plan, result)
    except _Stop as stop:
        await end(pipe, run, stop.outcome, error=stop.error)
        error = stop.error
        if isinstance(error, AdapterError):
            error.recorded_by = run.key
        raise error from getattr(error, "__cause__", None)
    except asyncio.CancelledError:
        await end_cancelled(pipe, run)
        raise


async def _held(pipe: Pipeline, run: _Run, body: Awaitable[Any], held: bool) -> Any:
    """Await ``body`` (a started effect call's rest) in a task of its own, to its end.

    A cancel of the caller (the framework cancelling a sibling tool call, a second cancel
    too) is held while the body runs: cancelling it half-way would leave its key
    ambiguous though the effect may have happened. Once the body's outcome is recorded,
    the held cancel is delivered: ``CancelledError`` to the caller, never swallowed.
    ``held`` is True when a cancel came during the write-ahead. The body's own deadline
    cancels that task, not the caller: a timeout stays ``call.timed_out``.
    """
    # The task copies this context: current_call() and the follower's appends flow.
    task = asyncio.ensure_future(body)
    while True:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                held = True  # the caller's cancel: held until the outcome is recorded
                continue
            if task.cancelled():
                raise  # the body's task itself was cancelled (recorded call.cancelled)
            if not held:
                raise  # (the task raised CancelledError of its own)
            error: BaseException | None = task.exception()
            result = None
        except BaseException as exc:
            if not held:
                raise
            error = exc
            result = None
        else:
            error = None
        if held:
            # Durable by now (the task wrote the outcome): the caller's cancel goes on.
            cancelled = asyncio.CancelledError()
            cancelled.__context__ = error
            raise cancelled
        return result


async def _cached(pipe: Pipeline, run: _Run, call: Call, stored: Any) -> Any:
    """Step 7, a hit: ``call.cached`` is the outcome and the stored value the answer."""
    spec = run.spec
    ctx = run.ctx
    value = typed_result(spec, stored)
    now = pipe.clock()
    await end(
        pipe,
        run,
        CallCached(
            ts=now,
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=spec.name,
            duration_ms=(now - run.t0) * 1000.0,
            result=stored,
            digest=call.digest,
        ),
    )
    return value


async def _claim_and_start(
    pipe: Pipeline, run: _Run, call: Call
) -> tuple[str, Call, list[Event], bool] | None:
    """Steps 8-9 for a call with an effect key: claim it, then ``call.started``, both
    durable before the body (or with the outcome: ``durability="outcome"`` has no key).

    Returns the key, the call, the events written and whether a cancel came during the
    write-ahead (held: delivered after the outcome); None when the call id turned out
    to be finished by another process (answered as a repeat). Another process's claim
    that lands first makes the claim step decide again (duplicate or ambiguous).
    """
    spec = run.spec
    ctx = run.ctx
    caught_up = False
    # A claim whose holder is gone (or whose lease ran out) is ambiguous only on news
    # read after that was seen: the holder may have written its outcome, then exited.
    settled = not pipe.shared
    refusals = 0
    loop = asyncio.get_running_loop()
    waited: float | None = None  # (loop time) until when to wait for our own holder
    while True:
        inflight = pipe.state.inflight.get(run.key)
        if inflight is None:
            return None
        counted = inflight.counted
        try:
            effect_key = _claim(
                pipe,
                run,
                call,
                fresh=caught_up or refusals > 0 or not pipe.shared,
                wait=waited is None or loop.time() < waited,
                settled=settled,
            )
        except _Ours:
            # Another call of this executor holds the key and is running: wait for its
            # outcome (bounded by this call's timeout, else the lease), then decide
            # again: a duplicate of its success, or run if its failure freed the key.
            key = call.effect_key
            assert key is not None
            if waited is None:
                waited = loop.time() + (spec.timeout or pipe.lease_s)
            waiting = pipe.waiters.get(key)
            if waiting is None:
                waiting = pipe.waiters[key] = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(waited):
                    await waiting.wait()
            continue
        except _Stale:
            # Another process claimed the key: hear what became of it, then decide.
            if caught_up or refusals > 0:
                settled = True  # the holder's end was seen before this news is read
            caught_up = True
            if pipe.catch_up is not None:
                await pipe.catch_up()
            continue
        before = (inflight, counted, pipe.state.effects.get(effect_key))
        started = CallStarted(
            ts=pipe.clock(),
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=spec.name,
            digest=call.digest,
            effect_key=effect_key,
        )
        pipe.state._started(started)
        run.buffer.append(started)
        run.started = True
        # Durable before the body runs, so a crash leaves an ambiguous call, never a
        # forgotten one. (The buffer is never empty here.)
        events, run.buffer = run.buffer, []
        held = False
        try:
            if pipe.append_now is not None:
                await pipe.append(events)  # stored now: no suspension a cancel could hit
            else:
                # Once written, the body counts as started: a cancel that comes during
                # the write is held, as during the body (_held), not left half-way.
                writing = asyncio.ensure_future(pipe.append(events))
                held = await _settled(writing)
                writing.result()
        except EffectTaken as taken:
            # Another process claimed the key first; its claim is applied by now, so
            # the claim step decides again (duplicate or ambiguous), as for our own.
            refusals += 1
            call = _unclaim(pipe, run, call, events, before)
            if held:
                raise asyncio.CancelledError from None  # nothing started: the cancel goes on
            if refusals >= 3:  # claimed and freed again each time: do not spin
                raise _ambiguous(
                    pipe,
                    run,
                    taken.key,
                    f"effect {taken.key} was claimed by another process (seq {taken.seq}) "
                    "each time this call tried; its outcome is unknown here",
                ) from None
            continue
        except Exception as exc:
            _rollback(pipe, run)
            if held:
                raise asyncio.CancelledError from exc
            raise
        return effect_key, call, events, held


async def _settled(task: asyncio.Future[Any]) -> bool:
    """Wait for ``task`` to finish whatever cancels the caller meanwhile (``asyncio.wait``
    never cancels what it waits for); True when such a cancel came, to deliver later."""
    held = False
    while not task.done():
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            held = True
    return held


async def _run_body(
    pipe: Pipeline, run: _Run, call: Call, plan: Plan, effect_key: str | None
) -> Any:
    """The body when it is not simply awaited: under its deadline, inside the hooks'
    ``around_body``, in a worker thread, or holding an effect lease while it runs."""
    # The holder is alive while its body runs: its lease says so to every other reader.
    if effect_key is not None:
        pipe.leases.hold(run, effect_key)
    try:
        if plan.timeout is not None:
            return await _timed(pipe, run, call)
        if pipe.around is not None:
            return await _around(pipe, run, call)
        return await _body(pipe, run.spec, call)
    finally:
        if effect_key is not None:
            writing = pipe.leases.release(run)
            if writing is not None:
                await asyncio.wait((writing,))


def _body_failed(pipe: Pipeline, run: _Run, exc: Exception) -> _Stop:
    """The outcome of a body that raised ``exc``, as the ``_Stop`` that ends the call."""
    spec = run.spec
    if isinstance(exc, AdapterError):
        if isinstance(exc, ToolError) and exc.recorded_by is not None:
            # A ToolError says "this tool did nothing", which frees its effect key;
            # one that came out of a nested call is that call's outcome, not this
            # body's statement: this body may have done its effect before it.
            error: AdapterError = ToolFailed(
                f"{spec.name} failed: a nested call {exc.recorded_by[1]} raised {exc.kind}: {exc}"
            )
            error.__cause__ = exc
            return _Stop(pipe.failed(run, error), error)
        return _Stop(pipe.failed(run, exc), exc)
    # A TimeoutError that is not our deadline's lands here too: the tool's own.
    error = ToolFailed(f"{spec.name} failed: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return _Stop(pipe.failed(run, error), error)


def _succeeded(pipe: Pipeline, run: _Run, result: Any) -> CallSucceeded:
    """The ``call.succeeded`` of ``result``; raises ``_Stop`` (a failure: the body ran)
    for a value the ledger could not store."""
    spec = run.spec
    ctx = run.ctx
    try:
        # Keys as text (what JSON holds): {1: ...} and {"1": ...} are one key in the
        # ledger, so what is recorded reads back as it was recorded.
        builtins = msgspec.to_builtins(result, str_keys=True)
        result_digest = digest(builtins) if spec.redact_result else ""
        if type(builtins) is str:
            if not builtins.isascii():
                builtins.encode("utf-8")  # a lone surrogate cannot be stored
        elif isinstance(builtins, _CONTAINERS):
            # Encoded once here so that a value the ledger cannot store (a lone
            # surrogate, nesting past the encoder's limit) ends the call as a failure
            # (with its effect key ambiguous: the body ran) rather than with no outcome.
            _encode(builtins)
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError) as exc:
        error = ToolFailed(f"{spec.name} returned a value that cannot be encoded: {exc}")
        error.__cause__ = exc
        raise _Stop(pipe.failed(run, error), error) from None
    now = pipe.clock()
    if spec.redact_result:
        return CallSucceeded(
            ts=now,
            run_id=ctx.run_id,
            call_id=ctx.call_id,
            tool=spec.name,
            duration_ms=(now - run.t0) * 1000.0,
            result_digest=result_digest,
            redacted=True,
        )
    return CallSucceeded(
        ts=now,
        run_id=ctx.run_id,
        call_id=ctx.call_id,
        tool=spec.name,
        duration_ms=(now - run.t0) * 1000.0,
        result=builtins,
    )


async def _timed(pipe: Pipeline, run: _Run, call: Call) -> Any:
    """The body under the spec's timeout; our deadline ends the call with ``call.timed_out``.

    ``asyncio.timeout``'s semantics with a deadline that shares its timer (``_deadline``)
    and no context manager: at the deadline the task is cancelled; a CancelledError
    that our cancel caused (no other cancel request pending, counted with
    ``cancelling``/``uncancel``) becomes the timeout,
    and any other cancel propagates. A TimeoutError the tool raises on its own is a
    tool failure, unless our deadline fired first (as ``scope.expired()`` said).
    """
    spec = run.spec
    fn = spec.fn
    entry = deadline(spec.timeout)  # type: ignore[arg-type]
    task: asyncio.Task[Any] = entry.task  # type: ignore[assignment]  # set until done
    cancelling = task.cancelling()
    try:
        if pipe.around is not None:
            result = await _around(pipe, run, call)
        elif spec.is_async:
            result = await fn(**call.args)
        else:
            result = await _in_thread(pipe, fn, call)
    except (asyncio.CancelledError, TimeoutError) as exc:
        entry.done = True
        entry.task = None
        if not entry.fired:
            raise
        if task.uncancel() > cancelling and isinstance(exc, asyncio.CancelledError):
            raise  # someone else cancelled the task too: theirs wins
        now = pipe.clock()
        raise _Stop(
            CallTimedOut(
                ts=now,
                run_id=run.ctx.run_id,
                call_id=run.ctx.call_id,
                tool=spec.name,
                duration_ms=(now - run.t0) * 1000.0,
                timeout_s=spec.timeout,  # type: ignore[arg-type]
            ),
            ToolTimeout(f"{spec.name} did not finish within {spec.timeout} s"),
        ) from None
    except BaseException:
        entry.done = True
        entry.task = None
        if entry.fired:
            task.uncancel()
        raise
    entry.done = True
    entry.task = None
    if entry.fired:
        task.uncancel()  # the body finished despite our cancel: the request is withdrawn
    return result
