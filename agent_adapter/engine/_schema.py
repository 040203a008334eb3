"""Tools' JSON Schemas: from a function's signature, and their OpenAI strict form.

A tool's parameters become a msgspec Struct (``_signature_struct``), whose JSON Schema is
the tool's (``_lift_schema``); its return annotation is kept when msgspec can rebuild it
from JSON (``_result_type``). ``to_strict_schema`` converts a schema to the strict subset
the OpenAI API accepts, or says it cannot without changing what the tool accepts.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from typing import Any, get_type_hints

import msgspec

from ..errors import ToolUsageError

__all__ = ["to_strict_schema"]


# -- strict (OpenAI) schema -------------------------------------------------------------

_STRICT_KEYWORDS = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "enum", "const",
        "anyOf", "$ref", "$defs", "description", "title", "pattern", "format", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems",
        "maxItems", "default",
    }
)  # fmt: skip


_TYPED_KEYWORDS = frozenset({"type", "anyOf", "$ref", "enum", "const"})


def _nullable(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_nullable(s) for s in schema.get("anyOf", ()) if isinstance(s, Mapping))


def _strict_node(node: Any) -> Any:
    """Return the strict form of one subschema, or raise ValueError where not portable."""
    if not isinstance(node, dict):
        raise ValueError("a subschema is not an object")
    unknown = set(node) - _STRICT_KEYWORDS
    if unknown:
        raise ValueError(f"keywords {sorted(unknown)} are not portable")
    if not _TYPED_KEYWORDS & node.keys():
        # An untyped subschema (``Any``: ``{}``) accepts anything; strict mode cannot.
        raise ValueError("a subschema without a type is not portable")
    out = {k: v for k, v in node.items() if k != "default"}
    if "default" in node and node["default"] is not None:
        raise ValueError("a non-null default cannot be expressed")
    is_object = node.get("type") == "object" or "properties" in node
    if is_object:
        props = node.get("properties")
        if not props:
            raise ValueError("an open object (no properties) would accept only {}")
        extra = node.get("additionalProperties", False)
        if extra is not False:
            raise ValueError("additionalProperties other than false")
        required = set(node.get("required", ()))
        for name, sub in props.items():
            if name not in required:
                # Strict mode requires every field; an optional one stays faithful only if
                # it accepts null and null is its default (the model sends null for "absent").
                if not (
                    isinstance(sub, Mapping) and sub.get("default", ...) is None and _nullable(sub)
                ):
                    raise ValueError(f"optional field {name!r} has a non-null default")
        out["type"] = "object"
        out["properties"] = {name: _strict_node(sub) for name, sub in props.items()}
        out["required"] = list(props)
        out["additionalProperties"] = False
    if "items" in node:
        if node["items"] is False or not isinstance(node["items"], dict):
            raise ValueError("tuple-like arrays are not portable")
        out["items"] = _strict_node(node["items"])
    if "anyOf" in node:
        out["anyOf"] = [_strict_node(s) for s in node["anyOf"]]
    if "$defs" in node:
        out["$defs"] = {k: _strict_node(v) for k, v in node["$defs"].items()}
    return out


def to_strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """The OpenAI strict form of ``schema``, or None when it cannot be made strict faithfully.

    Never narrows silently: an open object, an optional field with a real default, a
    map, a tuple or an unsupported keyword makes the schema not portable (None).
    """
    if schema.get("type") != "object" or "anyOf" in schema:
        return None
    try:
        return _strict_node(copy.deepcopy(dict(schema)))  # type: ignore[no-any-return]
    except (ValueError, TypeError, AttributeError):
        return None


def _has_untyped(tp: Any) -> bool:
    return tp is Any or "Any" in repr(tp) or tp in (dict, list, object)


def _result_type(fn: Callable[..., Any]) -> Any:
    """``fn``'s return annotation if msgspec can convert JSON into it, else None."""
    try:
        annotation = get_type_hints(fn, include_extras=True).get("return")
    except Exception:  # an annotation that does not resolve: results stay JSON
        return None
    if annotation is None or annotation is Any or annotation is object:
        return None
    if annotation is type(None):
        return None
    try:
        msgspec.json.Decoder(annotation)
    except (TypeError, ValueError):
        return None
    return annotation


def _signature_struct(fn: Callable[..., Any], name: str) -> tuple[type[msgspec.Struct], bool]:
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ToolUsageError(f"cannot read the type hints of tool {name}: {exc}") from exc
    fields: list[tuple[Any, ...]] = []
    untyped = False
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolUsageError(
                f"tool {name}: parameter {param.name!r} must be a plain named parameter"
            )
        tp = hints.get(param.name, Any)
        untyped = untyped or _has_untyped(tp)
        if param.default is inspect.Parameter.empty:
            fields.append((param.name, tp))
        else:
            fields.append((param.name, tp, param.default))
    struct = msgspec.defstruct(f"{name}_args", fields, kw_only=True, forbid_unknown_fields=True)
    return struct, untyped


def _lift_schema(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """msgspec returns a root ``$ref``; lift the tool's own object to the root."""
    try:
        schema = msgspec.json.schema(struct)
    except (TypeError, ValueError) as exc:
        raise ToolUsageError(f"cannot build a JSON schema for {struct.__name__}: {exc}") from exc
    defs = dict(schema.get("$defs", {}))
    root = dict(defs.pop(struct.__name__))
    root.pop("title", None)
    if defs:
        root["$defs"] = defs
    return root
