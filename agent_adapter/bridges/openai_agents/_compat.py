"""The supported SDK range, and every SDK name the bridge uses, checked when it is used.

Only ``import agents`` may fail at import (the extra is not installed: ImportError). Every
other name the bridge takes from the SDK is listed in ``REQUIRED`` and fetched with
:func:`sdk_name`: one that an SDK lacks (older or newer than the extra's range) becomes a
stand-in that raises IntegrationError naming it when it is used, and :func:`check_sdk`
raises that error at export, before any tool is built.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Any

import agents

from ...errors import IntegrationError

__all__ = ["REQUIRED", "STATE_FIELDS", "SUPPORTED", "check_sdk", "sdk_name", "sdk_version"]

#: The range the ``openai-agents`` extra admits: 0.22 up to, not including, 1.0. ``make test``
#: runs the bridge's tests on the newest release (the main environment) and on 0.22.x (the
#: second environment, where Temporal's plugin, which pins 0.22.x, is installed).
SUPPORTED = ((0, 22), (1, 0))

# What differs across the range, for the names below (0.22.3 against 0.24.0, read in both):
# - every name in REQUIRED exists in both, with the signatures the bridge calls;
# - ``ensure_strict_json_schema`` closes objects merged from ``allOf`` and decodes
#   percent-escaped ``$ref`` fragments only from 0.24: ``tool_schema`` keeps a schema
#   strict only where the SDK leaves it unchanged, so on 0.22 such a schema is sent
#   non-strict, as it is, never narrowed;
# - both refuse a tool call id reused within one run for another call
#   (``ModelBehaviorError``); across runs only the executor (and, in a workflow,
#   ``workflow_tools``) sees a reuse;
# - ``FunctionTool`` gains MCP-only private fields in 0.24 that the bridge never sets.

#: Every (module, attribute) the bridge takes from the SDK; nothing else is imported from it.
REQUIRED: tuple[tuple[str, str], ...] = (
    ("agents", "FunctionTool"),
    ("agents", "RunState"),
    ("agents", "Runner"),
    ("agents", "get_current_trace"),
    ("agents.agent_tool_state", "get_agent_tool_state_scope"),
    ("agents.agent_tool_state", "peek_agent_tool_run_result"),
    ("agents.exceptions", "UserError"),
    ("agents.items", "ToolApprovalItem"),
    ("agents.strict_schema", "ensure_strict_json_schema"),
    ("agents.tool", "set_function_tool_failure_error_function"),
    ("agents.tool_context", "ToolContext"),
)

#: The ``RunState`` fields (private dataclass fields in the SDK) the bridge reads: its run
#: context (where a decision is recorded: ``approve_tool``), the paused step (its pending
#: items), the processed response (agent-as-tool runs nested in it) and the per-state
#: scope id. ``resolve_interruptions`` decides on the context directly because
#: ``RunState.approve`` deep-copies every pending item per call (quadratic in N).
STATE_FIELDS = (
    "_agent_tool_state_scope_id",
    "_context",
    "_current_step",
    "_last_processed_response",
)

_VERSION = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?(.*)$")
_ABSENT = object()


def sdk_version() -> str:
    """The installed SDK's version string, read when a tool is exported."""
    return str(getattr(agents, "__version__", ""))


def _wanted() -> str:
    low, high = SUPPORTED
    return (
        f"agent-adapter's bridge needs openai-agents >={low[0]}.{low[1]},<{high[0]}.{high[1]} "
        "(pip install 'agent-adapter[openai-agents]')"
    )


def _missing(names: list[str]) -> IntegrationError:
    return IntegrationError(f"openai-agents {sdk_version()} has no {', '.join(names)}: {_wanted()}")


def _lookup(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):  # a module or a name this SDK does not have
        return _ABSENT


class _Absent(type):
    """The type of a stand-in: calling it, reading from it or subscripting it raises."""

    _where: str

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise _missing([cls._where])

    def __getattr__(cls, attribute: str) -> Any:
        raise _missing([cls._where])

    def __getitem__(cls, item: Any) -> Any:
        raise _missing([cls._where])


def sdk_name(module: str, name: str) -> Any:
    """``module.name`` from the SDK, or a stand-in raising IntegrationError when used.

    The stand-in is an exception class, so ``isinstance`` and ``except`` with it simply
    never match; calling it or reading an attribute of it raises, naming ``module.name``
    and the supported range. Only names in ``REQUIRED`` may be asked for, so that
    :func:`check_sdk` checks every one of them.
    """
    if (module, name) not in REQUIRED:
        raise RuntimeError(f"agent-adapter bug: {module}.{name} is not in REQUIRED")
    found = _lookup(module, name)
    if found is not _ABSENT:
        return found
    return _Absent(name, (Exception,), {"_where": f"{module}.{name}", "__module__": __name__})


def _parse(version: str) -> tuple[int, int, int, bool] | None:
    match = _VERSION.match(version)
    if match is None:
        return None
    major, minor, patch, rest = match.groups()
    # Any suffix other than a local or post release is a pre-release ("1.0.0rc1" < 1.0).
    pre = bool(rest) and not rest.startswith(("+", ".post", "-post"))
    return int(major), int(minor), int(patch or 0), pre


def _absent_state_fields() -> list[str]:
    """The ``STATE_FIELDS`` this SDK's ``RunState`` lacks, as ``agents.RunState.<field>``."""
    state = _lookup("agents", "RunState")
    if state is _ABSENT:  # named by REQUIRED already
        return []
    try:
        names = {field.name for field in dataclasses.fields(state)}
    except TypeError:  # no longer a dataclass: none of them can be relied on
        names = set()
    return [f"agents.RunState.{name}" for name in STATE_FIELDS if name not in names]


def check_sdk() -> None:
    """Raise IntegrationError unless the SDK is in range and has every name the bridge uses.

    The bridge depends on SDK internals that change between minor versions (the per-state
    scope id, failure-formatter control); outside the tested range, or without one of
    them, it refuses to export rather than build tools that might swallow refusals.
    The names are looked up again on every call, so the answer is the SDK's as it is now.
    """
    version = sdk_version()
    parsed = _parse(version)
    if parsed is None:
        raise IntegrationError(f"cannot read the openai-agents version ({version!r}): {_wanted()}")
    major, minor, patch, pre = parsed
    low, high = SUPPORTED
    # PEP 440: a pre-release of 0.22.0 is below 0.22, and "<1.0" excludes 1.0's pre-releases.
    in_range = low <= (major, minor) < high and not (pre and (major, minor, patch) == (*low, 0))
    if not in_range:
        raise IntegrationError(f"openai-agents {version} is not supported: {_wanted()}")
    absent = [f"{m}.{n}" for m, n in REQUIRED if _lookup(m, n) is _ABSENT]
    absent += _absent_state_fields()
    if absent:
        # Without set_function_tool_failure_error_function, for one, the SDK would turn
        # refusals and cancellation into "please try again" tool output.
        raise _missing(absent)
