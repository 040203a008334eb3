"""Errors across the SDK boundary: what the model sees, what the host gets, unwrap."""

from __future__ import annotations

from typing import Any

import msgspec

from ...errors import MODEL_VISIBLE_KINDS, AdapterError

__all__ = ["encode_output", "error_output", "model_visible", "unwrap"]

_encode = msgspec.json.Encoder().encode


def model_visible(error: BaseException) -> bool:
    """True for the refusals the model is told about (DESIGN.md, "Errors")."""
    return isinstance(error, AdapterError) and error.kind in MODEL_VISIBLE_KINDS


def error_output(error: AdapterError) -> str:
    """The tool output for a model-visible error: ``{"error": {"kind", "message"}}`` as JSON."""
    return _encode({"error": error.to_dict()}).decode()


def encode_output(value: Any) -> str:
    """A tool's value as the model sees it: a str as is, anything else as JSON.

    The SDK would ``str()`` a dict (a Python repr, not JSON), so the bridge encodes it.
    """
    if isinstance(value, str):
        return value
    return _encode(value).decode()


def unwrap(error: BaseException) -> BaseException:
    """Our exception out of the SDK's wrapping (``UserError("Error running tool ...")``).

    Walks ``__cause__`` (then ``__context__``) and returns the first ``AdapterError``;
    returns ``error`` itself when the chain holds none. Decides nothing.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, AdapterError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return error
