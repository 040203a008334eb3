"""The documented import path of OpenAI agents inside Temporal workflows; see
``agent_adapter.bridges.temporal.openai_agents``."""

from ..bridges.temporal.openai_agents import *  # noqa: F403 (the module's __all__ is the one list)
from ..bridges.temporal.openai_agents import __all__ as __all__
