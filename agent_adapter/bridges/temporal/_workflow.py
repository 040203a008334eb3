"""The workflow side: ``call_tool`` and ``ApprovalGate``. Sandbox-safe, no executor code.

Only Temporal's workflow API and the stdlib shapes are used here: the executor (SQLite
I/O, clocks, random ids) never runs in workflow code, where it would break determinism.
An approval crosses into the ``run`` activity as a decision bound to the digest that
``prepare`` computed, so the executor's binding holds: a decision for other arguments
is ignored there, and the port (or a denial) decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError

from ._shapes import (
    APPROVE_SIGNAL,
    APPROVE_UPDATE,
    PENDING_QUERY,
    PREPARE,
    RUN,
    Prepared,
    PrepareInput,
    RunInput,
    ToolResult,
)

__all__ = ["ApprovalGate", "call_tool", "error_kind"]

_FIELDS = {"call_id", "approved", "reviewer", "digest", "reason", "edits"}


def error_kind(error: BaseException) -> str | None:
    """The agent-adapter kind of a failed call (``"duplicate-effect"``, ...), else None.

    ``call_tool`` raises the activity's ``ActivityError``, whose cause is the
    ``ApplicationError`` typed by the kind. Elsewhere the kind sits deeper: an agent run
    under Temporal's OpenAI plugin fails with the plugin's ``AgentsWorkflowError`` raised
    from that ``ActivityError``, and its starter sees a ``WorkflowFailureError`` whose
    cause chain holds both. So the chain is followed (Temporal's ``cause``, then
    ``__cause__``) to the first ``ApplicationError`` the bridge raised: its details carry
    ``{"kind": <its type>, ...}``, which no other layer's error (the plugin's own, typed
    ``"AgentsWorkflowError"``) does. Without one, the first ``ApplicationError`` directly
    or under an ``ActivityError`` gives its type, as before.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ApplicationError) and _ours(current):
            return current.type
        following = current.cause if isinstance(current, FailureError) else None
        current = following or current.__cause__
    cause = error.cause if isinstance(error, ActivityError) else error
    if isinstance(cause, ApplicationError):
        return cause.type
    return None


def _ours(error: ApplicationError) -> bool:
    """Whether the bridge raised ``error``: its first detail is ``{"kind": error.type, ...}``."""
    details = error.details
    first = details[0] if details else None
    return isinstance(first, Mapping) and first.get("kind") == error.type


def _answer(answer: Any) -> dict[str, Any]:
    """The answer's fields checked (``ValueError`` saying what is wrong), as a dict."""
    if not isinstance(answer, Mapping):
        raise ValueError(
            f"an approval is an object with call_id, approved, reviewer, digest; "
            f"got {type(answer).__name__}"
        )
    unknown = sorted(set(answer) - _FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) in the approval: {', '.join(unknown)}")
    for name, kind in (("call_id", str), ("approved", bool), ("reviewer", str), ("digest", str)):
        if not isinstance(answer.get(name), kind):
            raise ValueError(f"the approval's {name} must be {kind.__name__}")
    if not isinstance(answer.get("reason", ""), str):
        raise ValueError("the approval's reason must be str")
    edits = answer.get("edits")
    if edits is not None and not isinstance(edits, Mapping):
        raise ValueError("the approval's edits must be an object of arguments")
    return dict(answer)


