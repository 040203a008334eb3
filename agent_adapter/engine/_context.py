"""Per-call objects: ``CallContext`` (ids in), ``Call`` (what checks see), ``Outcome``."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import msgspec

__all__ = ["Call", "CallContext", "Outcome", "current_call"]


class CallContext(msgspec.Struct, kw_only=True):
    """The ids a caller (usually a bridge) gives a call.

    ``approval`` is a ``Decision`` the caller already holds for exactly this call (a
    bridge's one-use token); when it names a ``digest``, it counts only for arguments
    with that digest. ``metadata`` is recorded with ``call.requested``.
    """

    run_id: str
    call_id: str
    approval: Any = None
    metadata: dict[str, Any] = {}


class Call(msgspec.Struct, frozen=True, kw_only=True):
    """A validated call, as confirm rules, guards and hooks see it.

    ``args`` are the validated arguments with defaults applied (after an approved edit,
    the edited ones); ``digest`` is theirs; ``effect_key`` is set from step 8 on.
    """

    tool: str
    spec: Any
    args: dict[str, Any]
    digest: str
    ctx: CallContext
    effect_key: str | None = None


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """What ``after_tool`` hooks see: ``kind`` is the outcome tag's last part."""

    kind: str
    value: Any = None
    error: BaseException | None = None


_current: ContextVar[Call | None] = ContextVar("agent_adapter_current_call", default=None)


def current_call() -> Call | None:
    """The running ``Call`` inside a tool body, guard or hook; None elsewhere."""
    return _current.get()
