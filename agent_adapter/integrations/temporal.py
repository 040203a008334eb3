"""The documented import path of the Temporal bridge; see ``agent_adapter.bridges.temporal``."""

from ..bridges.temporal import (
    APPROVE_SIGNAL,
    APPROVE_UPDATE,
    NAME,
    PENDING_QUERY,
    PREPARE,
    RUN,
    ApprovalGate,
    Prepared,
    PrepareInput,
    RunInput,
    ToolActivities,
    ToolResult,
    call_tool,
    error_data,
    error_kind,
)

__all__ = [
    "APPROVE_SIGNAL",
    "APPROVE_UPDATE",
    "ApprovalGate",
    "NAME",
    "PENDING_QUERY",
    "PREPARE",
    "PrepareInput",
    "Prepared",
    "RUN",
    "RunInput",
    "ToolActivities",
    "ToolResult",
    "call_tool",
    "error_data",
    "error_kind",
]
