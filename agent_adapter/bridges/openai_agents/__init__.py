"""The OpenAI Agents SDK bridge: registry tools as ``FunctionTool``, approvals as tokens.

Every exported tool runs through the executor (validation, hooks, guards, limits,
approval, cache, effects, ledger). The bridge decides nothing: it maps the SDK's ids,
approval interruptions and errors onto ``Executor.run_spec``. Import it as
``agent_adapter.integrations.openai_agents`` (the documented path) or from here.
"""

from ._approvals import Review, resolve_interruptions, review_interruptions
from ._compat import SUPPORTED, check_sdk, sdk_version
from ._errors import encode_output, unwrap
from ._integration import INTEGRATION, NAME, OpenAIAgentsIntegration
from ._run import run, run_sync
from ._tools import function_tool, function_tools, tool_schema

__all__ = [
    "INTEGRATION",
    "NAME",
    "OpenAIAgentsIntegration",
    "Review",
    "SUPPORTED",
    "check_sdk",
    "encode_output",
    "function_tool",
    "function_tools",
    "resolve_interruptions",
    "review_interruptions",
    "run",
    "run_sync",
    "sdk_version",
    "tool_schema",
    "unwrap",
]
