"""The operator's policy for proxied tools: per upstream tool, what the gateway enforces.

The policy is the only trusted source: an upstream's annotations may add an approval
requirement, never remove one, and nothing the upstream says frees an effect key unless
the policy declares ``not_executed_on_error``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Any

import msgspec

from ...errors import ToolUsageError

__all__ = ["ToolPolicy", "load_policy", "parse_policy"]


class ToolPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the gateway enforces for one upstream tool (None: not set by the operator).

    ``confirm`` True or False overrides the upstream's annotations (only the operator may
    relax an approval); ``effect`` is an effect-key template over the tool's arguments;
    ``cache`` a TTL in seconds; ``timeout`` bounds the upstream's answer (seconds);
    ``not_executed_on_error`` says the upstream's ``isError`` results, timeouts and broken
    connections prove the tool did nothing (the effect key is freed); ``readonly`` adds
    ``readOnlyHint`` to the tool's listing (otherwise listed as the upstream listed it;
    a hint to clients, it grants nothing).
    """

    confirm: bool | None = None
    effect: str | None = None
    cache: float | None = None
    timeout: float | None = None
    not_executed_on_error: bool = False
    readonly: bool = False


def parse_policy(
    policy: Mapping[str, Any] | None, *, source: str = "policy"
) -> dict[str, ToolPolicy]:
    """``{upstream tool name: ToolPolicy}`` from ToolPolicy values or plain mappings.

    Raises ToolUsageError naming the tool and the field for an unknown field or a wrong
    type (``source`` names where the policy came from, e.g. its file).
    """
    if policy is None:
        return {}
    if not isinstance(policy, Mapping):
        raise ToolUsageError(
            f"{source}: expected a mapping of tool names, not {type(policy).__name__}"
        )
    parsed: dict[str, ToolPolicy] = {}
    for tool, entry in policy.items():
        if isinstance(entry, ToolPolicy):
            parsed[str(tool)] = entry
            continue
        try:
            parsed[str(tool)] = msgspec.convert(entry, ToolPolicy, strict=False)
        except msgspec.ValidationError as exc:
            raise ToolUsageError(f"{source}: tool {tool!r}: {exc}") from None
    return parsed


def load_policy(path: str | os.PathLike[str]) -> dict[str, ToolPolicy]:
    """Read a TOML policy file: one ``[tools."NAME"]`` table per upstream tool.

    ```toml
    [tools.delete_document]
    confirm = true
    effect = "delete:{doc_id}"
    timeout = 10
    not_executed_on_error = true
    ```

    Raises ToolUsageError (one line, naming the file) for a file that cannot be read, is
    not TOML, has keys other than ``tools``, or a tool table with an unknown field.
    """
    where = os.fspath(path)
    try:
        with open(where, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ToolUsageError(f"policy file {where}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ToolUsageError(f"policy file {where}: not valid TOML: {exc}") from None
    extra = set(data) - {"tools"}
    if extra:
        raise ToolUsageError(
            f"policy file {where}: unknown top-level keys {sorted(extra)}; "
            'put each tool under [tools."NAME"]'
        )
    tools = data.get("tools", {})
    if not isinstance(tools, dict):
        raise ToolUsageError(f'policy file {where}: "tools" must be a table of tool tables')
    return parse_policy(tools, source=f"policy file {where}")
