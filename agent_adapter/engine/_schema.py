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

# Keywords beside a ``$ref`` that constrain nothing: the SDK inlines such a ``$ref`` (its
# target, then these on top), so ours does the same and both give the model one schema.
_REF_SIBLINGS = frozenset({"description", "title", "default"})

_NO_DEFAULT = object()


def _nullable(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_nullable(s) for s in schema.get("anyOf", ()) if isinstance(s, Mapping))


def _json_portable(value: Any) -> bool:
    """True when ``value`` survives JSON text unchanged (no NaN or infinity, which msgspec
    writes as null, and nothing that is not a JSON type)."""
    try:
        return bool(msgspec.json.decode(msgspec.json.encode(value)) == value)
    except (TypeError, ValueError, msgspec.EncodeError, msgspec.DecodeError):
        return False


class _Strict:
    """One strict conversion: the source root (to inline ``$ref``s) and which defaults the
    tool's validator fills in, so only omissions it fills become "required"."""

    def __init__(self, root: Mapping[str, Any], *, nested_defaults: bool) -> None:
        self.root = root
        self.nested_defaults = nested_defaults
        # (field name, its strict subschema): each default is checked once the whole
        # schema is strict, against that subschema (its $refs need the finished $defs).
        self.defaulted: list[tuple[str, dict[str, Any]]] = []

    def _target(self, ref: Any) -> dict[str, Any]:
        defs = self.root.get("$defs")
        if not (isinstance(ref, str) and ref.startswith("#/$defs/") and isinstance(defs, dict)):
            raise ValueError(f"a $ref other than to #/$defs ({ref!r})")
        target = defs.get(ref[len("#/$defs/") :])
        if not isinstance(target, dict) or "$ref" in target:
            raise ValueError(f"the $ref {ref!r} does not name a definition")
        return target

    def node(self, node: Any, *, top: bool = False) -> dict[str, Any]:
        """The strict form of one subschema; ValueError where it is not portable."""
        if not isinstance(node, dict):
            raise ValueError("a subschema is not an object")
        unknown = set(node) - _STRICT_KEYWORDS
        if unknown:
            raise ValueError(f"keywords {sorted(unknown)} are not portable")
        if "$ref" in node and len(node) > 1:
            if set(node) - {"$ref"} - _REF_SIBLINGS:
                raise ValueError("a $ref beside keywords that constrain")
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            return self.node({**self._target(node["$ref"]), **siblings}, top=top)
        if not _TYPED_KEYWORDS & node.keys():
            # An untyped subschema (``Any``: ``{}``) accepts anything; strict mode cannot.
            raise ValueError("a subschema without a type is not portable")
        # A null default says nothing the nullable type does not (the SDK drops it too); a
        # real one stays, as the SDK's @function_tool keeps it: it tells the model the value.
        out = {k: v for k, v in node.items() if k != "default" or v is not None}
        is_object = node.get("type") == "object" or "properties" in node
        if is_object:
            props = node.get("properties")
            if not props:
                raise ValueError("an open object (no properties) would accept only {}")
            extra = node.get("additionalProperties", False)
            if extra is not False:
                raise ValueError("additionalProperties other than false")
            required = set(node.get("required", ()))
            optional = [name for name in props if name not in required]
            for name in optional:
                self._check_optional(name, props[name], top=top)
            out["type"] = "object"
            out["properties"] = {name: self.node(sub) for name, sub in props.items()}
            out["required"] = list(props)
            out["additionalProperties"] = False
            self.defaulted.extend(
                (name, out["properties"][name])
                for name in optional
                if props[name].get("default") is not None
            )
        if "items" in node:
            if node["items"] is False or not isinstance(node["items"], dict):
                raise ValueError("tuple-like arrays are not portable")
            out["items"] = self.node(node["items"])
        if "anyOf" in node:
            out["anyOf"] = [self.node(s) for s in node["anyOf"]]
        if "$defs" in node:
            out["$defs"] = {k: self.node(v) for k, v in node["$defs"].items()}
        return out

    def _check_optional(self, name: str, sub: Any, *, top: bool) -> None:
        # Strict mode makes every field required: the model always sends a value. That is
        # faithful only if some value it can send gives the tool what omitting the field
        # gives it, i.e. the validator fills a default and the model can send that default.
        default = sub.get("default", _NO_DEFAULT) if isinstance(sub, Mapping) else _NO_DEFAULT
        if default is _NO_DEFAULT:
            raise ValueError(f"optional field {name!r} has no default the model could send")
        if default is None:
            if not _nullable(sub):
                raise ValueError(f"optional field {name!r} defaults to null but refuses null")
            return
        if not (top or self.nested_defaults):
            # A schema tool's validator fills top-level defaults only: nested, the tool
            # would get the default sent where it got the field left out.
            raise ValueError(f"nested optional field {name!r}: no validator fills its default")
        if not _json_portable(default):
            raise ValueError(f"optional field {name!r} has a default JSON cannot carry")

    def check_defaults(self, strict: dict[str, Any]) -> None:
        """ValueError unless each kept default is a value the strict schema lets the model send."""
        if not self.defaulted:
            return
        import jsonschema

        defs = strict.get("$defs")
        for name, sub in self.defaulted:
            schema = {**sub, "$defs": defs} if defs else sub
            try:
                valid = jsonschema.Draft202012Validator(schema).is_valid(sub["default"])
            except Exception as exc:  # a schema jsonschema cannot check is not portable
                raise ValueError(f"cannot check the default of {name!r}: {exc}") from exc
            if not valid:
                raise ValueError(f"the default of {name!r} is not a value its schema accepts")


def to_strict_schema(
    schema: Mapping[str, Any], *, nested_defaults: bool = False
) -> dict[str, Any] | None:
    """The OpenAI strict form of ``schema``, or None when it cannot be made strict faithfully.

    As the SDK's own ``@function_tool`` does, every property becomes required, a non-null
    default stays in the property (``"default": false``) and a null one is dropped; the
    tool's validation is not changed, so a call that omits the field still gets the default.
    That is faithful only when the validator fills the default in: top-level defaults
    always (both kinds of ``ToolSpec`` do), nested ones (Structs, dataclasses) only with
    ``nested_defaults=True``. Never narrows silently: an open object, a map, a tuple, an
    unsupported keyword, an optional field without a default, or a default the model could
    not send (one the field's own schema refuses, NaN or infinity, null for a non-nullable
    field) makes the schema not portable (None).
    """
    if schema.get("type") != "object" or "anyOf" in schema:
        return None
    source = copy.deepcopy(dict(schema))
    conversion = _Strict(source, nested_defaults=nested_defaults)
    try:
        strict = conversion.node(source, top=True)
        conversion.check_defaults(strict)
    except (ValueError, TypeError, AttributeError):
        return None
    return strict


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
