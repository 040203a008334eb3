"""agent-adapter: an asyncio, event-sourced executor for AI agents' tool calls.

Every call runs through one pipeline (validation, hooks, guards, limits, approval,
cache, effects, timeout, outcome) and every step is a hash-chained ledger event.
"""

from .engine import (
    ApprovalPort,
    ApprovalRequest,
    Call,
    CallbackApproval,
    CallContext,
    Decision,
    DeferredApproval,
    Executor,
    Outcome,
    Registry,
    RunLimits,
    ToolSpec,
    current_call,
    digest,
    get_default_executor,
)

__all__ = [
    "ApprovalPort",
    "ApprovalRequest",
    "Call",
    "CallContext",
    "CallbackApproval",
    "Decision",
    "DeferredApproval",
    "Executor",
    "Outcome",
    "Registry",
    "RunLimits",
    "ToolSpec",
    "current_call",
    "digest",
    "get_default_executor",
]

__version__ = "0.1.0"
