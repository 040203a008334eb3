"""The documented import path of the LangGraph bridge; see ``agent_adapter.bridges``."""

from ..bridges.langgraph import *  # noqa: F403 (the bridge's __all__ is the one list of names)
from ..bridges.langgraph import __all__ as __all__
