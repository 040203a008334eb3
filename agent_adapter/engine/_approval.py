"""Approval ports: who says yes to a call that needs approval.

A port's ``decide(request)`` returns a ``Decision``, or None for "not decided yet"
(only a deferred port does that). The executor owns the policy around it: a port that
raises denies (fail closed), no port denies, and a decision binds to the digest it was
asked about.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import ApprovalPending, ToolArgsInvalid, ToolUsageError
from ..ledger import (
    ApprovalAnswered,
    ApprovalConsumed,
    ApprovalDeferred,
    Event,
    UnrecordableEvent,
    append_repaired,
    checked_clock,
    recordable,
)
from ..ledger import recordable_text as text
from ._digest import canonical
from ._edits import EditProblem, edit_problem
from ._redaction import REDACTED, overridden, redacted, values_at

if TYPE_CHECKING:
    from ..ledger import Ledger

__all__ = [
    "REDACTED",
    "ApprovalRequest",
    "CallbackApproval",
    "Decision",
    "DeferredApproval",
    "PendingApproval",
    "ask_port",
    "effect_notice",
    "redacted",
]


class ApprovalRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a port is asked: one call, one tool, one digest of validated arguments.

    ``json_schema`` is the tool's JSON Schema (a deferred port records it, so that edits
    can be checked without the registry). ``effect_key`` is the call's rendered effect
    key (None without one) and ``effect_state`` the key's state as the executor knows it
    when asking: None (free), ``"claimed"`` (a call that has not finished holds it),
    ``"committed"`` (an earlier call's effect happened: this call cannot run, approved
    or not) or ``"ambiguous"`` (a call started it and its outcome is unknown);
    ``effect_by_run_id`` and ``effect_by_call_id`` name the call that holds it, and
    ``effect_notice`` says all that in one sentence for a reviewer. Only the reviewer is
    told: after an approval the executor's effect check refuses the call as before.
    ``description`` is the tool's (what it does), recorded by a deferred port for a
    reviewer who has no registry (``""``: none given).
    """

    request_id: str
    run_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    digest: str
    metadata: dict[str, Any] = {}
    redact: frozenset[str] = frozenset()
    json_schema: dict[str, Any] | None = None
    effect_key: str | None = None
    effect_state: str | None = None
    effect_by_run_id: str = ""
    effect_by_call_id: str = ""
    description: str = ""

    @property
    def effect_notice(self) -> str | None:
        """Why approving cannot make the call run (its key is not free), or None."""
        return effect_notice(
            self.effect_key, self.effect_state, self.effect_by_run_id, self.effect_by_call_id
        )


def effect_notice(key: str | None, state: str | None, run_id: str, call_id: str) -> str | None:
    """The sentence a reviewer reads when a call's effect key is not free, else None.

    It states what holds the key and never suggests resolving it: a key that a call still
    holds (or whose effect may have happened) resolved by hand could run the effect twice.
    """
    if not key or not state:
        return None
    by = f"call {call_id} (run {run_id})"
    if state == "committed":
        return f"{key} is already committed by {by}: approving cannot make it run"
    if state == "claimed":
        return (
            f"{key} is claimed by {by}, which has not finished: approving cannot make "
            "this call run while that call holds the key"
        )
    if state == "ambiguous":
        return (
            f"{key} is ambiguous ({by} started and its outcome is unknown): approving "
            "cannot make this call run while it is"
        )
    return f"{key} is {state} (held by {by})"


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """A reviewer's answer. ``edits`` replace the arguments entirely (validated again).

    ``digest``, when set, binds the decision to arguments with that digest: a decision
    carried in ``CallContext.approval`` for other arguments is ignored.
    """

    approved: bool
    reviewer: str = ""
    reason: str = ""
    edits: dict[str, Any] | None = None
    digest: str | None = None

    def __post_init__(self) -> None:
        # Recorded as approval events: normalised (None -> "") or refused here, so that a
        # decision can never make the ledger unreadable.
        if type(self.approved) is not bool:
            raise ToolUsageError(
                f"Decision.approved must be True or False, not {type(self.approved).__name__}"
            )
        for name in ("reviewer", "reason"):
            value = getattr(self, name)
            if value is None:
                _set(self, name, "")
            elif not isinstance(value, str):
                raise ToolUsageError(f"Decision.{name} must be text, not {type(value).__name__}")
            elif type(value) is not str or not value.isascii():
                _set(self, name, text(str(value)))
        edits = self.edits
        if edits is not None:
            if not isinstance(edits, Mapping):
                raise ToolUsageError(
                    f"Decision.edits must be a mapping of arguments, not {type(edits).__name__}"
                )
            if type(edits) is not dict:
                _set(self, "edits", dict(edits))
        if self.digest is not None and not isinstance(self.digest, str):
            raise ToolUsageError(f"Decision.digest must be text, not {type(self.digest).__name__}")


