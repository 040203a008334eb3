"""Registry and ToolSpec: registration options, schemas, strict schemas, strict validation."""

from __future__ import annotations

import dataclasses
import enum
from typing import Annotated, Any, Literal

import msgspec
import orjson
import pytest

from agent_adapter import Registry, ToolSpec
from agent_adapter.engine import MAX_ARGS_BYTES, MAX_ARGS_DEPTH, digest
from agent_adapter.errors import ToolArgsInvalid, ToolUsageError


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Address(msgspec.Struct, forbid_unknown_fields=True):
    """A postal address."""

    street: str
    zip: str


@dataclasses.dataclass
class Item:
    sku: str
    qty: int


def _guard(call: Any) -> None:
    return None


def _out_guard(call: Any, result: Any) -> None:
    return None


# -- registration ---------------------------------------------------------------------


def test_sync_tool_defaults() -> None:
    """A bare decorator on a sync function gives a spec named after it, with its docstring."""
    registry = Registry()

    @registry.tool
    def lookup(order_id: str) -> str:
        """Look an order up."""
        return order_id

    assert isinstance(lookup, ToolSpec)
    assert (
        lookup.name,
        lookup.description,
        lookup.is_async,
        lookup.confirm,
        lookup.targets,
        lookup.timeout,
        lookup.cache,
        lookup.effect,
        lookup.guards,
        lookup.output_guards,
        lookup.redact,
        lookup.redact_result,
        registry.get("lookup") is lookup,
        list(registry),
        len(registry),
        "lookup" in registry,
    ) == (
        "lookup",
        "Look an order up.",
        False,
        False,
        None,
        None,
        None,
        None,
        (),
        (),
        frozenset(),
        False,
        True,
        [lookup],
        1,
        True,
    )
    assert lookup.fn.__name__ == "lookup"


def test_async_tool_with_every_option() -> None:
    """Every option given to ``tool`` is kept on the frozen spec."""
    registry = Registry()

    def rule(call: Any, ctx: Any) -> bool:
        return True

    async def refund(order_id: str, amount_cents: int, token: str = "") -> str:
        return "done"

    spec = registry.tool(
        refund,
        name="refund_order",
        description="Refund.",
        confirm=rule,
        targets=["openai_agents"],
        timeout=10,
        cache=30.0,
        effect="refund:{order_id}",
        guards=[_guard],
        output_guards=[_out_guard],
        redact=["token"],
        redact_result=True,
    )
    assert (
        spec.name,
        spec.description,
        spec.is_async,
        spec.confirm,
        spec.targets,
        spec.timeout,
        spec.cache,
        spec.effect,
        spec.guards,
        spec.output_guards,
        spec.redact,
        spec.redact_result,
        spec.fn,
        spec.exported_to("openai_agents"),
        spec.exported_to("mcp"),
    ) == (
        "refund_order",
        "Refund.",
        True,
        rule,
        ("openai_agents",),
        10,
        30.0,
        "refund:{order_id}",
        (_guard,),
        (_out_guard,),
        frozenset({"token"}),
        True,
        refund,
        True,
        False,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]


def test_effect_key_rendering() -> None:
    """An effect template renders over validated arguments; a callable effect is called."""
    registry = Registry()

    @registry.tool(effect="pay:{to}:{amount}")
    def pay(to: str, amount: int) -> None: ...

    @registry.tool(effect=lambda args: f"mail:{args['to'].lower()}")
    def mail(to: str) -> None: ...

    @registry.tool
    def plain(x: int) -> None: ...

    assert (
        pay.effect_key({"to": "bob", "amount": 5}),
        mail.effect_key({"to": "Bob"}),
        plain.effect_key({"x": 1}),
    ) == ("pay:bob:5", "mail:bob", None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"effect": "x:{missing}"}, "tool f: effect template names unknown arguments ['missing']"),
        ({"effect": "x:{0}"}, "effect template 'x:{0}' must name arguments"),
        ({"redact": ["nope"]}, "tool f: redact names unknown arguments ['nope']"),
        ({"timeout": 0}, "tool f: timeout must be a positive number of seconds"),
        ({"cache": -1}, "tool f: cache must be a positive number of seconds"),
        ({"confirm": "yes"}, "tool f: confirm must be a bool or a callable"),
    ],
)
def test_bad_options_are_usage_errors(options: dict[str, Any], message: str) -> None:
    """Options that cannot work are refused at registration with a clear ToolUsageError."""
    registry = Registry()

    def f(a: int) -> None: ...

    with pytest.raises(ToolUsageError) as info:
        registry.tool(f, **options)
    assert str(info.value) == message
    assert "f" not in registry


