"""What the model sees (a ToolMessage) and what the host gets (our own exception)."""

from __future__ import annotations

from typing import Any

import msgspec
from langchain_core.messages import ToolMessage

from ...errors import MODEL_VISIBLE_KINDS, AdapterError

__all__ = ["error_message", "model_visible", "value_message"]

_encode = msgspec.json.Encoder().encode


def model_visible(error: BaseException) -> bool:
    """True for the refusals the model is told about (DESIGN.md, "Errors")."""
    return isinstance(error, AdapterError) and error.kind in MODEL_VISIBLE_KINDS


def error_message(error: AdapterError, *, tool: str, tool_call_id: str) -> ToolMessage:
    """A model-visible refusal: ``status="error"``, content ``{"error": {"kind", "message"}}``.

    ``status="error"`` is LangGraph's own mark of a failed call (what ToolNode writes for
    its own errors), so middleware and hosts that look for it see the refusal as one.
    """
    return ToolMessage(
        content=_encode({"error": error.to_dict()}).decode(),
        name=tool,
        tool_call_id=tool_call_id,
        status="error",
    )


def value_message(value: Any, *, tool: str, tool_call_id: str) -> ToolMessage:
    """The tool's value as the model sees it: a str as is, anything else as JSON.

    LangChain would ``str()`` a dict (a Python repr, not JSON), so the bridge encodes it.
    """
    content = value if isinstance(value, str) else _encode(value).decode()
    return ToolMessage(content=content, name=tool, tool_call_id=tool_call_id)
