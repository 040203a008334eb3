"""The documented import path of the OpenAI Agents SDK bridge; see ``agent_adapter.bridges``."""

from ..bridges.openai_agents import *  # noqa: F403 (the bridge's __all__ is the one list of names)
from ..bridges.openai_agents import __all__ as __all__