def test_duplicate_name_is_a_usage_error() -> None:
    """Registering two tools with one name is a ToolUsageError; the first stays."""
    registry = Registry()

    @registry.tool
    def f(a: int) -> None: ...

    def other(b: int) -> None: ...

    with pytest.raises(ToolUsageError) as info:
        registry.tool(other, name="f")
    assert (str(info.value), registry.get("f")) == ("a tool named 'f' is already registered", f)


def test_unknown_tool_is_a_usage_error() -> None:
    """``get`` of a name nobody registered is a ToolUsageError."""
    with pytest.raises(ToolUsageError) as info:
        Registry().get("nope")
    assert str(info.value) == "no tool named 'nope' is registered"


def test_star_args_are_refused() -> None:
    """``*args``/``**kwargs`` cannot be described as named JSON fields."""
    registry = Registry()

    def f(*items: int) -> None: ...

    with pytest.raises(ToolUsageError) as info:
        registry.tool(f)
    assert str(info.value) == "tool f: parameter 'items' must be a plain named parameter"


# -- schemas ----------------------------------------------------------------------------


def test_schema_from_a_rich_signature() -> None:
    """Optional with defaults, Literal, Enum, Meta constraints, Structs and dataclasses."""
    registry = Registry()

    @registry.tool
    async def order(
        addr: Address,
        items: list[Item],
        color: Color,
        mode: Literal["fast", "slow"] = "fast",
        note: str | None = None,
        qty: Annotated[int, msgspec.Meta(ge=1, le=10)] = 1,
    ) -> str:
        return "ok"

    assert order.json_schema == {
        "type": "object",
        "properties": {
            "addr": {"$ref": "#/$defs/Address"},
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
            "color": {"$ref": "#/$defs/Color"},
            "mode": {"enum": ["fast", "slow"], "default": "fast"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "qty": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
        },
        "required": ["addr", "items", "color"],
        "additionalProperties": False,
        "$defs": {
            "Address": {
                "title": "Address",
                "description": "A postal address.",
                "type": "object",
                "properties": {"street": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["street", "zip"],
                "additionalProperties": False,
            },
            "Item": {
                "title": "Item",
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku", "qty"],
            },
            "Color": {"title": "Color", "enum": ["blue", "red"]},
        },
    }
    assert order.validate(
        {"addr": {"street": "s", "zip": "z"}, "items": [{"sku": "a", "qty": 2}], "color": "red"}
    ) == {
        "addr": Address(street="s", zip="z"),
        "items": [Item(sku="a", qty=2)],
        "color": Color.RED,
        "mode": "fast",
        "note": None,
        "qty": 1,
    }


def test_strict_schema_of_a_portable_signature() -> None:
    """Every field required, nullable optionals kept, objects closed, defaults dropped."""
    registry = Registry()

    @registry.tool
    def search(query: str, tags: list[str], where: Address, limit: int | None = None) -> str:
        return ""

    assert search.strict_schema() == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "where": {"$ref": "#/$defs/Address"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["query", "tags", "where", "limit"],
        "additionalProperties": False,
        "$defs": {
            "Address": {
                "title": "Address",
                "description": "A postal address.",
                "type": "object",
                "properties": {"street": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["street", "zip"],
                "additionalProperties": False,
            }
        },
    }


def _f_open(data: dict) -> None: ...  # type: ignore[type-arg]
def _f_map(data: dict[str, int]) -> None: ...
def _f_tuple(pair: tuple[int, str]) -> None: ...
def _f_any(x: Any) -> None: ...
def _f_inf(x: float = float("inf")) -> None: ...
def _f_none_not_nullable(note: str = None) -> None: ...  # type: ignore[assignment]  # noqa: RUF013
def _f_refused_default(n: Annotated[int, msgspec.Meta(ge=1)] = 0) -> None: ...


@dataclasses.dataclass
class _Stamped:
    id: str = dataclasses.field(default_factory=lambda: "fresh")  # no default in the schema


def _f_factory(s: _Stamped) -> None: ...


@pytest.mark.parametrize(
    "fn",
    [_f_open, _f_map, _f_tuple, _f_any, _f_inf, _f_none_not_nullable, _f_refused_default,
     _f_factory],
)  # fmt: skip
def test_strict_schema_is_none_when_not_portable(fn: Any) -> None:
    """Open objects, maps, tuples, Any, and defaults the model could not send give None.

    A default is unsendable when JSON cannot carry it (infinity), when it is null for a
    field that refuses null, when the field's own schema refuses it, or when the schema
    shows none (a default_factory msgspec cannot describe).
    """
    registry = Registry()
    assert registry.tool(fn).strict_schema() is None


class Parcel(msgspec.Struct, forbid_unknown_fields=True):
    """A parcel; its service level has a default."""

    weight_g: int
    service: str = "standard"


@dataclasses.dataclass
class Label:
    text: str
    copies: int = 1


def test_defaulted_fields_are_required_with_their_default_kept() -> None:
    """As the SDK's @function_tool: every field required, a real default kept, a null one dropped.

    Nested Structs and dataclasses are treated alike (msgspec fills their defaults too).
    """
    registry = Registry()

    @registry.tool
    def ship(
        order_id: str,
        quantity: int,
        express: bool = False,
        note: str | None = None,
        parcel: Parcel | None = None,
        label: Label = Label("fragile"),  # noqa: B008 - read, never mutated
        color: Color = Color.RED,
    ) -> str:
        return ""

    assert ship.strict_schema() == {
        "type": "object",
        "properties": {
            "order_id": {"type": "string"},
            "quantity": {"type": "integer"},
            "express": {"type": "boolean", "default": False},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "parcel": {"anyOf": [{"$ref": "#/$defs/Parcel"}, {"type": "null"}]},
            # A $ref beside a default is inlined, as the SDK does.
            "label": {
                "title": "Label",
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "copies": {"type": "integer", "default": 1},
                },
                "required": ["text", "copies"],
                "additionalProperties": False,
                "default": {"text": "fragile", "copies": 1},
            },
            "color": {"title": "Color", "enum": ["blue", "red"], "default": "red"},
        },
        "required": ["order_id", "quantity", "express", "note", "parcel", "label", "color"],
        "additionalProperties": False,
        "$defs": {
            "Color": {"title": "Color", "enum": ["blue", "red"]},
            "Label": {
                "title": "Label",
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "copies": {"type": "integer", "default": 1},
                },
                "required": ["text", "copies"],
                "additionalProperties": False,
            },
            "Parcel": {
                "title": "Parcel",
                "description": "A parcel; its service level has a default.",
                "type": "object",
                "properties": {
                    "weight_g": {"type": "integer"},
                    "service": {"type": "string", "default": "standard"},
                },
                "required": ["weight_g", "service"],
                "additionalProperties": False,
            },
        },
    }


def test_validation_still_fills_defaults_behind_a_strict_schema() -> None:
    """Making a defaulted field required in the strict schema changes no validation.

    A call that omits it still validates and gets the default, at the top level and in
    nested Structs, and equals (same digest) the call that sends the default.
    """
    registry = Registry()

    @registry.tool
    def ship(
        order_id: str, quantity: int, express: bool = False, parcel: Parcel | None = None
    ) -> str:
        return ""

    assert ship.strict_schema() is not None
    omitted = ship.validate('{"order_id": "A1", "quantity": 2, "parcel": {"weight_g": 5}}')
    sent = ship.validate(
        '{"order_id": "A1", "quantity": 2, "express": false,'
        ' "parcel": {"weight_g": 5, "service": "standard"}}'
    )
    assert (
        omitted
        == sent
        == {
            "order_id": "A1",
            "quantity": 2,
            "express": False,
            "parcel": Parcel(weight_g=5, service="standard"),
        }
    )
    assert digest(omitted) == digest(sent)


# -- validation ------------------------------------------------------------------------


@pytest.fixture
def pay() -> ToolSpec:
    registry = Registry()

    @registry.tool
    def pay(
        to: str,
        amount: float,
        count: Annotated[int, msgspec.Meta(ge=1)] = 1,
        color: Color = Color.RED,
        addr: Address | None = None,
    ) -> str:
        return "ok"

    return pay


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            "{not json",
            "invalid arguments for pay: JSON is malformed: object keys must be strings (byte 1)",
        ),
        ("[1, 2]", "invalid arguments for pay: Expected `object`, got `array`"),
        ([1, 2], "invalid arguments for pay: expected an object, got list"),
        ({"to": "bob"}, "invalid arguments for pay: Object missing required field `amount`"),
        (
            {"to": "bob", "amount": 1, "extra": 1},
            "invalid arguments for pay: Object contains unknown field `extra`",
        ),
        (
            '{"to": "bob", "amount": "1"}',
            "invalid arguments for pay: Expected `float`, got `str` - at `$.amount`",
        ),
        (
            {"to": "bob", "amount": "1"},
            "invalid arguments for pay: Expected `float`, got `str` - at `$.amount`",
        ),
        (
            {"to": 5, "amount": 1},
            "invalid arguments for pay: Expected `str`, got `int` - at `$.to`",
        ),
        (
            {"to": "bob", "amount": 1, "count": True},
            "invalid arguments for pay: Expected `int`, got `bool` - at `$.count`",
        ),
        (
            {"to": "bob", "amount": 1, "count": 0},
            "invalid arguments for pay: Expected `int` >= 1 - at `$.count`",
        ),
        (
            {"to": "bob", "amount": 1, "color": "green"},
            "invalid arguments for pay: Invalid enum value 'green' - at `$.color`",
        ),
        (
            {"to": "bob", "amount": 1, "addr": {"street": "s", "zip": "z", "x": 1}},
            "invalid arguments for pay: Object contains unknown field `x` - at `$.addr`",
        ),
        (
            {"to": "bob", "amount": float("nan")},
            "arguments for pay contain nan, which is not a JSON number",
        ),
        (
            {"to": "bob", "amount": float("-inf")},
            "arguments for pay contain -inf, which is not a JSON number",
        ),
        (
            {"to": "bob", "amount": orjson.Fragment(b"1")},
            "arguments for pay contain an orjson.Fragment (pre-encoded JSON); pass the value "
            "itself",
        ),
    ],
)
def test_invalid_arguments(pay: ToolSpec, args: Any, message: str) -> None:
    """Bad JSON, non-objects, wrong types (no coercion), missing/unknown fields, constraints."""
    with pytest.raises(ToolArgsInvalid) as info:
        pay.validate(args)
    assert str(info.value) == message


