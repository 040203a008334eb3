"""Redaction: argument values that never reach the ledger (the digest still covers them).

A spec's ``redact`` names paths into the arguments: ``"card"`` (a whole argument) or
``"card.number"`` (a field inside it, at any depth). Inside a list a path applies to every
element, so ``"cards.number"`` redacts the number of each card. What is redacted is
written ``"[redacted]"`` wherever arguments are recorded (``call.requested``, a pending
approval); error messages have those values scrubbed out (``_run._scrub``); a reviewer's
edits that leave a ``"[redacted]"`` in place keep the value the call was requested with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import msgspec
import msgspec.inspect

__all__ = ["REDACTED", "check_paths", "overridden", "redacted", "restored", "roots", "values_at"]

REDACTED = "[redacted]"

_ARRAYS = (list, tuple)


def _split(paths: Iterable[str]) -> list[list[str]]:
    return [path.split(".") for path in paths]


def _plain(value: Any) -> Any:
    # Validated arguments hold nested Structs (and callers may pass dataclasses): a path
    # goes through them as through the objects they encode to.
    if isinstance(value, msgspec.Struct) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        return msgspec.to_builtins(value)
    return value


def check_paths(paths: Iterable[str], args_type: Any = None, schema: Any = None) -> str | None:
    """Why one of ``paths`` cannot name a value of the arguments, or None.

    A path is ``name`` or ``name.field...``; each part after the first must be a field
    (by its encoded name) that the argument's type (a signature's Struct) or JSON schema
    can hold: a misspelt path would silently redact nothing.
    """
    for path in paths:
        if not isinstance(path, str) or not all(path.split(".")):
            return f"{path!r} is not an argument name or a dotted path like 'card.number'"
        parts = path.split(".")
        if len(parts) == 1:
            continue
        if args_type is not None:
            ok = _type_has(msgspec.inspect.type_info(args_type), parts)
        elif schema is not None:
            ok = _schema_has(schema, parts, schema.get("$defs", {}))
        else:
            ok = True
        if not ok:
            return f"{path!r} names no field of the argument {parts[0]!r}"
    return None


_ITEMS = (
    msgspec.inspect.ListType,
    msgspec.inspect.SetType,
    msgspec.inspect.FrozenSetType,
    msgspec.inspect.VarTupleType,
)
_OBJECTS = (
    msgspec.inspect.StructType,
    msgspec.inspect.DataclassType,
    msgspec.inspect.TypedDictType,
)


def _type_has(info: Any, parts: list[str]) -> bool:
    if not parts or isinstance(info, msgspec.inspect.AnyType):
        return True
    if isinstance(info, msgspec.inspect.UnionType):
        return any(_type_has(t, parts) for t in info.types)
    if isinstance(info, _ITEMS):
        return _type_has(info.item_type, parts)
    if isinstance(info, msgspec.inspect.TupleType):
        return any(_type_has(t, parts) for t in info.item_types)
    if isinstance(info, msgspec.inspect.DictType):
        return _type_has(info.value_type, parts[1:])
    if isinstance(info, _OBJECTS):
        for field in info.fields:
            if getattr(field, "encode_name", field.name) == parts[0]:
                return _type_has(field.type, parts[1:])
        return False
    return False


def _schema_has(node: Any, parts: list[str], defs: dict[str, Any]) -> bool:
    if not parts:
        return True
    if not isinstance(node, dict):
        return node is True
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _schema_has(defs.get(ref[len("#/$defs/") :]), parts, defs)
    for key in ("anyOf", "oneOf", "allOf"):
        if any(_schema_has(sub, parts, defs) for sub in node.get(key, ())):
            return True
    if "items" in node:
        return _schema_has(node["items"], parts, defs)
    properties = node.get("properties")
    if isinstance(properties, dict) and parts[0] in properties:
        return _schema_has(properties[parts[0]], parts[1:], defs)
    extra = node.get("additionalProperties", True if not properties else False)
    if extra is not False and ("type" not in node or node.get("type") == "object"):
        return _schema_has(extra, parts[1:], defs) if isinstance(extra, dict) else True
    return False


def roots(paths: Iterable[str]) -> frozenset[str]:
    """The arguments the paths start at (``"card.number"`` -> ``"card"``)."""
    return frozenset(path.split(".", 1)[0] for path in paths)


def redacted(args: Any, paths: frozenset[str]) -> Any:
    """``args`` with the values at ``paths`` replaced, for anything that reaches the ledger.

    Copies only what it changes; ``args`` itself is never modified.
    """
    if not paths or not isinstance(args, dict):
        return args
    out: Any = args
    for parts in _split(paths):
        out = _replace(out, parts)
    return out


def _replace(value: Any, parts: list[str]) -> Any:
    value = _plain(value)
    if isinstance(value, _ARRAYS):
        return [_replace(item, parts) for item in value]
    if not isinstance(value, dict) or parts[0] not in value:
        return value
    head, rest = parts[0], parts[1:]
    out = dict(value)
    out[head] = REDACTED if not rest else _replace(value[head], rest)
    return out


def values_at(args: Any, paths: frozenset[str]) -> list[Any]:
    """Every value a path reaches in ``args`` (one per list element on the way)."""
    found: list[Any] = []
    for parts in _split(paths):
        _collect(args, parts, found)
    return found


def _fields(value: Any) -> Any:
    # Like _plain, but the field values as they are (bytes, datetimes): the forms an error
    # message quotes (repr, str) are those of the objects, not of their JSON.
    if isinstance(value, msgspec.Struct):
        return {f.encode_name: getattr(value, f.name) for f in msgspec.structs.fields(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return value


def _collect(value: Any, parts: list[str], found: list[Any]) -> None:
    value = _fields(value)
    if isinstance(value, _ARRAYS):
        for item in value:
            _collect(item, parts, found)
        return
    if not isinstance(value, dict) or parts[0] not in value:
        return
    if len(parts) == 1:
        found.append(value[parts[0]])
    else:
        _collect(value[parts[0]], parts[1:], found)


def restored(edits: Any, original: Any, paths: frozenset[str]) -> Any:
    """A reviewer's ``edits`` with each ``"[redacted]"`` left at a path put back as it was.

    The reviewer saw the placeholder, never the value; where the edit still holds it,
    the call keeps the value it was requested with (matched by key, and by position
    inside lists of the same length). A placeholder with nothing to restore stays, and
    validation refuses it if it does not fit.
    """
    if not paths or not isinstance(edits, dict):
        return edits
    out: Any = edits
    for parts in _split(paths):
        out = _restore(out, original, parts)
    return out


def _restore(edit: Any, original: Any, parts: list[str]) -> Any:
    original = _plain(original)
    if isinstance(edit, _ARRAYS):
        if not isinstance(original, _ARRAYS) or len(original) != len(edit):
            return edit
        return [_restore(e, o, parts) for e, o in zip(edit, original, strict=True)]
    if not isinstance(edit, dict) or not isinstance(original, dict):
        return edit
    head, rest = parts[0], parts[1:]
    if head not in edit or head not in original:
        return edit
    out = dict(edit)
    if not rest:
        if edit[head] == REDACTED:
            out[head] = original[head]
        return out
    out[head] = _restore(edit[head], original[head], rest)
    return out


def overridden(shown: Any, edits: Any, at: str = "") -> list[str]:
    """Where ``edits`` put a value over a ``"[redacted]"`` of ``shown`` (the recorded args).

    Such an edit would write that value to the ledger in clear, where the request only
    ever held the placeholder.
    """
    if shown == REDACTED:
        return [] if edits == REDACTED else [at or "$"]
    if isinstance(shown, dict) and isinstance(edits, dict):
        return [
            hit
            for key in shown.keys() & edits.keys()
            for hit in overridden(shown[key], edits[key], f"{at}.{key}" if at else str(key))
        ]
    if isinstance(shown, _ARRAYS) and isinstance(edits, _ARRAYS):
        if len(shown) == len(edits):
            return [
                hit
                for i, (s, e) in enumerate(zip(shown, edits, strict=True))
                for hit in overridden(s, e, f"{at}[{i}]")
            ]
        # Other lengths: no element can be matched to the one the reviewer saw.
        return [at or "$"] if _holds_placeholder(shown) else []
    return []


def _holds_placeholder(value: Any) -> bool:
    if value == REDACTED:
        return True
    if isinstance(value, dict):
        return any(_holds_placeholder(v) for v in value.values())
    if isinstance(value, _ARRAYS):
        return any(_holds_placeholder(v) for v in value)
    return False
