"""Per-call objects: ``CallContext`` (ids in), ``Call`` (what checks see), ``Outcome``."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

import msgspec

from ..errors import ToolUsageError
from ..ledger import recordable
from ..ledger import recordable_text as text

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

    def __post_init__(self) -> None:
        # The ids and metadata go into every event of the call: checked here, once, so
        # that no event can be refused by the ledger later (or, worse, be unreadable).
        # One expression for the common case (ASCII ids, no metadata): this runs per call.
        run_id, call_id, metadata = self.run_id, self.call_id, self.metadata
        if (
            type(run_id) is str
            and type(call_id) is str
            and run_id.isascii()
            and call_id.isascii()
            and type(metadata) is dict
            and not metadata
        ):
            return
        self.run_id = _id_text(run_id, "run_id")
        self.call_id = _id_text(call_id, "call_id")
        if not metadata:
            self.metadata = {}
        elif not isinstance(metadata, Mapping):
            raise ToolUsageError(
                f"CallContext.metadata must be a mapping, not {type(metadata).__name__}"
            )
        else:
            self.metadata = recordable({str(k): v for k, v in metadata.items()})


def _id_text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ToolUsageError(f"CallContext.{name} must be text, not {type(value).__name__}")
    return text(str(value))


class Call(msgspec.Struct, frozen=True, kw_only=True):
    """A validated call, as confirm rules, guards and hooks see it.

    ``args`` are the validated arguments with defaults applied (after an approved edit,
    the edited ones); ``digest`` is theirs; ``effect_key`` is the key the call will
    claim (rendered right after validation, and again after an edit).
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
