"""The engine: specs and registry, digest, the executor pipeline, approval ports."""

from ._approval import (
    ApprovalPort,
    ApprovalRequest,
    CallbackApproval,
    Decision,
    DeferredApproval,
    PendingApproval,
    effect_notice,
)
from ._context import Call, CallContext, Outcome, current_call
from ._digest import canonical, digest
from ._executor import Executor, get_default_executor
from ._limits import RunLimits
from ._options import register_target
from ._prepare import Prepared
from ._replaying import recorded_error
from ._run import new_id
from ._schema import to_strict_schema
from ._spec import MAX_ARGS_BYTES, MAX_ARGS_DEPTH, Registry, ToolSpec, json_problem, nests_deeper
from ._state import Projection
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
    "Prepared",
    "Projection",
    "Registry",
    "RunLimits",
    "TokenTable",
    "ToolSpec",
    "canonical",
    "current_call",
    "digest",
    "effect_notice",
    "get_default_executor",
    "json_problem",
    "nests_deeper",
    "new_id",
    "recorded_error",
    "register_target",
    "to_strict_schema",
]
