"""The documented import path of the pydantic-ai bridge; see ``agent_adapter.bridges``."""

from ..bridges.pydantic_ai import *  # noqa: F403 (the bridge's __all__ is the one list of names)
from ..bridges.pydantic_ai import __all__ as __all__
