"""The supported SDK range, checked at export (the extra pins ``openai-agents>=0.24,<1.0``)."""

from __future__ import annotations

import re

import agents
from agents import tool as _sdk_tool

from ...errors import IntegrationError

__all__ = ["SUPPORTED", "check_sdk", "sdk_version"]

#: The range the ``openai-agents`` extra installs and CI runs: 0.24 up to, not including, 1.0.
SUPPORTED = ((0, 24), (1, 0))

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?(.*)$")


def sdk_version() -> str:
    """The installed SDK's version string, read when a tool is exported."""
    return str(getattr(agents, "__version__", ""))


def _parse(version: str) -> tuple[int, int, int, bool] | None:
    match = _VERSION.match(version)
    if match is None:
        return None
    major, minor, patch, rest = match.groups()
    # Any suffix other than a local or post release is a pre-release ("1.0.0rc1" < 1.0).
    pre = bool(rest) and not rest.startswith(("+", ".post", "-post"))
    return int(major), int(minor), int(patch or 0), pre


def check_sdk() -> None:
    """Raise IntegrationError unless the SDK is in range and has the hooks the bridge needs.

    The bridge depends on SDK internals that change between minor versions (the per-state
    scope id, failure-formatter control); outside the tested range it refuses to export
    rather than build tools that might swallow refusals.
    """
    version = sdk_version()
    parsed = _parse(version)
    if parsed is None:
        raise IntegrationError(f"cannot read the openai-agents version ({version!r})")
    major, minor, patch, pre = parsed
    low, high = SUPPORTED
    # PEP 440: a pre-release of 0.24.0 is below 0.24, and "<1.0" excludes 1.0's pre-releases.
    in_range = low <= (major, minor) < high and not (pre and (major, minor, patch) == (*low, 0))
    if not in_range:
        raise IntegrationError(
            f"openai-agents {version} is not supported: agent-adapter's bridge needs "
            f">={low[0]}.{low[1]},<{high[0]}.{high[1]} (pip install 'agent-adapter[openai-agents]')"
        )
    if not hasattr(_sdk_tool, "set_function_tool_failure_error_function"):
        raise IntegrationError(
            f"openai-agents {version} has no set_function_tool_failure_error_function: "
            "without it the SDK would turn refusals and cancellation into tool output"
        )
