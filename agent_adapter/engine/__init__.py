"""The engine: specs and registry, digest, the executor pipeline, approval ports."""

from ._approval import (
    ApprovalRequest,
    CallbackApproval,
    Decision,
    DeferredApproval,
    PendingApproval,
    ask_port,
    effect_notice,
)
from ._context import Call, CallContext, Outcome, current_call
from ._digest import canonical, digest
from ._exchanges import ExchangeRecorder, exchange_recorder, record_exchange
from ._executor import Executor, get_default_executor
from ._extensions import (
    AfterTool,
    AppendsNow,
    ApprovalPort,
    AroundBody,
    BeforeTool,
    CatchUp,
    Followable,
    Guard,
    Hook,
    Keyed,
    OnEvent,
    Opens,
    OutputGuard,
    RecordReader,
    Store,
)
from ._holders import host_identity
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
    "AfterTool",
    "AppendsNow",
    "ApprovalPort",
    "ApprovalRequest",
    "AroundBody",
    "BeforeTool",
    "Call",
    "CallContext",
    "CallbackApproval",
    "CatchUp",
    "Decision",
    "DeferredApproval",
    "ExchangeRecorder",
    "Executor",
    "Followable",
    "Guard",
    "Hook",
    "Keyed",
    "MAX_ARGS_BYTES",
    "MAX_ARGS_DEPTH",
    "OnEvent",
    "Opens",
    "Outcome",
    "OutputGuard",
    "PendingApproval",
    "Prepared",
    "Projection",
    "RecordReader",
    "Registry",
    "RunLimits",
    "Store",
    "TokenTable",
    "ToolSpec",
    "ask_port",
    "canonical",
    "current_call",
    "digest",
    "effect_notice",
    "exchange_recorder",
    "get_default_executor",
    "host_identity",
    "json_problem",
    "nests_deeper",
    "new_id",
    "record_exchange",
    "recorded_error",
    "register_target",
    "to_strict_schema",
]
