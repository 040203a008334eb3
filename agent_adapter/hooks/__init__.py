"""Hooks: the protocol and the built-in hooks (structlog logging, OpenTelemetry spans)."""

import typing

from ._protocol import Hook
from ._structlog import StructlogHook

if typing.TYPE_CHECKING:
    # Loaded lazily at run time (``__getattr__`` below): it needs the ``otel`` extra, and
    # the core imports without it. Imported here for type checkers.
    from ._otel import OpenTelemetryHook

__all__ = ["Hook", "OpenTelemetryHook", "StructlogHook"]


def __getattr__(name: str) -> object:
    if name == "OpenTelemetryHook":
        try:
            from ._otel import OpenTelemetryHook
        except ImportError as exc:
            from ..errors import IntegrationError

            raise IntegrationError(
                f"OpenTelemetryHook needs opentelemetry-api ({exc}); install it with: "
                "pip install 'agent-adapter[otel]'"
            ) from exc
        return OpenTelemetryHook
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
