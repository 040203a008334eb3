"""The canonical digest: golden values, and properties (key order, equal values, changes)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import uuid
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_adapter import Registry, digest
from agent_adapter.engine import _digest, canonical


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


# Pinned: if one of these changes, every recorded approval, cache key and effect digest
# in existing ledgers stops matching. Change them only with a migration.
GOLDEN: list[tuple[str, Any, bytes, str]] = [
    (
        "empty",
        {},
        b"{}",
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    ),
    (
        "ints",
        {"b": -2, "a": 1, "big": 2**63 - 1},
        b'{"a":1,"b":-2,"big":9223372036854775807}',
        "3bd09dd22c4d4c7294d4916ae6e9edfd4bbe965f4ab811cfa30830efcff2e1b8",
    ),
    (
        "floats",
        {"one": 1.0, "big": 1e16, "small": 1.5e-7, "negzero": -0.0, "pi": 3.141592653589793},
        b'{"big":1e16,"negzero":0.0,"one":1.0,"pi":3.141592653589793,"small":1.5e-7}',
        "28ccff1db7ccb70b7c20dd2546b02431fd6c2ec193b5b574f123cf45bccfe46e",
    ),
    (
        "text",
        {"quote": 'a"b\\c\n', "name": "Zoë 東京 🚀"},
        '{"name":"Zoë 東京 🚀","quote":"a\\"b\\\\c\\n"}'.encode(),
        "e85dba72d44514be88da0932e9a81efd807bdcbee9666813873f76a06bae3c0e",
    ),
    (
        "nested",
        {
            "order": {"lines": [{"sku": "x", "qty": 2}, {"qty": 1, "sku": "y"}], "id": "A1"},
            "flags": [True, False, None],
        },
        b'{"flags":[true,false,null],"order":{"id":"A1","lines":'
        b'[{"qty":2,"sku":"x"},{"qty":1,"sku":"y"}]}}',
        "c76c2797a9e60f1b1ff16a474085e1f753b74baeb28b2741151bea0cf5e40959",
    ),
    (
        "enums",
        {"level": Level.HIGH, "color": Color.RED},
        b'{"color":"red","level":3}',
        "77a81631b44a6a626ac040425752455d81d34ab7863426409bca433e78f13961",
    ),
]


@pytest.mark.parametrize(
    ("name", "args", "encoded", "hexdigest"), GOLDEN, ids=[g[0] for g in GOLDEN]
)
def test_golden_digests(name: str, args: Any, encoded: bytes, hexdigest: str) -> None:
    """The canonical bytes and the digest of fixed values never change silently."""
    assert (canonical(args), digest(args)) == (encoded, hexdigest)


def test_digest_is_sha256_of_canonical_bytes() -> None:
    """The digest is the SHA-256 hex of the canonical encoding."""
    args = {"z": [1, 2.5, "é"], "a": {"k": None}}
    assert digest(args) == hashlib.sha256(canonical(args)).hexdigest()


def test_negative_zero_inside_strings_is_kept() -> None:
    """Only the number -0.0 is normalized; the text "-0.0" inside a string stays as written."""
    assert canonical({"s": "-0.0", "n": -0.0, "m": -0.01, "q": '"-0.0'}) == (
        b'{"m":-0.01,"n":0.0,"q":"\\"-0.0","s":"-0.0"}'
    )


def test_int_and_float_are_different_untyped_values() -> None:
    """Inside untyped values JSON 1 and 1.0 are different values, so different digests."""
    assert digest({"x": 1}) != digest({"x": 1.0})


def test_structs_and_dataclasses_encode_like_their_dicts() -> None:
    """A Struct or dataclass digests like the dict of its fields (sorted by name)."""

    class Point(msgspec.Struct):
        y: int
        x: int

    @dataclasses.dataclass
    class DPoint:
        y: int
        x: int

    expected = digest({"p": {"x": 1, "y": 2}})
    assert (digest({"p": Point(y=2, x=1)}), digest({"p": DPoint(y=2, x=1)})) == (
        expected,
        expected,
    )


def test_validated_digest_is_the_same_from_text_and_dict() -> None:
    """Equivalent inputs (JSON text, a dict, int for a declared float) validate to one digest."""
    registry = Registry()

    @registry.tool
    def pay(amount: float, to: str, memo: str = "") -> str:
        return "ok"

    from_text = digest(pay.validate('{"to": "bob", "amount": 1}'))
    from_dict = digest(pay.validate({"amount": 1.0, "to": "bob", "memo": ""}))
    assert (from_text, from_dict) == (from_dict, digest({"amount": 1.0, "memo": "", "to": "bob"}))


# -- properties --------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


def _shuffled(value: Any, rnd: Any) -> Any:
    if isinstance(value, dict):
        items = [(k, _shuffled(v, rnd)) for k, v in value.items()]
        rnd.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@settings(deadline=None)  # timing is not under test; a loaded CI must not fail it
@given(json_objects, st.randoms())
def test_key_order_does_not_change_the_digest(args: dict[str, Any], rnd: Any) -> None:
    """The same object with its keys (at every level) in another order has the same digest."""
    assert digest(_shuffled(args, rnd)) == digest(args)


@settings(deadline=None)  # timing is not under test; a loaded CI must not fail it
@given(json_objects)
def test_equal_values_give_equal_digests(args: dict[str, Any]) -> None:
    """A value and its JSON round trip (an equal, separately built value) digest equally."""
    copy = msgspec.json.decode(msgspec.json.encode(args))
    assert digest(copy) == digest(args)


def _changed(value: Any, data: Any) -> Any:
    """``value`` with exactly one leaf, key or length changed (drawn by hypothesis)."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        out = dict(value)
        action = data.draw(st.sampled_from(["recurse", "rename", "drop"]))
        if action == "recurse":
            out[key] = _changed(value[key], data)
        elif action == "rename":
            new = data.draw(st.text(max_size=8).filter(lambda k: k not in value))
            out[new] = out.pop(key)
        else:
            del out[key]
        return out
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        out_list = list(value)
        out_list[i] = _changed(value[i], data)
        return out_list
    if isinstance(value, dict):
        return {**value, "\x00added": None} if "\x00added" not in value else {}
    if isinstance(value, list):
        return [*value, None]
    return data.draw(json_scalars.filter(lambda v: not _same_json(v, value)))


