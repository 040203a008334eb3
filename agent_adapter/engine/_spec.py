"""Tool specs and the registry: registration, argument limits, strict validation, effect keys."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import re
import string
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import accumulate, count
from operator import sub
from typing import Any, Literal, overload

import msgspec

from ..errors import ToolArgsInvalid, ToolUsageError, UnannotatedToolWarning
from ..ledger import Ledger
from ..ledger import recordable_text as text
from ._options import _kind, check_guards, check_targets
from ._redaction import check_paths, roots
from ._schema import _lift_schema, _result_type, _signature_struct, to_strict_schema

__all__ = [
    "MAX_ARGS_BYTES",
    "MAX_ARGS_DEPTH",
    "Registry",
    "ToolSpec",
    "json_problem",
    "nests_deeper",
]

#: Arguments larger than this (as JSON text) are refused before they are parsed.
MAX_ARGS_BYTES = 1 << 20
#: Arguments nested deeper than this are refused before they are parsed.
MAX_ARGS_DEPTH = 64

# Tuples, not ``A | B`` unions: a union is built anew each time the expression runs
# (~160 ns here), and these checks run on every call (and every item of dict args).
_TEXT = (str, bytes, bytearray, memoryview)
_ARRAYS = (list, tuple)

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_NOT_SYNTAX = bytes(b for b in range(256) if b not in b'[]{}"')
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


def nests_deeper(raw: bytes, limit: int) -> bool:
    """True when the JSON text nests deeper than ``limit``, found without parsing it.

    Fewer openers than the limit cannot nest deeper, and most arguments stop there; the
    scan skips string contents so brackets inside strings do not count.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    # Strings out, then everything but brackets, with C-level loops only: the per-token
    # Python loop this replaces cost ~40 us per KB of bracket-heavy arguments.
    if b"\\" in raw:
        brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    else:
        # No escapes: quotes alternate open/close, so the even pieces are outside strings
        # (and an unterminated string's text is outside, as the regex treats it).
        parts = raw.translate(None, _NOT_SYNTAX).split(b'"')
        brackets = b"".join(parts[0::2])
        if len(parts) % 2 == 0:
            brackets += parts[-1]
    if brackets.count(b"[") + brackets.count(b"{") <= limit:
        return False
    # The depth after the i-th bracket (from 1) is 2 * openers so far - i.
    deepest: int = max(map(sub, accumulate(brackets.translate(_STEPS)), count(1)))
    return deepest > limit