class ApprovalGate:
    """Approvals for a workflow's tool calls, answered by Update or Signal.

    Build it inside the workflow (its ``__init__`` or run method); it registers:

    - Update ``"agent_adapter.approve"`` taking ``{"call_id", "approved", "reviewer",
      "digest", "reason"?, "edits"?}``. Its validator rejects a call that is not pending
      or a digest other than the pending call's: the client gets the update's failure,
      and nothing is recorded.
    - Signal ``"agent_adapter.approve_signal"`` with the same object, for a client that
      cannot wait for a worker; a mismatching one is ignored and logged.
    - Query ``"agent_adapter.pending"``: ``[{"call_id", "tool", "digest", "args"}]``
      (redacted arguments).

    An answer counts only while its call is pending. Pending calls and answers live in
    workflow state, rebuilt by replay, so they survive worker restarts.
    """

    def __init__(self) -> None:
        self._pending: dict[str, Prepared] = {}
        self._answers: dict[str, dict[str, Any]] = {}
        workflow.set_update_handler(APPROVE_UPDATE, self._update, validator=self._validate)
        workflow.set_signal_handler(APPROVE_SIGNAL, self._signal)
        workflow.set_query_handler(PENDING_QUERY, self.pending)

    def pending(self) -> list[dict[str, Any]]:
        """The calls waiting for an answer (the Query's value), in the order asked."""
        return [
            {"call_id": p.call_id, "tool": p.tool, "digest": p.digest, "args": p.args}
            for p in self._pending.values()
        ]

    def _problem(self, answer: Any) -> tuple[dict[str, Any] | None, str]:
        try:
            checked = _answer(answer)
        except ValueError as exc:
            return None, str(exc)
        call_id = checked["call_id"]
        prepared = self._pending.get(call_id)
        if prepared is None or call_id in self._answers:
            return None, f"call {call_id!r} is not waiting for approval"
        if checked["digest"] != prepared.digest:
            return None, (
                f"the digest does not match call {call_id!r}: it waits for approval of "
                f"arguments with digest {prepared.digest}"
            )
        return checked, ""

    # Typed Any: the converter hands over whatever JSON came, so a malformed answer gets
    # _answer's message instead of "Failed decoding arguments".
    def _validate(self, answer: Any) -> None:
        checked, problem = self._problem(answer)
        if checked is None:
            raise ApplicationError(problem, type="approval-rejected")

    def _update(self, answer: Any) -> str:
        # Checked again: two updates validated in one activation pass the validator before
        # either handler runs; only the first may count.
        checked, problem = self._problem(answer)
        if checked is None:
            raise ApplicationError(problem, type="approval-rejected")
        self._answers[checked["call_id"]] = checked
        return "approved" if checked["approved"] else "denied"

    def _signal(self, answer: Any) -> None:
        checked, problem = self._problem(answer)
        if checked is None:
            workflow.logger.warning("agent-adapter: approval signal ignored: %s", problem)
            return
        self._answers[checked["call_id"]] = checked

    async def decide(
        self, prepared: Prepared, *, approval_timeout: timedelta | None = None
    ) -> dict[str, Any]:
        """Wait for the answer to ``prepared``'s call; past ``approval_timeout``, a denial with
        reason "timeout" (a durable timer: it survives worker restarts too). Returns the
        decision's fields, bound to the prepared digest."""
        call_id = prepared.call_id
        self._pending[call_id] = prepared
        try:
            await workflow.wait_condition(
                lambda: call_id in self._answers, timeout=approval_timeout, timeout_summary=call_id
            )
            answer = self._answers[call_id]
        except TimeoutError:
            answer = {"approved": False, "reviewer": "", "reason": "timeout"}
        finally:
            # Used once: a later ask under the same call id (a workflow that repeats a
            # call) waits for an answer of its own, never this one.
            del self._pending[call_id]
            self._answers.pop(call_id, None)
        return {
            "approved": answer["approved"],
            "reviewer": answer.get("reviewer", ""),
            "reason": answer.get("reason", ""),
            "edits": None if answer.get("edits") is None else dict(answer["edits"]),
            "digest": prepared.digest,
        }


async def call_tool(
    tool: str,
    args: Any,
    *,
    call_id: str,
    gate: ApprovalGate | None = None,
    start_to_close_timeout: timedelta = timedelta(seconds=60),
    retry_policy: RetryPolicy | None = None,
    approval_timeout: timedelta | None = None,
) -> ToolResult:
    """One tool call from workflow code: ``prepare``, the gate's answer if needed, ``run``.

    ``call_id`` names the call within the workflow (the model's tool-call id); with the
    workflow id it is the executor's (run_id, call_id), the same on every replay and
    retry. When approval is needed and ``gate`` is given, waits for the gate's answer
    (past ``approval_timeout``: denied, reason "timeout"); without a gate the executor's
    own port decides. Model-visible refusals come back as ``ToolResult.error``; the other
    kinds raise ``ActivityError`` whose ``cause.type`` is the kind (``error_kind``),
    never retried whatever ``retry_policy`` says, except ``ledger`` and
    ``effect-in-flight``: another call holds the effect key right now, and ``retry_policy``
    paces the attempts until it has finished. Each such attempt is asked under a new call
    id (``<call_id>#2``, ...; ``ToolResult.ledger_call_id`` names the one that answered),
    and the key still lets the effect happen once: the holder's commit makes the retry a
    ``duplicate-effect``, its ``ToolError`` (the key freed) lets the retry run.
    """
    options: dict[str, Any] = {
        "start_to_close_timeout": start_to_close_timeout,
        "retry_policy": retry_policy,
    }
    prepared = await workflow.execute_activity(
        PREPARE,
        PrepareInput(tool=tool, args=args, call_id=call_id),
        result_type=Prepared,
        **options,
    )
    decision = None
    if prepared.error is None and prepared.needs_approval and gate is not None:
        decision = await gate.decide(prepared, approval_timeout=approval_timeout)
    result: ToolResult = await workflow.execute_activity(
        RUN,
        RunInput(tool=tool, args=args, call_id=call_id, decision=decision),
        result_type=ToolResult,
        **options,
    )
    return result
