"""The documented import path of the MCP gateway; see ``agent_adapter.bridges.mcp``."""

from ..bridges.mcp import (
    APPROVAL_SCHEMA,
    META_CALL_ID,
    META_KIND,
    META_RUN_ID,
    NAME,
    ToolPolicy,
    UpstreamError,
    drain,
    exported_tools,
    load_policy,
    mcp_server,
    parse_policy,
    proxy,
)

__all__ = [
    "APPROVAL_SCHEMA",
    "META_CALL_ID",
    "META_KIND",
    "META_RUN_ID",
    "NAME",
    "ToolPolicy",
    "UpstreamError",
    "drain",
    "exported_tools",
    "load_policy",
    "mcp_server",
    "parse_policy",
    "proxy",
]
