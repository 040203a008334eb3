"""Refusals across the pydantic-ai boundary: what the model sees, what the host gets.

The model-visible kinds become pydantic-ai's own tool failures, so its history records
them as failed (or denied) tool returns: ``ToolDenied`` for approval-denied, pydantic-ai's
``ToolFailed`` for the others. Neither spends the tool's retry budget. Returning the error
as text would be recorded by pydantic-ai as a success, and ``ModelRetry`` with the
toolset's ``max_retries=0`` ends the run (``UnexpectedModelBehavior``). Every other kind
is raised to the host as itself (pydantic-ai does not wrap a toolset's exceptions).
"""

from __future__ import annotations

from typing import Any

import msgspec
from pydantic_ai.exceptions import ToolFailed as FrameworkToolFailed
from pydantic_ai.tools import ToolDenied

from ...errors import MODEL_VISIBLE_KINDS, AdapterError

__all__ = ["error_output", "refusal"]

_encode = msgspec.json.Encoder().encode


def error_output(error: AdapterError) -> str:
    """The model's text for a refusal: ``{"error": {"kind", "message"}}`` as JSON."""
    return _encode({"error": error.to_dict()}).decode()


def refusal(error: AdapterError) -> Any:
    """What ``call_tool`` gives pydantic-ai for ``error``: a ToolDenied to return, else raises.

    Raises pydantic-ai's ``ToolFailed`` (chained to ``error``) for the other model-visible
    kinds, and ``error`` itself for the host's kinds.
    """
    kind = error.kind
    if kind not in MODEL_VISIBLE_KINDS:
        raise error
    if kind == "approval-denied":
        return ToolDenied(error_output(error))
    raise FrameworkToolFailed(error_output(error)) from error
