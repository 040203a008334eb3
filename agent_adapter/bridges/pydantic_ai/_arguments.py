"""The arguments validator the toolset gives pydantic-ai: it validates nothing.

pydantic-ai validates a tool call's arguments before the toolset sees the call, and a
failure there (malformed JSON included) never reaches ``call_tool``: with
``max_retries=0`` it ends the run with ``UnexpectedModelBehavior`` and the ledger shows
no call. The executor is the one validator, so this one only decodes: a JSON object
passes as a dict; anything else (malformed JSON, a JSON array or string) is passed on as
the model's raw text under :data:`RAW_ARGS`, for ``run_spec`` to record as
``call.invalid``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ...engine import MAX_ARGS_BYTES

__all__ = ["RAW_ARGS", "Decoded", "PassThrough", "model_args"]

#: The key under which unparseable arguments travel from the validator to ``call_tool``
#: (a NUL-prefixed name no JSON schema property of a registry tool can have).
RAW_ARGS = "\x00agent_adapter.raw_args"

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


class Decoded(dict[str, Any]):
    """A JSON object this validator decoded: JSON values only, unless a hook put others.

    ``call_tool`` hands it to the executor as JSON again (``model_args``): re-encoding a
    small object costs less than the executor's walk over a dict, and encoding what the
    dict holds *now* keeps any change a pydantic-ai hook made to it.
    """

    __slots__ = ()


class PassThrough:
    """pydantic-ai's ``SchemaValidatorProt`` that decodes JSON and checks nothing."""

    def validate_json(self, input: str | bytes | bytearray, **_: Any) -> Any:
        """A JSON object as a dict; anything else as its raw text under ``RAW_ARGS``."""
        if len(input) > MAX_ARGS_BYTES:
            return {RAW_ARGS: _text(input)}  # too large: the executor refuses it, unread
        try:
            value = _decode(input)
        except (msgspec.DecodeError, RecursionError, ValueError):
            return {RAW_ARGS: _text(input)}
        return Decoded(value) if isinstance(value, dict) else {RAW_ARGS: _text(input)}

    def validate_python(self, input: Any, **_: Any) -> Any:
        """A dict (a model's parsed arguments, or ``override_args``) as is."""
        return input if isinstance(input, dict) else {RAW_ARGS: input}


def _text(input: str | bytes | bytearray) -> str:
    return input if isinstance(input, str) else bytes(input).decode("utf-8", "replace")


def model_args(tool_args: dict[str, Any]) -> Any:
    """What ``run_spec`` gets: JSON for a decoded object, the model's raw text when it did
    not decode, any other dict (``override_args``, a hook's own) as it is."""
    if type(tool_args) is Decoded:
        try:
            return _encode(tool_args)
        except (TypeError, msgspec.EncodeError):
            return dict(tool_args)  # a hook put a non-JSON value in: validated as a dict
    if RAW_ARGS in tool_args:
        raw = tool_args[RAW_ARGS]
        if isinstance(raw, str):
            return raw
        try:
            return msgspec.json.encode(raw).decode()  # JSON, but not an object: refused
        except (TypeError, msgspec.EncodeError):
            return repr(raw)  # not JSON at all: refused as such

    return tool_args
