"""The hook protocol: the engine's (``agent_adapter.engine.Hook``), named here too.

A hook is any object with some of ``before_tool(call)``, ``after_tool(call, outcome)``,
``on_event(event)`` (sync or async) and ``around_body(call, next)``; the protocols live
beside the executor that composes them (``engine/_extensions.py``), so that the engine
never imports this package.
"""

from __future__ import annotations

from ..engine import AfterTool, AroundBody, BeforeTool, Hook, OnEvent

__all__ = ["AfterTool", "AroundBody", "BeforeTool", "Hook", "OnEvent"]
