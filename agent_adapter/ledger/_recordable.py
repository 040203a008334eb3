"""The boundary between user values and recorded events: never write what cannot be read back.

An event is a msgspec Struct, and msgspec does not check field types when a Struct is
built: ``ApprovalRejected(reason=None)`` encodes as ``"reason": null``, which the typed
decoder then refuses, and every read of the ledger after it fails. So every store checks
each event before it chains it (``payload``): each field that is not ``Any`` must hold
its declared type (a ``str`` a ``str``, a ``float`` a finite number, ...), and the event
must encode. The check and the encode are one function generated per event class (one
boolean expression over its typed fields, no loop).

Values that come from users (arguments, metadata, tool results, error texts, names) are
normalised where they enter an event: ``text`` makes any ``str`` encodable (a lone
surrogate is written as its ``\\udXXX`` escape), ``recordable`` gives an encodable copy
of any value (or the value itself, when it encodes as it is).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import msgspec

from ..errors import LedgerError
from ._events import Event, _encoder

__all__ = [
    "MAX_RECORDED_DEPTH",
    "PAYLOADS",
    "UnrecordableEvent",
    "append_repaired",
    "checked_clock",
    "payload",
    "repair",
    "recordable",
    "text",
]

#: Containers nested deeper than this are recorded as a placeholder by ``recordable``.
MAX_RECORDED_DEPTH = 64

# The ledger's encoder without its placeholder hook: what encodes as it is.
_strict = msgspec.json.Encoder()

# What encoding a value can raise: a lone surrogate (UnicodeEncodeError, a ValueError),
# nesting past the recursion limit, an int too large, an object msgspec refuses.
_ENCODE_ERRORS = (TypeError, ValueError, OverflowError, RecursionError, msgspec.EncodeError)


class UnrecordableEvent(LedgerError):
    """An event was refused before anything was written: it would not read back.

    ``event`` is the refused event; the message names its type and the field.
    """

    def __init__(self, message: str, event: Event) -> None:
        super().__init__(message)
        self.event = event


def text(value: str) -> str:
    """``value`` as text every store can encode: a plain ``str`` (a subclass's value is
    copied out: the encoder takes only exact ``str``), a lone surrogate as its escape."""
    if type(value) is not str:
        value = str.__str__(value)
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def recordable(value: Any) -> Any:
    """``value`` itself when it encodes, else an encodable copy of it.

    In the copy, texts are normalised by ``text``, containers past ``MAX_RECORDED_DEPTH``
    and objects that cannot be encoded become placeholder texts. It never raises.
    """
    try:
        _strict.encode(value)  # no hook: an object or a non-text key is copied below
    except _ENCODE_ERRORS:
        return _copy(value, 0)
    return value


def _copy(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return text(value)
    if value is None or type(value) in (bool, int, float):
        return value
    if isinstance(value, bool | int | float):
        return value.__index__() if isinstance(value, int) else float(value)
    if depth >= MAX_RECORDED_DEPTH:
        return f"[not recorded: nested deeper than {MAX_RECORDED_DEPTH} levels]"
    if isinstance(value, dict):
        return {_key(k): _copy(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_copy(v, depth + 1) for v in value]
    try:
        builtins = msgspec.to_builtins(value, enc_hook=_placeholder)
    except _ENCODE_ERRORS:
        return _placeholder(value)
    if builtins is value:
        return _placeholder(value)
    return _copy(builtins, depth + 1)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return text(key)
    if isinstance(key, bool | int | float) or key is None:
        return str(key)
    return _placeholder(key)


def _placeholder(obj: Any) -> str:
    return f"<unencodable {type(obj).__name__}>"


# -- the check every store makes before it chains an event -------------------------------

# Names the generated checks use (bound as defaults: local lookups).
_NAMES: dict[str, Any] = {
    "_str": str,
    "_bool": bool,
    "_int": int,
    "_float": float,
    "_seq": (list, tuple),
    "_dict": dict,
    "_inf": math.inf,
}
# Set by the store, never from the event's own values: not checked.
_CHAIN_FIELDS = frozenset({"seq", "prev", "hash"})


def _expr(t: Any, v: str, names: dict[str, Any], depth: int = 0) -> str | None:
    """A Python expression that is True when ``v`` fits msgspec type ``t`` (None: any)."""
    inspect = msgspec.inspect
    if isinstance(t, inspect.AnyType):
        return None
    if isinstance(t, inspect.StrType):
        return f"type({v}) is _str"
    if isinstance(t, inspect.BoolType):
        return f"type({v}) is _bool"
    if isinstance(t, inspect.IntType):
        return f"type({v}) is _int"
    if isinstance(t, inspect.FloatType):
        # Exactly a float: NaN and infinities encode as null, which a float field
        # refuses; an int reads back as a float, so its bytes would not re-encode alike.
        return f"(type({v}) is _float and -_inf < {v} < _inf)"
    if isinstance(t, inspect.NoneType):
        return f"{v} is None"
    if isinstance(t, inspect.DictType):
        # Any key encodes as a string (others through the encoder's hook).
        value = _expr(t.value_type, "_v", names, depth + 1)
        if value is None:
            return f"type({v}) is _dict"
        return f"(type({v}) is _dict and all({value} for _v in {v}.values()))"
    if isinstance(t, inspect.ListType):
        item = _expr(t.item_type, f"_x{depth}", names, depth + 1)
        if item is None:
            return f"type({v}) in _seq"
        return f"(type({v}) in _seq and all({item} for _x{depth} in {v}))"
    if isinstance(t, inspect.StructType):
        name = f"_cls{len(names)}"
        names[name] = t.cls
        parts = [f"type({v}) is {name}"]
        for field in t.fields:
            part = _expr(field.type, f"{v}.{field.name}", names, depth + 1)
            if part is not None:
                parts.append(part)
        return "(" + " and ".join(parts) + ")"
    if isinstance(t, inspect.UnionType):
        options = [_expr(option, v, names, depth) for option in t.types]
        if any(option is None for option in options):
            return None
        return "(" + " or ".join(options) + ")"  # type: ignore[arg-type]
    raise TypeError(f"no check for field type {t!r}")


def _fields(cls: type[Event]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The names the expressions use, and (field, expression) for each checked field."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    names = dict(_NAMES)
    found = []
    for field in info.fields:
        if field.name in _CHAIN_FIELDS:
            continue
        expr = _expr(field.type, f"e.{field.name}", names)
        if expr is not None:
            found.append((field.name, expr))
    return names, found


def _compile(cls: type[Event]) -> Callable[[Event], bytes]:
    """The class's ``payload``: its check and the encode in one generated function."""
    names, found = _fields(cls)
    body = " and ".join(expr for _, expr in found) or "True"
    names["_encode"] = _encoder.encode
    names["_refused"] = _refused
    namespace: dict[str, Any] = {}
    source = (
        "def payload(e):\n"
        f"    if {body}:\n"
        "        try:\n"
        "            return _encode(e)\n"
        "        except _errors as exc:\n"
        "            _refused(e, exc)\n"
        "    _refused(e, None)\n"
    )
    names["_errors"] = _ENCODE_ERRORS
    exec(source, names, namespace)  # generated once per class
    encode: Callable[[Event], bytes] = namespace["payload"]
    return encode