def json_problem(value: Any, limit: int) -> str | None:
    """Why a Python value given as a dict is not JSON arguments, or None when it is.

    Iterative, stops early. Nesting counts containers only (as the text check does), and
    a float that is NaN or infinite is refused: JSON has no such numbers, and msgspec
    would encode each of them as ``null``, giving three different values one digest.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > limit:
                return f"nest deeper than {limit} levels"
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, _ARRAYS):
            if depth > limit:
                return f"nest deeper than {limit} levels"
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, float) and not math.isfinite(item):
            return f"contain {item!r}, which is not a JSON number"
        elif isinstance(item, _FRAGMENT):
            # Pre-encoded JSON the digest's encoder would embed as written, not
            # canonically: one value could then have several digests.
            return "contain an orjson.Fragment (pre-encoded JSON); pass the value itself"
    return None


try:
    from orjson import Fragment as _FRAGMENT
except ImportError:  # pragma: no cover - orjson is a dependency

    class _FRAGMENT:  # type: ignore[no-redef]
        """Stands in when orjson is missing: nothing is one."""


# A msgspec error's path ("... - at `$.name...`") and its root argument.
_MSGSPEC_PATH = re.compile(r" - at `\$\.([^.\[`]+)")
# Root-level jsonschema keywords whose messages name properties, never values.
_VALUE_FREE = frozenset({"required", "additionalProperties", "unevaluatedProperties"})


# -- specs ------------------------------------------------------------------------------


def _effect_fields(template: str) -> set[str]:
    fields = set()
    for _, field, _, _ in string.Formatter().parse(template):
        if field is not None:
            root = re.split(r"[.\[]", field, maxsplit=1)[0]
            if not root or root.isdigit():
                raise ToolUsageError(f"effect template {template!r} must name arguments")
            fields.add(root)
    return fields


#: When a call's pre-body events are committed (``Registry.tool(durability=...)``).
Durability = Literal["write-ahead", "outcome"]


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class ToolSpec:
    """One registered tool: its function, schema, and pipeline options (frozen).

    Build it with :meth:`Registry.tool` or :meth:`Registry.add_schema_tool`.
    """

    name: str
    description: str
    fn: Callable[..., Any]
    json_schema: dict[str, Any]
    confirm: bool | Callable[..., Any] = False
    targets: tuple[str, ...] | None = None
    timeout: float | None = None
    cache: float | None = None
    effect: str | Callable[[dict[str, Any]], str] | None = None
    guards: tuple[Callable[..., Any], ...] = ()
    output_guards: tuple[Callable[..., Any], ...] = ()
    redact: frozenset[str] = frozenset()
    redact_result: bool = False
    #: the tool changes nothing (MCP's ``readOnlyHint``); a hint to clients, it grants nothing
    readonly: bool = False
    is_async: bool = True
    args_type: type[msgspec.Struct] | None = None
    validator: Any = None
    untyped: bool = False
    #: the function's return annotation when msgspec can rebuild it from JSON, else None:
    #: a cached or replayed value (stored as JSON) is handed back as this type
    result_type: Any = None
    #: "write-ahead": the call's pre-body events are committed before the body runs;
    #: "outcome": with its outcome, one commit per call (see ``Registry.tool``)
    durability: str = "write-ahead"

    def exported_to(self, target: str) -> bool:
        """True when the bridge named ``target`` exports this tool."""
        return self.targets is None or target in self.targets

    def strict_schema(self) -> dict[str, Any] | None:
        """The OpenAI strict form of ``json_schema``, or None where it is not portable.

        Every field is required, as with the SDK's ``@function_tool``; a defaulted field
        keeps its default in the schema and validation still fills it when it is omitted.
        """
        # msgspec fills defaults at every level (nested Structs and dataclasses too); a
        # schema tool's validator only at the top (``_validate_schema``).
        return to_strict_schema(self.json_schema, nested_defaults=self.args_type is not None)

    def effect_key(self, args: dict[str, Any]) -> str | None:
        """The rendered effect key for validated ``args`` (None without ``effect``)."""
        if self.effect is None:
            return None
        if callable(self.effect):
            return str(self.effect(args))
        return self.effect.format_map(args)

    def validate(self, args: Any) -> dict[str, Any]:
        """Validate ``args`` (a dict, or JSON text/bytes) strictly; defaults applied.

        Raises ToolArgsInvalid for bad JSON, a non-object, wrong types (no coercion),
        missing or unknown fields, more than 1 MiB, or nesting deeper than 64 levels.
        """
        if isinstance(args, _TEXT):
            try:
                raw = args.encode() if isinstance(args, str) else bytes(args)
            except UnicodeEncodeError as exc:
                # A lone surrogate: no JSON parser can read it, and no ledger can store it.
                raise ToolArgsInvalid(
                    f"arguments for {self.name} are not valid text: {exc.reason} at "
                    f"character {exc.start}"
                ) from None
            if len(raw) > MAX_ARGS_BYTES:
                raise ToolArgsInvalid(
                    f"arguments for {self.name} are {len(raw)} bytes, over the "
                    f"{MAX_ARGS_BYTES} byte limit"
                )
            if nests_deeper(raw, MAX_ARGS_DEPTH):
                raise ToolArgsInvalid(
                    f"arguments for {self.name} nest deeper than {MAX_ARGS_DEPTH} levels"
                )
            if self.args_type is not None:
                try:
                    obj = msgspec.json.decode(raw, type=self.args_type)
                except msgspec.DecodeError as exc:
                    raise self._invalid(str(exc)) from None
                return msgspec.structs.asdict(obj)
            try:
                value = msgspec.json.decode(raw)
            except msgspec.DecodeError as exc:
                raise ToolArgsInvalid(f"invalid arguments for {self.name}: {exc}") from None
            return self._validate_schema(value)
        if not isinstance(args, Mapping):
            raise ToolArgsInvalid(
                f"invalid arguments for {self.name}: expected an object, got {type(args).__name__}"
            )
        problem = json_problem(args, MAX_ARGS_DEPTH)
        if problem is not None:
            raise ToolArgsInvalid(f"arguments for {self.name} {problem}")
        if self.args_type is not None:
            try:
                obj = msgspec.convert(args, self.args_type, strict=True)
            except msgspec.ValidationError as exc:
                raise self._invalid(str(exc)) from None
            except UnicodeEncodeError as exc:  # a key holding a lone surrogate
                raise ToolArgsInvalid(
                    f"arguments for {self.name} are not valid text: {exc.reason}"
                ) from None
            return msgspec.structs.asdict(obj)
        return self._validate_schema(dict(args))

    def _invalid(self, message: str) -> ToolArgsInvalid:
        # msgspec quotes the value for enum and literal errors ("Invalid enum value 'x'"):
        # for a redacted argument keep only the path, so no secret reaches the ledger.
        if self.redact:
            at = _MSGSPEC_PATH.search(message)
            if at is not None and at.group(1) in roots(self.redact):
                message = f"Invalid value{message[at.start() :]}"
        return ToolArgsInvalid(f"invalid arguments for {self.name}: {message}")

    def _validate_schema(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise ToolArgsInvalid(
                f"invalid arguments for {self.name}: expected an object, got {type(value).__name__}"
            )
        error = next(iter(self.validator.iter_errors(value)), None)
        if error is not None:
            path = list(error.absolute_path)
            where = "$" + "".join(f"[{p!r}]" for p in path)
            message = error.message
            # jsonschema messages quote the offending value (for some keywords, the whole
            # object): with redacted arguments, name only the keyword, never the value.
            if self.redact and (
                path[0] in roots(self.redact) if path else error.validator not in _VALUE_FREE
            ):
                message = f"{error.validator!r} is not satisfied"
            raise ToolArgsInvalid(f"invalid arguments for {self.name}: {message} at {where}")
        defaults = {
            k: copy.deepcopy(v["default"])
            for k, v in self.json_schema.get("properties", {}).items()
            if isinstance(v, dict) and "default" in v and k not in value
        }
        return {**defaults, **value} if defaults else value


def _check_durability(name: str, durability: object, effect: object, confirm: object) -> None:
    """ToolUsageError unless ``durability`` is allowed for a tool with these options.

    "outcome" writes nothing before the body runs, so a crash during the body leaves no
    trace of the call. That is only acceptable for a call whose running twice is
    harmless: a tool with an effect key (its claim must be durable before the effect,
    or a restart would run it again) or with ``confirm`` (the approval must be on disk
    before the approved arguments run) keeps the write-ahead.
    """
    if durability == "write-ahead":
        return
    if durability != "outcome":
        raise ToolUsageError(
            f'tool {name}: durability must be "write-ahead" or "outcome", not {durability!r}'
        )
    if effect is not None:
        raise ToolUsageError(
            f'tool {name}: durability="outcome" is refused for a tool with an effect key: '
            "its claim must be durable before the body runs"
        )
    if confirm is not False:
        raise ToolUsageError(
            f'tool {name}: durability="outcome" is refused for a tool with confirm: its '
            "approval must be durable before the approved arguments run"
        )


def _warn_unannotated(tool: str, fn: Callable[..., Any], stacklevel: int) -> None:
    """Warn (once, at registration) when parameters have no annotation: validation then
    accepts any JSON value for them, which a forgotten annotation should not silently mean."""
    bare = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.annotation is inspect.Parameter.empty
    ]
    if bare:
        names = ", ".join(repr(n) for n in bare)
        warnings.warn(
            f"tool {tool}: parameter(s) {names} have no type annotation, so any JSON "
            f"value is accepted for them; annotate them ({bare[0]}: str, ...), with Any to "
            "accept anything",
            UnannotatedToolWarning,
            stacklevel=stacklevel,
        )


class Registry:
    """Named tools. ``@registry.tool`` registers a function and returns its ``ToolSpec``."""

    def __init__(self) -> None:
        self._specs: dict[str, ToolSpec] = {}

    # Two overloads, so that a type checker knows what each form returns: bare
    # (``@registry.tool``) the spec, with options a decorator that makes one.
    @overload
    def tool(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        confirm: bool | Callable[..., Any] = False,
        targets: Sequence[str] | None = None,
        timeout: float | None = None,
        cache: float | None = None,
        effect: str | Callable[[dict[str, Any]], str] | None = None,
        guards: Sequence[Callable[..., Any]] = (),
        output_guards: Sequence[Callable[..., Any]] = (),
        redact: Sequence[str] = (),
        redact_result: bool = False,
        readonly: bool = False,
        durability: Durability = "write-ahead",
    ) -> ToolSpec: ...

    @overload
    def tool(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        confirm: bool | Callable[..., Any] = False,
        targets: Sequence[str] | None = None,
        timeout: float | None = None,
        cache: float | None = None,
        effect: str | Callable[[dict[str, Any]], str] | None = None,
        guards: Sequence[Callable[..., Any]] = (),
        output_guards: Sequence[Callable[..., Any]] = (),
        redact: Sequence[str] = (),
        redact_result: bool = False,
        readonly: bool = False,
        durability: Durability = "write-ahead",
    ) -> Callable[[Callable[..., Any]], ToolSpec]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        confirm: bool | Callable[..., Any] = False,
        targets: Sequence[str] | None = None,
        timeout: float | None = None,
        cache: float | None = None,
        effect: str | Callable[[dict[str, Any]], str] | None = None,
        guards: Sequence[Callable[..., Any]] = (),
        output_guards: Sequence[Callable[..., Any]] = (),
        redact: Sequence[str] = (),
        redact_result: bool = False,
        readonly: bool = False,
        durability: Durability = "write-ahead",
    ) -> ToolSpec | Callable[[Callable[..., Any]], ToolSpec]:
        """Register a sync or async function; usable bare (``@registry.tool``) or with options.

        The parameter schema comes from the signature; ``name`` defaults to the function's
        name and ``description`` to its docstring. Returns the ``ToolSpec``. ``targets``
        names bridges (``"mcp"``, ``"openai_agents"``, ``"temporal"``; another name is a
        ``ToolUsageError``). ``readonly=True`` says the tool changes nothing (exported to
        MCP clients as ``readOnlyHint``); it grants nothing by itself. A parameter without
        a type annotation accepts any JSON value: allowed, with an ``UnannotatedToolWarning``.

        ``durability``: ``"write-ahead"`` (the default) commits a call's
        ``call.requested``/``call.validated``/``call.started`` before its body runs, so a
        crash leaves an ambiguous call, never a forgotten one; ``"outcome"`` commits them
        with the outcome, one commit per call instead of two. A crash during such a body
        loses the record that the call started (the call is then as if never made), never
        an effect: it is refused (``ToolUsageError``) for a tool with ``effect`` or
        ``confirm``.
        """

        def register(func: Callable[..., Any], *, stacklevel: int = 2) -> ToolSpec:
            tool_name = name or func.__name__
            struct, untyped = _signature_struct(func, tool_name)
            # Before _build registers it: with warnings as errors, nothing is registered.
            _warn_unannotated(tool_name, func, stacklevel + 1)
            spec = self._build(
                tool_name,
                description if description is not None else inspect.getdoc(func) or "",
                func,
                _lift_schema(struct),
                confirm=confirm,
                targets=targets,
                timeout=timeout,
                cache=cache,
                effect=effect,
                guards=guards,
                output_guards=output_guards,
                redact=redact,
                redact_result=redact_result,
                readonly=readonly,
                durability=durability,
                args_type=struct,
                untyped=untyped,
            )
            return spec

        if fn is not None:
            return register(fn, stacklevel=3)  # (bare: the user's line is one frame further)
        return register

    def add_schema_tool(
        self,
        name: str,
        json_schema: Mapping[str, Any],
        fn: Callable[..., Any],
        *,
        description: str = "",
        confirm: bool | Callable[..., Any] = False,
        targets: Sequence[str] | None = None,
        timeout: float | None = None,
        cache: float | None = None,
        effect: str | Callable[[dict[str, Any]], str] | None = None,
        guards: Sequence[Callable[..., Any]] = (),
        output_guards: Sequence[Callable[..., Any]] = (),
        redact: Sequence[str] = (),
        redact_result: bool = False,
        readonly: bool = False,
        durability: Durability = "write-ahead",
    ) -> ToolSpec:
        """Register a tool described by a JSON Schema (e.g. an MCP server's tool).

        Arguments are validated against the schema with ``jsonschema`` (no coercion);
        top-level defaults are applied. ``fn`` receives the arguments as keywords.
        """
        import jsonschema

        schema = copy.deepcopy(dict(json_schema))
        if schema.get("type") != "object":
            raise ToolUsageError(f"schema tool {name}: the schema must describe an object")
        try:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ToolUsageError(f"schema tool {name}: invalid JSON Schema: {exc.message}") from exc
        return self._build(
            name,
            description or str(schema.get("description", "")),
            fn,
            schema,
            confirm=confirm,
            targets=targets,
            timeout=timeout,
            cache=cache,
            effect=effect,
            guards=guards,
            output_guards=output_guards,
            redact=redact,
            redact_result=redact_result,
            readonly=readonly,
            durability=durability,
            validator=cls(schema),
            untyped=True,
        )

    def _build(
        self,
        name: str,
        description: str,
        fn: Callable[..., Any],
        schema: dict[str, Any],
        *,
        confirm: bool | Callable[..., Any],
        targets: Sequence[str] | None,
        timeout: float | None,
        cache: float | None,
        effect: str | Callable[[dict[str, Any]], str] | None,
        guards: Sequence[Callable[..., Any]],
        output_guards: Sequence[Callable[..., Any]],
        redact: Sequence[str],
        redact_result: bool,
        readonly: bool = False,
        durability: str = "write-ahead",
        args_type: type[msgspec.Struct] | None = None,
        validator: Any = None,
        untyped: bool = False,
    ) -> ToolSpec:
        # The name goes into every event of every call: plain, encodable text.
        if not isinstance(name, str) or not name:
            raise ToolUsageError(f"a tool's name must be non-empty text, not {name!r}")
        name = text(name)
        if name in self._specs:
            raise ToolUsageError(f"a tool named {name!r} is already registered")
        if not (isinstance(confirm, bool) or callable(confirm)):
            raise ToolUsageError(f"tool {name}: confirm must be a bool or a callable")
        if type(readonly) is not bool:
            raise ToolUsageError(f"tool {name}: readonly must be True or False")
        _check_durability(name, durability, effect, confirm)
        params = set(schema.get("properties", {}))
        bad_path = check_paths(redact)  # the syntax first: the checks below split paths
        if bad_path is not None:
            raise ToolUsageError(f"tool {name}: redact: {bad_path}")
        if isinstance(effect, str):
            named = _effect_fields(effect)
            missing = named - params
            if missing:
                raise ToolUsageError(
                    f"tool {name}: effect template names unknown arguments {sorted(missing)}"
                )
            secret = named & roots(redact)
            if secret:
                # The key is recorded in effect.claimed and call.started: a template over a
                # redacted argument would write its value to the ledger in clear.
                raise ToolUsageError(
                    f"tool {name}: effect template names redacted arguments {sorted(secret)}; "
                    "use a callable effect that keys on a hash of them"
                )
        unknown = roots(redact) - params
        if unknown:
            raise ToolUsageError(f"tool {name}: redact names unknown arguments {sorted(unknown)}")
        bad_path = check_paths(redact, args_type, schema)
        if bad_path is not None:
            raise ToolUsageError(f"tool {name}: redact: {bad_path}")
        for label, value in (("timeout", timeout), ("cache", cache)):
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 < value < math.inf
            ):
                raise ToolUsageError(f"tool {name}: {label} must be a positive number of seconds")
        # Seconds as floats: recorded as floats (timeout_s), so they read back as written.
        timeout = None if timeout is None else float(timeout)
        cache = None if cache is None else float(cache)
        spec = ToolSpec(
            name=name,
            description=description,
            fn=fn,
            json_schema=schema,
            confirm=confirm,
            targets=check_targets(name, targets),
            timeout=timeout,
            cache=cache,
            effect=effect,
            guards=check_guards(f"tool {name}: guards", guards, output=False),
            output_guards=check_guards(f"tool {name}: output_guards", output_guards, output=True),
            redact=frozenset(redact),
            redact_result=redact_result,
            readonly=readonly,
            is_async=inspect.iscoroutinefunction(fn),
            args_type=args_type,
            validator=validator,
            untyped=untyped,
            result_type=_result_type(fn),
            durability=durability,
        )
        self._specs[name] = spec
        return spec

    def get(self, name: str) -> ToolSpec:
        """The spec named ``name``; ToolUsageError when there is none."""
        try:
            return self._specs[name]
        except KeyError:
            raise ToolUsageError(f"no tool named {name!r} is registered") from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)


def check_registry(registry: Any) -> None:
    """Refuse a ``registry`` that is not a Registry (a ledger passed first, by position)."""
    if registry is None or isinstance(registry, Registry):
        return
    hint = ""
    if isinstance(registry, Ledger) and not isinstance(registry, type):
        hint = "; a ledger is passed by name: Executor(registry, ledger=...)"
    raise ToolUsageError(f"registry must be a Registry, not {_kind(registry)}{hint}")
