"""Run limits: how many calls one run (``run_id``) may make."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from ..errors import ToolUsageError

__all__ = ["RunLimits"]


class RunLimits(msgspec.Struct, frozen=True, kw_only=True):
    """``max_calls`` for the whole run; ``max_calls_per_tool`` an int or ``{tool: n}``.

    A call counts once it passes the limit check, whatever happens to it afterwards.
    """

    max_calls: int | None = None
    max_calls_per_tool: int | Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        # msgspec does not check a Struct's field types when it is built in Python: a
        # wrong one would first fail (or compare as something else) inside a call.
        _check_count("max_calls", self.max_calls)
        per_tool = self.max_calls_per_tool
        if isinstance(per_tool, Mapping):
            for tool, limit in per_tool.items():
                if not isinstance(tool, str):
                    raise ToolUsageError(
                        f"RunLimits.max_calls_per_tool: tool names are text, not {tool!r}"
                    )
                _check_count(f"max_calls_per_tool[{tool!r}]", limit)
        else:
            _check_count("max_calls_per_tool", per_tool)

    def per_tool(self, tool: str) -> int | None:
        """The limit for ``tool`` (None: unlimited)."""
        limit = self.max_calls_per_tool
        if limit is None or isinstance(limit, int):
            return limit
        return limit.get(tool)


def _check_count(name: str, value: object) -> None:
    if value is None or (type(value) is int and value >= 0):
        return
    raise ToolUsageError(
        f"RunLimits.{name} must be a number of calls (an int, 0 or more) or None, not {value!r}"
    )