_set = msgspec.structs.force_setattr


async def _append(ledger: Ledger, event: Event) -> Event:
    """``ledger.append(event)``, an unrecordable value repaired (see ``append_repaired``)."""
    try:
        return await ledger.append(event)
    except UnrecordableEvent as refused:
        await append_repaired(ledger, [event], refused)
        return event


def _schema_to_record(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    # Recorded only as it is: a copy made encodable would check edits against another
    # schema than the tool's (the executor still validates them when the call runs).
    if schema is None or recordable(schema) is not schema:
        return None
    return schema


async def ask_port(port: Any, request: ApprovalRequest) -> tuple[Decision | None, str]:
    """Ask an approval port about ``request`` as the executor's step 6 does.

    Returns ``(decision, "")``, or ``(None, request_id)`` when the port holds the request
    open (it returned None, or raised ``ApprovalPending``: then the id of the request it
    already holds for these arguments). A port that raises anything else denies (fail
    closed, the reason naming the error); a bool answer becomes ``Decision(approved=...)``.
    For a bridge that asks a port at its framework's own pause (the OpenAI Agents SDK's
    interruptions, a LangGraph interrupt, pydantic-ai's deferred calls).
    """
    try:
        answer = await port.decide(request)
    except ApprovalPending as exc:
        return None, exc.request_id or request.request_id
    except Exception as exc:
        return Decision(
            approved=False, reason=f"approval port failed: {type(exc).__name__}: {exc}"
        ), ""
    if answer is None:
        return None, request.request_id  # held under this ask's id (DeferredApproval does)
    if isinstance(answer, Decision):
        return answer, ""
    return Decision(approved=bool(answer)), ""


class CallbackApproval:
    """A port from a function: ``fn(request)`` returns bool or ``Decision``, sync or async."""

    def __init__(
        self,
        fn: Callable[[ApprovalRequest], bool | Decision | Awaitable[bool | Decision]],
        *,
        reviewer: str = "callback",
    ) -> None:
        self._fn = fn
        self._reviewer = reviewer

    async def decide(self, request: ApprovalRequest) -> Decision:
        answer = self._fn(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, Decision):
            return answer
        return Decision(approved=bool(answer), reviewer=self._reviewer)


class PendingApproval(msgspec.Struct, frozen=True, kw_only=True):
    """An open deferred request, as ``DeferredApproval.pending()`` lists it."""

    request_id: str
    run_id: str
    call_id: str
    tool: str
    digest: str
    args: Any
    metadata: dict[str, Any]
    ts: float
    seq: int
    #: the tool's redaction paths: ``args`` shows ``"[redacted]"`` there
    redact: tuple[str, ...] = ()
    #: the tool's JSON Schema, or None for a request recorded before it was (edits are
    #: then checked by the executor only, when the call runs)
    json_schema: dict[str, Any] | None = None
    #: the call's effect key and its state when it was asked (see ``ApprovalRequest``)
    effect_key: str | None = None
    effect_state: str | None = None
    effect_by_run_id: str = ""
    effect_by_call_id: str = ""
    #: what the tool does, as recorded with the request ("" for a request recorded
    #: before it was, or a tool without a description)
    description: str = ""

    @property
    def effect_notice(self) -> str | None:
        """Why approving could not make the call run when it was asked, or None."""
        return effect_notice(
            self.effect_key, self.effect_state, self.effect_by_run_id, self.effect_by_call_id
        )

    def edit_problem(self, edits: Any) -> EditProblem | None:
        """Why ``edits`` (complete arguments) do not fit the tool's recorded schema, or None.

        None also when no schema was recorded: nothing can be checked before the call runs.
        A ``"[redacted]"`` left at a redacted path is never a problem (the executor puts
        the requested value back).
        """
        if self.json_schema is None:
            return None
        return edit_problem(self.json_schema, edits, self.redact)


class _Request(msgspec.Struct, kw_only=True):
    pending: PendingApproval
    answer: ApprovalAnswered | None = None
    consumed_by: tuple[str, str] | None = None


class DeferredApproval:
    """Out-of-band review in two phases, through the ledger.

    The first ask records ``approval.pending`` and returns None (the call ends with
    ``ApprovalPending``). A reviewer answers with :meth:`answer`, from this process or any
    other that opens the same ledger (the CLI included). The next ask for the same
    (run_id, tool, digest) returns the decision and records ``approval.consumed``: one
    decision authorizes one execution. Pending requests survive restarts, because this
    port's state is a fold of the ledger.
    """

    def __init__(self, ledger: Ledger, *, clock: Callable[[], float] | None = None) -> None:
        self._ledger = ledger
        self._clock = time.time if clock is None else checked_clock(clock)
        self._cursor = 0
        self._requests: dict[str, _Request] = {}
        self._by_key: dict[tuple[str, str, str], list[str]] = {}
        self._lock = asyncio.Lock()
        # wait() registers here: an answer this object reads (its own, or one a poll brings
        # in) wakes every waiter of that request at once, not at its next poll.
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def _apply(self, event: Event) -> None:
        if isinstance(event, ApprovalDeferred):
            pending = PendingApproval(
                request_id=event.request_id,
                run_id=event.run_id,
                call_id=event.call_id,
                tool=event.tool,
                digest=event.digest,
                args=event.args,
                metadata=event.metadata,
                ts=event.ts,
                seq=event.seq,
                redact=tuple(event.redact),
                json_schema=event.json_schema,
                effect_key=event.effect_key or None,
                effect_state=event.effect_state or None,
                effect_by_run_id=event.effect_by_run_id,
                effect_by_call_id=event.effect_by_call_id,
                description=event.description,
            )
            self._requests[event.request_id] = _Request(pending=pending)
            self._by_key.setdefault((event.run_id, event.tool, event.digest), []).append(
                event.request_id
            )
        elif isinstance(event, ApprovalAnswered):
            request = self._requests.get(event.request_id)
            if request is not None and request.answer is None:
                request.answer = event
                for woken in self._waiters.get(event.request_id, ()):
                    woken.set()
        elif isinstance(event, ApprovalConsumed):
            request = self._requests.get(event.request_id)
            if request is not None and request.consumed_by is None:
                # The first consumption in ledger order wins, across processes.
                request.consumed_by = (event.run_id, event.call_id)

    async def _catch_up(self) -> None:
        async for event in self._ledger.read(after=self._cursor):
            self._apply(event)
            self._cursor = event.seq

    async def refresh(self) -> None:
        """Read what other processes recorded since the last look."""
        async with self._lock:
            await self._catch_up()

    async def decide(self, request: ApprovalRequest) -> Decision | None:
        """Return the answered decision for this (run_id, tool, digest), once; else hold it.

        Appends ``approval.consumed`` (a decision) or ``approval.pending`` (a new request).
        Raises ``ApprovalPending`` naming the open request when one is already held.
        """
        key = (request.run_id, request.tool, request.digest)
        async with self._lock:
            await self._catch_up()
            for request_id in self._by_key.get(key, ()):
                held = self._requests[request_id]
                if held.answer is None or held.consumed_by is not None:
                    continue
                mine = (request.run_id, request.call_id)
                await _append(
                    self._ledger,
                    ApprovalConsumed(
                        ts=self._clock(),
                        run_id=request.run_id,
                        call_id=request.call_id,
                        tool=request.tool,
                        request_id=request_id,
                    ),
                )
                await self._catch_up()
                if held.consumed_by != mine:
                    continue  # another process used this decision first
                answer = held.answer
                return Decision(
                    approved=answer.approved,
                    reviewer=answer.reviewer,
                    reason=answer.reason,
                    edits=answer.edits,
                )
            for request_id in self._by_key.get(key, ()):
                held = self._requests[request_id]
                if held.answer is None:
                    raise ApprovalPending(
                        f"approval {request_id} for {request.tool} is pending",
                        request_id=request_id,
                    )
            await _append(
                self._ledger,
                ApprovalDeferred(
                    ts=self._clock(),
                    run_id=request.run_id,
                    call_id=request.call_id,
                    tool=request.tool,
                    request_id=request.request_id,
                    digest=request.digest,
                    args=redacted(request.args, request.redact),
                    metadata=request.metadata,
                    redact=sorted(request.redact),
                    json_schema=_schema_to_record(request.json_schema),
                    effect_key=request.effect_key or "",
                    effect_state=request.effect_state or "",
                    effect_by_run_id=request.effect_by_run_id,
                    effect_by_call_id=request.effect_by_call_id,
                    description=request.description,
                ),
            )
            await self._catch_up()
            return None

    async def answer(
        self,
        request_id: str,
        *,
        approved: bool,
        reviewer: str,
        reason: str = "",
        edits: dict[str, Any] | None = None,
    ) -> None:
        """Record a reviewer's decision (``approval.answered``) for an open request.

        Raises ToolUsageError for an unknown request id or one already answered, also
        when another process's answer lands first (the first in ledger order counts).
        An approval's ``edits`` are checked against the tool's JSON Schema recorded with
        the request: ToolArgsInvalid naming the field when they do not fit, and nothing
        is recorded. (A request recorded without a schema, by an older version, takes
        them as they are; the executor validates them when the call runs.)
        """
        # The same rules as a Decision's (and the same errors): nothing unrecordable is
        # appended, and a refused answer records nothing.
        decision = Decision(approved=approved, reviewer=reviewer, reason=reason, edits=edits)
        reviewer, reason, edits = decision.reviewer, decision.reason, decision.edits
        if not reviewer:
            raise ToolUsageError("a decision needs a reviewer name")
        if edits is not None:
            # Strictly, as arguments are digested: an object the ledger's encoder would
            # record as a placeholder must not become the arguments the call runs with.
            try:
                # Recorded as the JSON values checked here (a str subclass as its text):
                # what the ledger holds is what the call will run with.
                edits = msgspec.json.decode(canonical(edits))
            except (TypeError, ValueError, OverflowError, RecursionError) as exc:
                raise ToolUsageError(
                    "the edits cannot be recorded as JSON arguments (text that is not valid "
                    f"Unicode, nesting too deep, or a value that is not JSON: {exc}); nothing "
                    "was recorded"
                ) from None
        async with self._lock:
            await self._catch_up()
            held = self._requests.get(request_id)
            if held is None:
                raise ToolUsageError(f"no approval request {request_id!r} in this ledger")
            if held.answer is not None:
                raise ToolUsageError(f"approval request {request_id!r} is already answered")
            pending = held.pending
            if edits is not None and isinstance(pending.args, dict):
                # A value for a redacted argument would be written to the ledger in clear.
                hidden = overridden(pending.args, edits) + [
                    path
                    for path in pending.redact
                    if any(v != REDACTED for v in values_at(edits, frozenset({path})))
                ]
                if hidden:
                    raise ToolUsageError(
                        f"edits cannot set redacted arguments {sorted(set(hidden))} through the "
                        f"ledger; leave them as {REDACTED!r} to keep the requested values"
                    )
            if edits is not None and approved:
                # A recorded answer is final: an edit that does not fit would only fail
                # the call when it runs, with no way left to correct it.
                problem = pending.edit_problem(edits)
                if problem is not None:
                    raise ToolArgsInvalid(
                        f"the edits do not fit the arguments of {pending.tool}: {problem}; "
                        "nothing was recorded"
                    )
            mine = await _append(
                self._ledger,
                ApprovalAnswered(
                    ts=self._clock(),
                    run_id=pending.run_id,
                    call_id=pending.call_id,
                    tool=pending.tool,
                    request_id=request_id,
                    approved=approved,
                    reviewer=reviewer,
                    reason=reason,
                    edits=edits,
                ),
            )
            await self._catch_up()
            first = held.answer
            if first is not None and first.seq != mine.seq:
                # Another process answered between our check and our append: the first
                # answer in ledger order is the decision; this one must not pass silently.
                verdict = "approved" if first.approved else "denied"
                raise ToolUsageError(
                    f"approval request {request_id!r} was already {verdict} by "
                    f"{first.reviewer} (seq {first.seq}); this answer (seq {mine.seq}) "
                    "does not count"
                )

    async def pending(self) -> list[PendingApproval]:
        """Open requests (not answered yet), oldest first."""
        async with self._lock:
            await self._catch_up()
            return [r.pending for r in self._requests.values() if r.answer is None]

    async def get(self, request_id: str) -> PendingApproval:
        """One request, answered or not; ToolUsageError when the ledger has none."""
        async with self._lock:
            await self._catch_up()
            held = self._requests.get(request_id)
            if held is None:
                raise ToolUsageError(f"no approval request {request_id!r} in this ledger")
            return held.pending

    # A timeout parameter, not only asyncio.timeout() around the call (which works too):
    # the wait looks once more at its deadline and its TimeoutError names the request.
    async def wait(
        self,
        request_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        poll_s: float = 0.5,
    ) -> Decision:
        """Wait until ``request_id`` is answered, here or by any process on the same ledger.

        Returns the reviewer's decision (``digest`` set to the digest of the arguments the
        request was about). It does not use the decision up: the next ask for the same
        (run_id, tool, arguments) does, once (``decide``; with the OpenAI Agents bridge,
        ``review_interruptions`` again). An answer recorded through this object wakes the
        wait at once; one from another process or port is found by reading the ledger
        every ``poll_s`` seconds (each poll reads only the events since the last one), so a
        wait costs at most ``duration / poll_s + 1`` reads, never a busy loop.

        ``timeout`` (seconds, None: no limit) raises ``TimeoutError`` once it has passed
        with the request still open; nothing is recorded and the request stays pending
        (wait again, or leave it to the reviewer). Cancelling the wait records nothing
        either. Raises ToolUsageError for a request id the ledger does not hold, or a
        ``timeout``/``poll_s`` that is not a number of seconds (``poll_s`` above zero).
        """
        if not _seconds(poll_s) or poll_s <= 0:
            raise ToolUsageError(f"poll_s must be a positive number of seconds, not {poll_s!r}")
        if timeout is not None and (not _seconds(timeout) or timeout < 0):
            raise ToolUsageError(
                f"timeout must be a number of seconds (0 or more) or None, not {timeout!r}"
            )
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        woken = asyncio.Event()
        # Registered before the first look: an answer applied from then on sets it, so
        # none can slip in between a look and the sleep after it.
        self._waiters.setdefault(request_id, set()).add(woken)
        try:
            while True:
                woken.clear()
                async with self._lock:
                    await self._catch_up()
                    held = self._requests.get(request_id)
                if held is None:
                    raise ToolUsageError(f"no approval request {request_id!r} in this ledger")
                if held.answer is not None:
                    return _decision(held.answer, held.pending.digest)
                delay = poll_s
                if deadline is not None:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        pending = held.pending
                        raise TimeoutError(
                            f"approval request {request_id!r} ({pending.tool}, run "
                            f"{pending.run_id}) is still pending after {timeout} s; "
                            "nothing was recorded"
                        )
                    delay = min(delay, remaining)
                # One timer per sleep, cancelled on the way out: a cancelled wait leaves
                # neither a timer nor a registration behind.
                timer = loop.call_later(delay, woken.set)
                try:
                    await woken.wait()
                finally:
                    timer.cancel()
        finally:
            waiters = self._waiters.get(request_id)
            if waiters is not None:
                waiters.discard(woken)
                if not waiters:
                    del self._waiters[request_id]


def _seconds(value: object) -> bool:
    """True for a real, finite number (bool is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _decision(answer: ApprovalAnswered, args_digest: str) -> Decision:
    return Decision(
        approved=answer.approved,
        reviewer=answer.reviewer,
        reason=answer.reason,
        edits=answer.edits,
        digest=args_digest,
    )
