"""The Temporal bridge: tool calls as activities through the executor, approvals as
Updates and Signals.

Worker side: ``ToolActivities(executor).activities``. Workflow side (sandbox-safe):
``call_tool`` and ``ApprovalGate``; import them in workflow code inside
``workflow.unsafe.imports_passed_through()``. Import it as
``agent_adapter.integrations.temporal`` (the documented path) or from here.
"""

from ._activities import ToolActivities, error_data
from ._shapes import (
    APPROVE_SIGNAL,
    APPROVE_UPDATE,
    NAME,
    PENDING_QUERY,
    PREPARE,
    RUN,
    Prepared,
    PrepareInput,
    RunInput,
    ToolResult,
)
from ._workflow import ApprovalGate, call_tool, error_kind

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
