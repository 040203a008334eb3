"""The engine: specs and registry, digest, the executor pipeline, approval ports."""

from ._approval import (
    ApprovalPort,
    ApprovalRequest,
    CallbackApproval,
    Decision,
    DeferredApproval,
    PendingApproval,
)
from ._context import Call, CallContext, Outcome, current_call
from ._digest import canonical, digest
from ._executor import Executor, get_default_executor
from ._limits import RunLimits
from ._schema import to_strict_schema
from ._spec import MAX_ARGS_BYTES, MAX_ARGS_DEPTH, Registry, ToolSpec
from ._tokens import TokenTable

__all__ = [
    "ApprovalPort",
    "ApprovalRequest",
    "Call",
    "CallContext",
    "CallbackApproval",
    "Decision",
    "DeferredApproval",
    "Executor",
    "MAX_ARGS_BYTES",
    "MAX_ARGS_DEPTH",
    "Outcome",
    "PendingApproval",
    "Registry",
    "RunLimits",
    "TokenTable",
    "ToolSpec",
    "canonical",
    "current_call",
    "digest",
    "get_default_executor",
    "to_strict_schema",
]