#: event class -> its generated ``payload`` function (filled on first use)
PAYLOADS: dict[type, Callable[[Event], bytes]] = {}


def _refused(event: Event, exc: BaseException | None) -> NoReturn:
    if exc is None:
        raise UnrecordableEvent(
            f"event {event.type} of call {event.call_id or '-'} was not recorded: "
            f"{_refusal(event)} (it could not be read back)",
            event,
        )
    raise UnrecordableEvent(
        f"event {event.type} of call {event.call_id or '-'} was not recorded: it "
        f"cannot be encoded ({type(exc).__name__}: {exc})",
        event,
    ) from exc


def _refusal(event: Event) -> str:
    """Which field of ``event`` does not fit its type (the slow path, after a failed check)."""
    names, found = _fields(type(event))
    for name, expr in found:
        if not eval(expr, names, {"e": event}):  # the same expressions as the check
            value = getattr(event, name)
            shown = repr(value)
            if len(shown) > 60:
                shown = shown[:57] + "..."
            return f"its field {name} holds {type(value).__name__} {shown}, not its declared type"
    return "a field does not fit its declared type"


def payload(event: Event) -> bytes:
    """The bytes to store for ``event``: checked to decode as it, then encoded.

    Raises ``UnrecordableEvent`` (nothing written) for a field of the wrong type or a
    value that cannot be encoded; the chain fields must be at their defaults.
    """
    encode = PAYLOADS.get(type(event))
    if encode is None:
        encode = PAYLOADS[type(event)] = _compile(type(event))
    return encode(event)


