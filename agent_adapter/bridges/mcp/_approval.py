"""Asking the person through the client: the form, its answer as a ``Decision``, the state.

The gateway asks only for valid arguments whose confirm rule requires approval, and only
when the client declared elicitation. The answer becomes a ``Decision`` bound to the
digest of the arguments it was asked about; the executor records it (source "context").
"""

from __future__ import annotations

import uuid
from typing import Any

import mcp_types as types
import msgspec

from ...engine import Decision, Prepared
from ._names import APPROVAL_SCHEMA, NAME

__all__ = [
    "CallState",
    "answer_decision",
    "can_elicit",
    "form_message",
    "read_state",
]

_encode = msgspec.json.Encoder(order="sorted").encode
#: The form message shows the arguments; a huge argument must not make it unreadable.
_MESSAGE_ARGS_CHARS = 2000


class CallState(msgspec.Struct, frozen=True, kw_only=True):
    """What the gateway puts in a 2026-07-28 ``requestState`` (sealed by the SDK's boundary).

    ``call_id`` travels in the state, so the retry is the same call (a replayed state meets
    the executor's step 0, never a second run); ``nonce`` makes each state single-use.
    """

    call_id: str
    run_id: str
    digest: str
    nonce: str

    @classmethod
    def new(cls, call_id: str, run_id: str, digest: str) -> CallState:
        """A fresh state for one call awaiting the person's answer."""
        return cls(call_id=call_id, run_id=run_id, digest=digest, nonce=uuid.uuid4().hex)

    def dump(self) -> str:
        """The plaintext the boundary seals."""
        return msgspec.json.encode(self).decode()


def read_state(plain: str) -> CallState | None:
    """The state the gateway minted (the boundary already checked its seal), else None."""
    try:
        return msgspec.json.decode(plain, type=CallState)
    except msgspec.DecodeError:
        return None


def can_elicit(session: Any) -> bool:
    """True when the client declared form elicitation (servers must not send other modes)."""
    caps = getattr(session, "client_capabilities", None)
    elicitation = getattr(caps, "elicitation", None)
    if elicitation is None:
        return False
    # A bare ``elicitation: {}`` means form mode (the spec's backward-compatible reading).
    form = getattr(elicitation, "form", None)
    url = getattr(elicitation, "url", None)
    return form is not None or url is None


def form_message(prepared: Prepared) -> str:
    """What the person reads: the tool and its validated arguments, redacted values hidden;
    then, when the call's effect key is not free, why approving cannot make it run (only
    told, as a port's reviewer is: the executor's effect check decides)."""
    shown = _encode(prepared.shown_args).decode()
    if len(shown) > _MESSAGE_ARGS_CHARS:
        shown = shown[:_MESSAGE_ARGS_CHARS] + f"... ({len(shown)} characters)"
    message = f"Approve {prepared.tool} with {shown}?"
    notice = prepared.effect_notice
    return f"{message} (Note: {notice}.)" if notice else message


def answer_decision(answer: Any, digest: str, reviewer: str) -> Decision:
    """The ``Decision`` an elicitation answer stands for, bound to ``digest``.

    Only an accept whose content matches the form and says ``approve: true`` approves;
    decline, cancel, a refusing accept or an answer that does not match the form deny.
    """
    try:
        result = answer if isinstance(answer, types.ElicitResult) else _as_result(answer)
    except ValueError as exc:
        return Decision(approved=False, reviewer=reviewer, reason=str(exc), digest=digest)
    if result.action != "accept":
        verb = {"decline": "declined", "cancel": "cancelled"}.get(result.action, result.action)
        return Decision(
            approved=False, reviewer=reviewer, reason=f"elicitation {verb}", digest=digest
        )
    content = result.content
    problem = _form_problem(content)
    if problem is not None:
        return Decision(
            approved=False,
            reviewer=reviewer,
            reason=f"the elicitation answer does not match the form: {problem}",
            digest=digest,
        )
    assert content is not None
    reason = content.get("reason")
    approved = content["approve"] is True
    return Decision(
        approved=approved,
        reviewer=reviewer,
        reason=reason if isinstance(reason, str) else ("" if approved else "not approved"),
        digest=digest,
    )


def _as_result(answer: Any) -> types.ElicitResult:
    if isinstance(answer, dict):
        try:
            return types.ElicitResult.model_validate(answer)
        except Exception as exc:
            raise ValueError(
                f"the elicitation answer is not an elicitation result: {exc}"
            ) from None
    raise ValueError(
        f"the elicitation answer is not an elicitation result ({type(answer).__name__})"
    )


def _form_problem(content: Any) -> str | None:
    # Exactly APPROVAL_SCHEMA: an object, "approve" a boolean, "reason" (optional) text.
    if not isinstance(content, dict):
        return "no content"
    if type(content.get("approve")) is not bool:
        return "'approve' must be true or false"
    if "reason" in content and not isinstance(content["reason"], str):
        return "'reason' must be text"
    extra = set(content) - set(APPROVAL_SCHEMA["properties"])
    if extra:
        return f"unexpected fields {sorted(extra)}"
    return None


#: Metadata recorded with every call the gateway makes (``call.requested``).
METADATA: dict[str, Any] = {"integration": NAME}
