"""The documented import path of the Temporal bridge; see ``agent_adapter.bridges.temporal``."""

from ..bridges.temporal import *  # noqa: F403 (the bridge's __all__ is the one list of names)
from ..bridges.temporal import __all__ as __all__
