"""The LangGraph bridge: registry tools as LangChain tools, approvals as interrupts.

Every exported tool runs through the executor (validation, hooks, guards, limits,
approval, cache, effects, ledger). The bridge decides nothing: it maps LangGraph's ids
(thread, tool call), its ``interrupt()``/``Command(resume=...)`` pause and its messages
onto ``Executor.run_spec``. Import it as ``agent_adapter.integrations.langgraph`` (the
documented path) or from here.
"""

from ._approvals import INTERRUPT_TYPE, Review, review_interrupts
from ._ids import NAME
from ._invalid import InvalidToolCallsMiddleware, answer_invalid_tool_calls
from ._tools import ExecutorTool, langgraph_tools

__all__ = [
    "ExecutorTool",
    "INTERRUPT_TYPE",
    "InvalidToolCallsMiddleware",
    "NAME",
    "Review",
    "answer_invalid_tool_calls",
    "langgraph_tools",
    "review_interrupts",
]
