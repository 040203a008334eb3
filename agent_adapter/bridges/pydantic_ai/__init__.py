"""The pydantic-ai bridge: registry tools as a toolset, approvals as deferred tool calls.

Every exported tool runs through the executor (validation, hooks, guards, limits,
approval, cache, effects, ledger). The bridge decides nothing: it maps pydantic-ai's ids,
deferred approvals and tool failures onto ``Executor.run_spec``. Import it as
``agent_adapter.integrations.pydantic_ai`` (the documented path) or from here; importing
it registers the target name ``"pydantic_ai"``.
"""

from ._arguments import RAW_ARGS
from ._deferred import Review
from ._errors import error_output
from ._integration import META_KEY, NAME, SUPPORTED, check_framework
from ._toolset import ExecutorToolset

__all__ = [
    "ExecutorToolset",
    "META_KEY",
    "NAME",
    "RAW_ARGS",
    "Review",
    "SUPPORTED",
    "check_framework",
    "error_output",
]
