"""Hooks: the protocol and the built-in hooks (structlog logging)."""

from ._protocol import Hook
from ._structlog import StructlogHook

__all__ = ["Hook", "StructlogHook"]
