"""Which registry each of the agent driver's task queues serves.

Its own module, imported by the ``KitAgent`` workflow through the sandbox's pass-through:
the sandbox re-imports the workflow's module for every run, so a dict there would be a
new, empty one; this module is the worker process's one copy.
"""

from __future__ import annotations

from ..engine import Registry

__all__ = ["KIT_REGISTRIES"]

#: task queue -> the executor's registry; set by the driver before the workflow starts.
KIT_REGISTRIES: dict[str, Registry] = {}
