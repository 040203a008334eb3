"""The error tree: one root, each error with a stable ``kind``.

The ``kind`` strings are permanent: bridges map them to what the model sees, and the
ledger records them. Which errors the model sees and which are raised to the host is
decided by kind (DESIGN.md, "Errors"), never by a catch-all.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AdapterError",
    "AdapterWarning",
    "AmbiguousEffect",
    "ApprovalDenied",
    "ApprovalPending",
    "DuplicateEffect",
    "EffectInFlight",
    "GuardrailBlocked",
    "IntegrationError",
    "LedgerError",
    "MODEL_VISIBLE_KINDS",
    "RunLimitExceeded",
    "ToolArgsInvalid",
    "ToolError",
    "ToolFailed",
    "ToolTimeout",
    "ToolUsageError",
    "UnannotatedToolWarning",
    "error_from_kind",
]


class AdapterError(Exception):
    """Root of every error agent-adapter raises; ``kind`` names its category."""

    kind: ClassVar[str] = "adapter-error"
    #: (run_id, call_id) of the call whose recorded outcome this error is; None for an
    #: error raised directly (by a tool body, a guard, a port).
    recorded_by: tuple[str, str] | None = None

    def __init__(self, message: str = "") -> None:
        # Always text (ToolError(None) or ToolError(402) is recorded, never a TypeError
        # from __str__ that would leave the call without an outcome).
        if type(message) is not str:
            message = (
                ""
                if message is None
                else str.__str__(message)
                if isinstance(message, str)
                else repr(message)
            )
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, str]:
        """The model-visible shape: ``{"kind": ..., "message": ...}``."""
        return {"kind": self.kind, "message": self.message}


class ToolArgsInvalid(AdapterError):
    """The arguments are not valid for the tool (bad JSON, wrong types, missing or extra fields)."""

    kind = "tool-args-invalid"


class ToolError(AdapterError):
    """Raised by a tool on purpose: the tool says it did nothing, and the model may see why."""

    kind = "tool-error"


class ApprovalDenied(AdapterError):
    """A reviewer, a rule or the absence of any approver refused the call."""

    kind = "approval-denied"


class GuardrailBlocked(AdapterError):
    """A guard (input or output) or a ``before_tool`` hook stopped the call."""

    kind = "guardrail-blocked"


class RunLimitExceeded(AdapterError):
    """The run has used its call budget (``RunLimits``)."""

    kind = "run-limit-exceeded"


class ApprovalPending(AdapterError):
    """A deferred approval has not been answered yet; ask again once it is."""

    kind = "approval-pending"

    def __init__(self, message: str = "", *, request_id: str = "") -> None:
        super().__init__(message or f"approval {request_id} is pending")
        self.request_id = request_id


class ToolTimeout(AdapterError):
    """The tool body did not finish within its ``timeout``."""

    kind = "tool-timeout"


class ToolFailed(AdapterError):
    """The tool body raised an unexpected exception (chained as ``__cause__``)."""

    kind = "tool-failed"


class DuplicateEffect(AdapterError):
    """The call's effect key is already committed by another call; the tool did not run."""

    kind = "duplicate-effect"

    def __init__(
        self,
        message: str = "",
        *,
        key: str = "",
        run_id: str = "",
        call_id: str = "",
        same_args: bool = False,
    ) -> None:
        super().__init__(message)
        self.key = key
        self.run_id = run_id
        self.call_id = call_id
        self.same_args = same_args


class AmbiguousEffect(AdapterError):
    """The call's effect key was claimed by a call with no known outcome; it may have happened.

    Only ``Executor.resolve_effect`` frees or commits such a key.
    """

    kind = "ambiguous-effect"

    def __init__(self, message: str = "", *, key: str = "") -> None:
        super().__init__(message)
        self.key = key


class EffectInFlight(AmbiguousEffect):
    """The call's effect key is held by a live call (its holder's lease is live): the
    tool did not run; retry as a new call once that call has finished (this refusal is
    this call id's outcome: a repeat of the id replays it). Never resolve such a key: its
    body may be running now.

    A kind of ``AmbiguousEffect`` (the key's outcome is not known yet), so code that
    catches that keeps refusing to run the effect twice; ``holder``, ``pid``, ``host``
    and ``lease_until`` name the live holder.
    """

    kind = "effect-in-flight"

    def __init__(
        self,
        message: str = "",
        *,
        key: str = "",
        holder: str = "",
        pid: int = 0,
        host: str = "",
        lease_until: float = 0.0,
    ) -> None:
        super().__init__(message, key=key)
        self.holder = holder
        self.pid = pid
        self.host = host
        self.lease_until = lease_until


class ToolUsageError(AdapterError):
    """A programming error: an unknown tool, a duplicate name, a misused API."""

    kind = "tool-usage"


class IntegrationError(AdapterError):
    """A setup error in a bridge: an unsupported framework version, a missing extra."""

    kind = "integration"


class LedgerError(AdapterError):
    """A ledger file cannot be used: not a ledger, corrupt, newer schema, locked."""

    kind = "ledger"


class AdapterWarning(UserWarning):
    """Root of the warnings agent-adapter gives (``warnings.filterwarnings`` on this)."""


class UnannotatedToolWarning(AdapterWarning):
    """A tool was registered with parameters that have no type annotation: any JSON value
    is accepted for them, unvalidated."""


#: Kinds a bridge shows to the model as a tool output; every other kind is raised.
MODEL_VISIBLE_KINDS: frozenset[str] = frozenset(
    {
        ToolArgsInvalid.kind,
        ToolError.kind,
        ApprovalDenied.kind,
        GuardrailBlocked.kind,
        RunLimitExceeded.kind,
        ApprovalPending.kind,
    }
)

_BY_KIND: dict[str, type[AdapterError]] = {
    cls.kind: cls
    for cls in (
        ToolArgsInvalid,
        ToolError,
        ApprovalDenied,
        GuardrailBlocked,
        RunLimitExceeded,
        ApprovalPending,
        ToolTimeout,
        ToolFailed,
        DuplicateEffect,
        AmbiguousEffect,
        EffectInFlight,
        ToolUsageError,
        IntegrationError,
        LedgerError,
    )
}


def error_from_kind(kind: str, message: str, **fields: Any) -> AdapterError:
    """Rebuild a recorded error (for replayed calls); unknown kinds become ``ToolFailed``."""
    cls = _BY_KIND.get(kind, ToolFailed)
    if cls is ApprovalPending:
        return ApprovalPending(message, request_id=str(fields.get("request_id", "")))
    return cls(message)
