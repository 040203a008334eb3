"""The hook protocol: any object with some of ``before_tool``, ``after_tool``, ``on_event``."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Hook"]


class Hook(Protocol):
    """A hook implements any subset of these (sync or async).

    ``before_tool(call)`` may raise to stop the call (``call.blocked``);
    ``after_tool(call, outcome)`` and ``on_event(event)`` only observe: if they raise,
    the executor records ``hook.failed`` and the call's outcome stands.
    """

    def before_tool(self, call: Any) -> Any: ...

    def after_tool(self, call: Any, outcome: Any) -> Any: ...

    def on_event(self, event: Any) -> Any: ...
