"""The agent tests' registry, imported by the worker and (passed through) by the workflow.

Built outside the workflow: registering a tool builds its schema with msgspec, whose lazy
imports the workflow sandbox refuses after the workflow has loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

from temporal_app import build_registry

from agent_adapter import Registry


def shop_registry(effects: Path) -> Registry:
    """The Temporal tests' registry (refund, pay, charge, hidden) plus ``note``, whose
    parameter has a default: its strict schema imports jsonschema (to check the default),
    which the workflow sandbox refuses unless the import is passed through."""
    registry = build_registry(effects)

    @registry.tool
    async def note(text: str, urgent: bool = False) -> str:
        """Write a note for the shop."""
        return f"noted{' (urgent)' if urgent else ''}: {text}"

    return registry


#: What the workflow builds its tools from (schemas only: no body runs in a workflow).
SCHEMAS = shop_registry(Path(os.devnull))
