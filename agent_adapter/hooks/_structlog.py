"""A hook that logs every ledger event through structlog.

It never calls ``structlog.configure()``: the host application owns logging
configuration; this hook only emits.
"""

from __future__ import annotations

from typing import Any

import msgspec
import structlog

__all__ = ["StructlogHook"]


class StructlogHook:
    """Logs each event as ``event=<tag>`` with its fields (``seq``, ids, tool, payload).

    ``logger`` defaults to ``structlog.get_logger("agent_adapter")``; ``level`` is the
    method used (``"info"``, ``"debug"``, ...). Outcome events of refused or failed calls
    are logged at ``warning``.
    """

    name = "structlog"

    _WARN = frozenset(
        {
            "call.failed",
            "call.timed_out",
            "call.blocked",
            "call.denied",
            "call.limited",
            "call.duplicate",
            "call.ambiguous",
            "hook.failed",
        }
    )

    def __init__(self, logger: Any = None, *, level: str = "info") -> None:
        self._logger = logger if logger is not None else structlog.get_logger("agent_adapter")
        self._level = level

    def on_event(self, event: Any) -> None:
        fields = msgspec.structs.asdict(event)
        fields.pop("prev", None)
        fields.pop("hash", None)
        if not fields.get("malformed"):  # set only on a damaged record read back
            fields.pop("malformed", None)
        tag = event.type
        method = "warning" if tag in self._WARN else self._level
        getattr(self._logger, method)(tag, **fields)
