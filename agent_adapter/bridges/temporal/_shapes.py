"""What crosses Temporal's history: activity inputs and results, names. Stdlib only.

These are plain frozen dataclasses (Temporal's default converter encodes them as JSON),
imported both by the activities (on the worker) and by the workflow side (inside the
sandbox), so this module imports nothing but the standard library. No ``from __future__
import annotations``: the converter reads the field types with ``get_type_hints``, which
must not depend on the namespace the sandbox evaluates them in.
"""

from dataclasses import dataclass
from typing import Any

__all__ = [
    "APPROVE_SIGNAL",
    "APPROVE_UPDATE",
    "NAME",
    "PENDING_QUERY",
    "PREPARE",
    "RUN",
    "PrepareInput",
    "Prepared",
    "RunInput",
    "ToolResult",
]

#: The bridge's name in ``Registry.tool(targets=...)`` and in ``call.requested`` metadata.
NAME = "temporal"
#: Activity names (``ToolActivities.activities``).
PREPARE = "agent_adapter.prepare"
RUN = "agent_adapter.run"
#: Handler names ``ApprovalGate`` registers on its workflow.
APPROVE_UPDATE = "agent_adapter.approve"
APPROVE_SIGNAL = "agent_adapter.approve_signal"
PENDING_QUERY = "agent_adapter.pending"


@dataclass(frozen=True)
class PrepareInput:
    """The ``prepare`` activity's input: which tool, the model's arguments, the call id."""

    tool: str
    args: Any
    call_id: str


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` found: the digest of the validated arguments and whether the call
    needs approval, or ``error`` (``{"kind", "message"}``) for arguments that do not
    validate. ``args`` are the validated arguments with redacted values replaced: what a
    reviewer may be shown."""

    tool: str
    call_id: str
    digest: str = ""
    needs_approval: bool = False
    args: Any = None
    error: dict[str, str] | None = None


@dataclass(frozen=True)
class RunInput:
    """The ``run`` activity's input; ``decision`` holds ``Decision``'s fields, or None
    (the executor's own port decides)."""

    tool: str
    args: Any
    call_id: str
    decision: dict[str, Any] | None = None


@dataclass(frozen=True)
class ToolResult:
    """One tool call's result as the workflow sees it: the tool's JSON ``value``, or
    ``error`` (``{"kind", "message"}``) for a model-visible refusal; ``ok`` is
    ``error is None``. ``ledger_call_id`` is the call id the ledger recorded the answer
    under: the workflow's call id, or ``<call_id>#<n>`` when earlier attempts were
    refused because the effect key was in flight."""

    value: Any = None
    error: dict[str, Any] | None = None
    ledger_call_id: str = ""

    @property
    def ok(self) -> bool:
        """True when the tool ran (or was answered from the ledger) and returned ``value``."""
        return self.error is None
