"""Run limits: how many calls one run (``run_id``) may make."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

__all__ = ["RunLimits"]


class RunLimits(msgspec.Struct, frozen=True, kw_only=True):
    """``max_calls`` for the whole run; ``max_calls_per_tool`` an int or ``{tool: n}``.

    A call counts once it passes the limit check, whatever happens to it afterwards.
    """

    max_calls: int | None = None
    max_calls_per_tool: int | Mapping[str, int] | None = None

    def per_tool(self, tool: str) -> int | None:
        """The limit for ``tool`` (None: unlimited)."""
        limit = self.max_calls_per_tool
        if limit is None or isinstance(limit, int):
            return limit
        return limit.get(tool)