def test_valid_arguments_get_defaults_and_types(pay: ToolSpec) -> None:
    """Validated arguments have defaults applied, an int turned float, enums and Structs built."""
    assert pay.validate('{"amount": 2, "to": "bob", "addr": {"street": "s", "zip": "z"}}') == {
        "to": "bob",
        "amount": 2.0,
        "count": 1,
        "color": Color.RED,
        "addr": Address(street="s", zip="z"),
    }


def test_size_limit_is_checked_before_parsing(pay: ToolSpec) -> None:
    """Text over 1 MiB is refused by its length (it would not even parse)."""
    text = "x" * (MAX_ARGS_BYTES + 1)
    with pytest.raises(ToolArgsInvalid) as info:
        pay.validate(text)
    assert str(info.value) == (
        f"arguments for pay are {MAX_ARGS_BYTES + 1} bytes, over the {MAX_ARGS_BYTES} byte limit"
    )


def _nested_text(levels: int) -> str:
    return '{"data": ' + "[" * (levels - 1) + "1" + "]" * (levels - 1) + "}"


def _nested_dict(levels: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(levels - 1):
        value = [value]
    return {"data": value}


@pytest.mark.parametrize("as_text", [True, False], ids=["text", "dict"])
def test_depth_limit_at_the_boundary(as_text: bool) -> None:
    """64 levels of nesting pass and 65 are refused, from text and from a dict alike."""
    registry = Registry()

    @registry.tool
    def store(data: Any) -> None: ...

    make = _nested_text if as_text else _nested_dict
    assert store.validate(make(MAX_ARGS_DEPTH)) == _nested_dict(MAX_ARGS_DEPTH)
    with pytest.raises(ToolArgsInvalid) as info:
        store.validate(make(MAX_ARGS_DEPTH + 1))
    assert str(info.value) == f"arguments for store nest deeper than {MAX_ARGS_DEPTH} levels"


def test_deep_text_is_refused_without_parsing() -> None:
    """A million opening brackets are refused by the scan, before msgspec sees them."""
    registry = Registry()

    @registry.tool
    def store(data: Any) -> None: ...

    with pytest.raises(ToolArgsInvalid) as info:
        store.validate('{"data": ' + "[" * 1_000_000)
    assert str(info.value) == f"arguments for store nest deeper than {MAX_ARGS_DEPTH} levels"


def test_brackets_inside_strings_do_not_count() -> None:
    """Brackets inside string values are text, not nesting."""
    registry = Registry()

    @registry.tool
    def store(data: Any) -> None: ...

    text = '{"data": "' + "[{" * 100 + '"}'
    assert store.validate(text) == {"data": "[{" * 100}


def test_redacted_values_stay_out_of_error_messages() -> None:
    """An invalid redacted argument is reported by its path only, never its value."""
    registry = Registry()

    @registry.tool(redact=["pin"])
    def unlock(pin: Literal["1111", "2222"], door: str) -> None: ...

    schema_tool = registry.add_schema_tool(
        "unlock2",
        {
            "type": "object",
            "properties": {"pin": {"type": "string"}},
            "not": {"required": ["forbidden"]},
        },
        lambda **kw: None,
        redact=["pin"],
    )
    messages = []
    for spec, args in [
        (unlock, {"pin": "s3cret", "door": "d"}),
        (unlock, '{"pin": "s3cret", "door": "d"}'),
        (schema_tool, {"pin": 987654}),
        (schema_tool, {"pin": "s3cret", "forbidden": 1}),
    ]:
        with pytest.raises(ToolArgsInvalid) as info:
            spec.validate(args)
        messages.append(str(info.value))
    assert messages == [
        "invalid arguments for unlock: Invalid value - at `$.pin`",
        "invalid arguments for unlock: Invalid value - at `$.pin`",
        "invalid arguments for unlock2: 'type' is not satisfied at $['pin']",
        "invalid arguments for unlock2: 'not' is not satisfied at $",
    ]


# -- schema tools ----------------------------------------------------------------------


SCHEMA = {
    "type": "object",
    "description": "Send a message.",
    "properties": {
        "to": {"type": "string"},
        "n": {"type": "integer", "minimum": 0},
        "urgent": {"type": "boolean", "default": False},
    },
    "required": ["to", "n"],
    "additionalProperties": False,
}


def test_schema_tool_validates_with_jsonschema() -> None:
    """A schema tool validates strictly with jsonschema and applies top-level defaults."""
    registry = Registry()
    seen = []
    spec = registry.add_schema_tool("send", SCHEMA, lambda **kw: seen.append(kw), timeout=5)
    assert (spec.name, spec.description, spec.timeout, spec.json_schema) == (
        "send",
        "Send a message.",
        5,
        SCHEMA,
    )
    assert spec.validate('{"to": "a", "n": 1}') == {"to": "a", "n": 1, "urgent": False}
    errors = []
    for args in (
        {"to": "a", "n": "1"},
        {"to": "a"},
        {"to": "a", "n": 1, "x": 0},
        {"to": "a", "n": -1},
        "[]",
        "{bad",
    ):
        with pytest.raises(ToolArgsInvalid) as info:
            spec.validate(args)
        errors.append(str(info.value))
    assert errors == [
        "invalid arguments for send: '1' is not of type 'integer' at $['n']",
        "invalid arguments for send: 'n' is a required property at $",
        "invalid arguments for send: Additional properties are not allowed "
        "('x' was unexpected) at $",
        "invalid arguments for send: -1 is less than the minimum of 0 at $['n']",
        "invalid arguments for send: expected an object, got list",
        "invalid arguments for send: JSON is malformed: object keys must be strings (byte 1)",
    ]
    # Top-level defaults are filled by validation, so "urgent" is required with its default.
    assert spec.strict_schema() == {
        "type": "object",
        "description": "Send a message.",
        "properties": {
            "to": {"type": "string"},
            "n": {"type": "integer", "minimum": 0},
            "urgent": {"type": "boolean", "default": False},
        },
        "required": ["to", "n", "urgent"],
        "additionalProperties": False,
    }


def test_a_schema_tool_s_nested_default_is_not_portable() -> None:
    """A nested default in an imported schema keeps it non-strict: nothing fills it in.

    jsonschema applies no defaults and the spec fills top-level ones only, so a strict
    model would send the default where the tool got the field left out.
    """
    registry = Registry()
    nested = {
        "type": "object",
        "properties": {
            "opts": {
                "type": "object",
                "properties": {"fast": {"type": "boolean", "default": False}},
                "required": [],
                "additionalProperties": False,
            }
        },
        "required": ["opts"],
        "additionalProperties": False,
    }
    spec = registry.add_schema_tool("nested", nested, lambda opts: None)
    assert spec.validate({"opts": {}}) == {"opts": {}}
    assert spec.strict_schema() is None


def test_schema_tool_refuses_bad_schemas() -> None:
    """A schema that is not an object schema, or not valid JSON Schema, is a usage error."""
    registry = Registry()
    messages = []
    for schema in ({"type": "string"}, {"type": "object", "properties": {"a": {"type": 5}}}):
        with pytest.raises(ToolUsageError) as info:
            registry.add_schema_tool("t", schema, lambda **kw: None)
        messages.append(str(info.value).split(":")[0:2])
    assert messages == [
        ["schema tool t", " the schema must describe an object"],
        ["schema tool t", " invalid JSON Schema"],
    ]
    assert len(registry) == 0


def test_an_effect_template_over_a_redacted_argument_is_refused() -> None:
    """The effect key is recorded in clear, so a template may not name a redacted argument."""
    registry = Registry()

    async def charge(card_number: str, amount_cents: int) -> str:
        return "ok"

    with pytest.raises(ToolUsageError) as refused:
        registry.tool(charge, effect="charge:{card_number}", redact=("card_number",))
    assert str(refused.value) == (
        "tool charge: effect template names redacted arguments ['card_number']; "
        "use a callable effect that keys on a hash of them"
    )
    assert "charge" not in registry
