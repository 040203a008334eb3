"""The documented import path of the MCP gateway; see ``agent_adapter.bridges.mcp``."""

from ..bridges.mcp import *  # noqa: F403 (the bridge's __all__ is the one list of names)
from ..bridges.mcp import __all__ as __all__