def checked_clock(clock: Callable[[], Any]) -> Callable[[], float]:
    """``clock`` whose readings are always a finite float, as every event's ``ts`` must be.

    An int or a Decimal is converted; NaN, an infinity or a value that is not a number
    raises ``ValueError`` naming it, before the event that would hold it is built (a
    NaN time would be written as null, which no reader takes as a time).
    """

    def now() -> float:
        value = clock()
        if type(value) is float and -math.inf < value < math.inf:
            return value
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = math.nan
        if not (-math.inf < seconds < math.inf) or isinstance(value, bool):
            raise ValueError(f"the clock returned {value!r}, not a finite number of seconds")
        return seconds

    return now


# -- the engine's safety net: an event refused by the ledger is repaired, not lost ------


def repair(event: Event) -> bool:
    """Make every field of ``event`` recordable in place; True when one was changed.

    For what gets past the boundary checks (a metadata dict a hook changed after the
    call's context was built, say): text as ``text``, numbers converted (0 when they
    cannot be), ``Any`` values as ``recordable`` copies, other types rebuilt from their
    recordable JSON form (their default when that fails).
    """
    info = msgspec.inspect.type_info(type(event))
    assert isinstance(info, msgspec.inspect.StructType)
    hints = typing.get_type_hints(type(event))
    changed = False
    for field in info.fields:
        if field.name in _CHAIN_FIELDS:
            continue
        value = getattr(event, field.name)
        default = field.default
        if default is msgspec.NODEFAULT and field.default_factory is not msgspec.NODEFAULT:
            default = field.default_factory()
        fixed = _fitted(field.type, value, default, hints[field.name])
        if fixed is not value:
            setattr(event, field.name, fixed)
            changed = True
    return changed


def _fitted(t: Any, value: Any, default: Any, annotation: Any) -> Any:
    inspect = msgspec.inspect
    if isinstance(t, inspect.StrType):
        if type(value) is str:
            fixed = text(value)
            return value if fixed == value else fixed
        if isinstance(value, str):
            return text(value)
        return "" if value is None else text(repr(value))
    if isinstance(t, inspect.FloatType):
        if type(value) is float and -math.inf < value < math.inf:
            return value
        try:
            number = float(value)
        except (TypeError, ValueError):
            return 0.0
        return number if -math.inf < number < math.inf else 0.0
    if isinstance(t, inspect.IntType):
        return value if type(value) is int else 0
    if isinstance(t, inspect.BoolType):
        return value if type(value) is bool else bool(value)
    if isinstance(t, inspect.AnyType):
        return recordable(value)
    try:
        return msgspec.convert(msgspec.to_builtins(recordable(value), str_keys=True), annotation)
    except Exception:
        return None if default is msgspec.NODEFAULT else default


async def append_repaired(ledger: Any, events: Sequence[Event], refused: UnrecordableEvent) -> None:
    """After ``ledger.append_many(events)`` raised ``refused``: repair the refused event
    and append the batch again (nothing of it was stored), until it is stored; raise
    when an event cannot be repaired."""
    for _ in range(len(events) + 1):
        if not repair(refused.event):
            raise refused
        try:
            await ledger.append_many(events)
        except UnrecordableEvent as again:
            refused = again
            continue
        return
    raise refused
