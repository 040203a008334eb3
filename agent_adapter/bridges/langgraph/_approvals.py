"""Approval through LangGraph's own ``interrupt()`` and ``Command(resume=...)``.

A call that needs approval interrupts its task with what the reviewer must see; the
resume value is the reviewer's answer, bound to the digest shown. The answer becomes a
``Decision`` carried in ``CallContext.approval``; the executor decides and records as for
any carried decision. ``review_interrupts`` asks an approval port about each paused call
(a deferred port leaves it open) and builds the resume map.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.types import Command, Interrupt

from ...engine import ApprovalPort, ApprovalRequest, Decision, Prepared, ask_port, new_id
from ...errors import ToolUsageError
from ._ids import NAME

__all__ = ["INTERRUPT_TYPE", "Review", "decision_for", "interrupt_value", "review_interrupts"]

logger = logging.getLogger("agent_adapter.bridges.langgraph")

#: ``interrupt(value)["type"]`` of the bridge's approval interrupts (others are the host's).
INTERRUPT_TYPE = "agent_adapter.approval"


def interrupt_value(tool: str, prepared: Prepared, run_id: str, call_id: str) -> dict[str, Any]:
    """What the reviewer is shown: redacted arguments, the digest an answer must carry.

    It is stored in the checkpointer with the thread (the arguments redacted as the
    ledger redacts them).
    """
    return {
        "type": INTERRUPT_TYPE,
        "tool": tool,
        "args": prepared.shown_args,
        "digest": prepared.digest,
        "run_id": run_id,
        "call_id": call_id,
        "json_schema": prepared.json_schema,
        "effect_notice": prepared.effect_notice,
        "description": prepared.spec.description,
    }


def _denial(prepared: Prepared, reviewer: str, reason: str) -> Decision:
    # Bound to the digest shown, so the executor records it as this call's denial.
    return Decision(approved=False, reviewer=reviewer, reason=reason, digest=prepared.digest)


def decision_for(answer: Any, prepared: Prepared, call_id: str) -> Decision:
    """The resume value as a ``Decision`` for the call shown; anything else denies.

    An answer is ``{"approved": bool, "reviewer": str, "reason": str, "edits": dict | None,
    "digest": str, "call_id": str, "tool": str}`` (``review_interrupts`` builds it; by hand,
    copy ``digest``, ``call_id`` and ``tool`` from the interrupt's value). Fail closed: a
    value that is not such an answer, an answer for another call or tool (LangGraph matches
    resume values to a task's interrupts by their position, so an answer can reach the
    wrong call), for another digest (other arguments than those shown), ``approved`` other
    than ``True`` or an edit the tool's schema refuses is a denial, recorded with the reason.
    """
    if not isinstance(answer, Mapping):
        reason = f"the resume value is not an approval answer ({type(answer).__name__})"
        return _denial(prepared, "", reason)
    given_reviewer, given_reason = answer.get("reviewer"), answer.get("reason")
    reviewer = given_reviewer if isinstance(given_reviewer, str) else ""
    reason = given_reason if isinstance(given_reason, str) else ""
    for_call, for_tool = answer.get("call_id"), answer.get("tool")
    if for_call != call_id or for_tool != prepared.tool:
        return _denial(
            prepared,
            reviewer,
            f"the answer was given for call {for_call!r} of tool {for_tool!r}, not for call "
            f"{call_id!r} of {prepared.tool!r}",
        )
    shown = answer.get("digest")
    if shown != prepared.digest:
        return _denial(
            prepared,
            reviewer,
            f"the answer was given for other arguments (digest {shown!r}, not the "
            f"{prepared.digest!r} of this call)",
        )
    if answer.get("approved") is not True:
        return _denial(prepared, reviewer, reason)
    edits = answer.get("edits")
    if edits is None:
        return Decision(approved=True, reviewer=reviewer, reason=reason, digest=prepared.digest)
    problem = prepared.check_edit(edits)
    if problem is not None:
        return _denial(prepared, reviewer, f"the reviewer's edit is invalid: {problem}")
    return Decision(
        approved=True, reviewer=reviewer, reason=reason, edits=dict(edits), digest=prepared.digest
    )


def answer_of(decision: Decision, digest: str, call_id: str, tool: str) -> dict[str, Any]:
    """A port's decision as the resume value the tool reads: bound to ``digest`` and to the
    call and tool it was asked about."""
    return {
        "approved": decision.approved,
        "reviewer": decision.reviewer,
        "reason": decision.reason,
        "edits": decision.edits,
        "digest": digest,
        "call_id": call_id,
        "tool": tool,
    }


@dataclass(frozen=True)
class Review:
    """What one pass of ``review_interrupts`` decided, and what it left open.

    ``resume`` maps interrupt ids to answers: ``graph.ainvoke(Command(resume=review.resume),
    config)`` (or ``review.command``) resumes the decided calls. ``pending`` holds the
    request ids a deferred port still holds, in interrupt order: wait for them
    (``await deferred.wait(request_id)``), then review the thread's interrupts again.
    """

    resume: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: tuple[str, ...] = ()

    @property
    def command(self) -> Command[Any]:
        """``Command(resume=self.resume)``."""
        return Command(resume=dict(self.resume))


def _interrupts_of(interrupts: Any) -> list[Interrupt]:
    """Interrupts from a list, an ``ainvoke`` result (``"__interrupt__"``) or a snapshot."""
    if isinstance(interrupts, Mapping):
        interrupts = interrupts.get("__interrupt__", ())
    elif hasattr(interrupts, "interrupts"):  # a StateSnapshot (a tuple: test it first)
        interrupts = interrupts.interrupts
    return [i for i in interrupts if isinstance(i, Interrupt)]


def _ours(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == INTERRUPT_TYPE


async def review_interrupts(
    interrupts: Any, port: ApprovalPort, *, run_id: str | None = None
) -> Review:
    """Ask ``port`` about each approval interrupt of the bridge; return a ``Review``.

    ``interrupts``: a list of ``Interrupt``, an ``ainvoke`` result (its ``"__interrupt__"``)
    or a ``StateSnapshot`` (its ``interrupts``). Interrupts that are not the bridge's are
    left alone (neither in ``resume`` nor in ``pending``). The port sees the redacted
    arguments, the digest, the ids (``run_id`` = the thread id) and
    ``metadata={"integration": "langgraph"}``; a port that raises denies. With
    ``run_id``, an interrupt of another thread is a ToolUsageError (a review for one
    thread must not answer another's), raised before the port is asked anything.
    """
    ours = [i for i in _interrupts_of(interrupts) if _ours(i.value)]
    if run_id is not None:
        for item in ours:
            if item.value.get("run_id") != run_id:
                raise ToolUsageError(
                    f"interrupt {item.id} is for run {item.value.get('run_id')!r}, not "
                    f"{run_id!r}: review each thread's interrupts on their own"
                )
    resume: dict[str, dict[str, Any]] = {}
    pending: list[str] = []
    for item in ours:
        value = item.value
        schema = value.get("json_schema")
        request = ApprovalRequest(
            request_id=new_id("approval"),
            run_id=str(value.get("run_id") or ""),
            call_id=str(value.get("call_id") or ""),
            tool=str(value.get("tool") or ""),
            args=dict(value.get("args") or {}),
            digest=str(value.get("digest") or ""),
            metadata={"integration": NAME},
            json_schema=schema if isinstance(schema, dict) else None,
            description=str(value.get("description") or ""),
        )
        decision, held = await ask_port(port, request)
        if decision is None:
            pending.append(held)
            continue
        resume[item.id] = answer_of(decision, request.digest, request.call_id, request.tool)
    return Review(resume=resume, pending=tuple(pending))
