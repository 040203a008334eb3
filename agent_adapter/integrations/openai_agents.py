"""The documented import path of the OpenAI Agents SDK bridge; see ``agent_adapter.bridges``."""

from ..bridges.openai_agents import (
    INTEGRATION,
    SUPPORTED,
    OpenAIAgentsIntegration,
    Review,
    check_sdk,
    function_tool,
    function_tools,
    resolve_interruptions,
    review_interruptions,
    run,
    run_sync,
    sdk_version,
    unwrap,
)

__all__ = [
    "INTEGRATION",
    "OpenAIAgentsIntegration",
    "Review",
    "SUPPORTED",
    "check_sdk",
    "function_tool",
    "function_tools",
    "resolve_interruptions",
    "review_interruptions",
    "run",
    "run_sync",
    "sdk_version",
    "unwrap",
]