def _same_json(a: Any, b: Any) -> bool:
    # Same JSON value: same type (bool is not int) and equal; 0.0 and -0.0 are one value.
    return type(a) is type(b) and a == b


@settings(deadline=None)  # timing is not under test; a loaded CI must not fail it
@given(json_objects, st.data())
def test_any_change_gives_another_digest(args: dict[str, Any], data: Any) -> None:
    """Changing one value, key or length anywhere changes the digest."""
    other = _changed(args, data)
    assert digest(other) != digest(args)


# -- the fast path (orjson) must give the pinned bytes ---------------------------------


def test_the_fast_encoder_is_in_use() -> None:
    """The installed orjson passed the import-time probe (else every digest is msgspec's)."""
    assert _digest._FAST is not None
    assert _digest.canonical is not _digest._reference


wide_scalars = (
    json_scalars
    | st.integers()  # beyond 64 bits: orjson refuses, msgspec encodes
    | st.floats(allow_nan=False).map(lambda f: f * 1e300)
    | st.sampled_from([1e16, -1e16, 1.5e-7, -0.0, 0.0, 1e-5, 5e-324, 1e308, float("inf")])
    | st.text(alphabet=st.sampled_from('-0.e+"\\1'), max_size=8)  # text that looks like numbers
)
wide_values = st.recursive(
    wide_scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=25,
)


@settings(deadline=None, max_examples=2000)  # timing is not under test
@given(wide_values)
def test_fast_path_matches_the_reference_encoding(value: Any) -> None:
    """orjson + the fix-ups give byte-for-byte msgspec's pinned form, for any JSON value."""
    assert canonical(value) == _digest._reference(value)


def test_fast_path_matches_the_reference_for_every_code_point() -> None:
    """Every character, as a value and as a key sorted among others, encodes as pinned."""
    points = [*range(0x10000), *range(0x10000, 0x110000, 97)]
    for cp in points:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        char = chr(cp)
        value = {char: [char, f"a{char}b"], "a": 1, "\U0001f600": 2, "\uffff": 3, "": char}
        assert canonical(value) == _digest._reference(value), hex(cp)


class _Str(str):
    pass


class _Int(int):
    pass


@pytest.mark.parametrize(
    "value",
    [
        {"big": 2**64, "neg": -(2**63) - 1, "f": 1e16},
        {"when": datetime.datetime(2026, 11, 30, 1, 2, 3, tzinfo=datetime.UTC)},
        {"d": datetime.date(2026, 11, 30)},
        {"u": uuid.UUID(int=7)},
        {"s": _Str("x"), "i": _Int(3), "f": 1e16},
        {"enum": Color.RED, "level": Level.HIGH},
        {"t": (1, "a", 2.5e20)},
        {1: "int key", "1": "str key"},
        {"p": msgspec.defstruct("P", [("y", int), ("x", float)])(y=1, x=-0.0)},
        {"lone": "\ud800"},
    ],
    ids=[
        "big-ints",
        "datetime",
        "date",
        "uuid",
        "subclasses",
        "enums",
        "tuple",
        "int-key",
        "struct",
        "surrogate",
    ],
)
def test_values_orjson_handles_differently_take_the_reference_path(value: Any) -> None:
    """Anything beyond plain JSON is encoded exactly as msgspec encodes it (or refused alike)."""
    try:
        expected = _digest._reference(value)
    except Exception as exc:
        with pytest.raises(type(exc)):
            canonical(value)
    else:
        assert canonical(value) == expected
