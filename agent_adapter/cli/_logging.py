"""structlog for the command line: configured here, in the host, never in the library."""

from __future__ import annotations

import logging
import sys
from typing import Any

from ._render import Style

__all__ = ["configure_logging", "log_hooks"]


def configure_logging(log_format: str | None, log_level: str | None) -> bool:
    """Configure structlog for this process; True when logging is on.

    Off unless ``--log-format`` or ``--log-level`` is given, so that command output stays
    readable. Logs go to stderr (stdout carries the command's output).
    """
    import structlog

    enabled = (log_format is not None or log_level is not None) and log_level != "off"
    # Off is CRITICAL only (structlog's filtering loggers know no higher level); nothing
    # in agent-adapter logs at CRITICAL.
    name = (log_level or "info").upper() if enabled else "CRITICAL"
    level = logging.getLevelNamesMapping()[name]
    if log_format == "json":
        renderer: Any = structlog.processors.JSONRenderer()
    else:
        colors = Style.for_stream(sys.stderr).enabled
        renderer = structlog.dev.ConsoleRenderer(colors=colors)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    return enabled


def log_hooks(enabled: bool) -> list[Any]:
    """The executor hooks for the chosen logging: the structlog hook, or none."""
    if not enabled:
        return []
    from ..hooks import StructlogHook

    return [StructlogHook()]
