"""Per-call pipeline state and small helpers shared by the executor's steps."""

from __future__ import annotations

import inspect
import itertools
import os
from collections.abc import Mapping
from hashlib import sha256
from typing import Any

import msgspec

from ..errors import ToolArgsInvalid
from ..ledger import Event
from ..ledger import recordable_text as text
from ._context import Call, CallContext
from ._digest import canonical
from ._redaction import _fields, redacted, values_at
from ._spec import _TEXT, MAX_ARGS_BYTES, ToolSpec

__all__ = ["new_id", "requested_args"]

# Tuples, not ``A | B`` unions: a union is built anew each time the expression runs, and
# requested_args runs on every call.
_BINARY = (bytes, bytearray, memoryview)

_ID_PREFIX = os.urandom(6).hex()
_ids = itertools.count(1)


def new_id(kind: str = "id") -> str:
    """A fresh id like ``call_<process prefix><counter>``."""
    # A process-random prefix and a counter: unique across processes, and ~10x cheaper
    # than uuid4 on the per-call path.
    return f"{kind}_{_ID_PREFIX}{next(_ids):x}"


def _name_of(obj: Any) -> str:
    """How a hook or guard is named in events: its ``name``, ``__name__`` or class name."""
    return text(
        str(getattr(obj, "name", None) or getattr(obj, "__name__", None) or type(obj).__name__)
    )


async def _maybe_await(value: Any) -> Any:
    """``value``, awaited when it is awaitable (sync or async hooks, guards, rules)."""
    if inspect.isawaitable(value):
        return await value
    return value


def _validated(spec: ToolSpec, args: Any) -> tuple[dict[str, Any], str]:
    """Validate ``args`` for ``spec`` and digest them (the digest is ``digest(validated)``).

    Raises ToolArgsInvalid also for values JSON cannot hold (a dict can carry any Python
    object) and for a dict whose canonical form is over the size limit (text is measured
    before it is parsed, in ``validate``).
    """
    validated = spec.validate(args)
    try:
        data = canonical(validated)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise ToolArgsInvalid(f"arguments for {spec.name} are not JSON values: {exc}") from None
    # Text first: an isinstance against the Mapping ABC costs ~250 ns for a str.
    if not isinstance(args, _TEXT) and isinstance(args, Mapping):
        if len(data) > MAX_ARGS_BYTES:
            raise ToolArgsInvalid(
                f"arguments for {spec.name} are {len(data)} bytes as JSON, over the "
                f"{MAX_ARGS_BYTES} byte limit"
            )
        # A caller's dict may share nested objects with what validation returns; the call
        # gets its own copy, decoded from the digested bytes, so nobody holding the
        # caller's objects can change what runs under the approved digest. (Text from a
        # model decodes into fresh objects already.)
        if spec.args_type is not None:
            validated = msgspec.structs.asdict(msgspec.json.decode(data, type=spec.args_type))
        else:
            validated = msgspec.json.decode(data)
    return validated, sha256(data).hexdigest()


def _secrets(value: Any) -> list[str]:
    """The texts a redacted value can appear as in a message: str and repr of each leaf
    (through Structs and dataclasses too), and the JSON text of other objects (a
    datetime's ISO form, bytes as base64)."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in _secrets(v)] + [repr(value)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _secrets(v)] + [repr(value)]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, str | int | float):
        return [repr(value), str(value)]
    fields = _fields(value)
    if fields is not value:
        return [*_secrets(fields), repr(value), str(value)]
    shown = [repr(value), str(value)]
    try:
        as_json = msgspec.to_builtins(value)
    except (TypeError, ValueError):
        return shown
    if isinstance(value, bytes | bytearray | memoryview):
        shown.append(bytes(value).decode("utf-8", "replace"))
    isoformat = getattr(value, "isoformat", None)  # dates and times: 2031-05-06T07:08:00+00:00
    if callable(isoformat):
        shown.append(str(isoformat()))
    return [*shown, str(as_json)]


def _scrub(message: str, run: _Run) -> str:
    """``message`` with the values of the spec's redacted arguments replaced, for the ledger.

    Error messages (a tool's exception, a guard's reason, a hook's failure) often quote
    the value that caused them, as ``str`` or ``repr``, whole or a part of a container;
    a redacted value must not reach an event that way. Longer texts go first, so a
    value's repr is replaced before its bare str. The result is text every ledger can
    store (``_recordable.text``).
    """
    return _scrubbed(message, _shown_secrets(run))


def _shown_secrets(run: _Run) -> list[str]:
    """The texts the call's redacted argument values can appear as, longest first."""
    names = run.spec.redact
    call = run.call
    if not names or call is None:
        return []
    found = {t for value in values_at(call.args, names) for t in _secrets(value) if t}
    return sorted(found, key=len, reverse=True)


def _scrubbed(message: str, secrets: list[str]) -> str:
    """``message`` with each of ``secrets`` (longest first) replaced, as storable text."""
    for shown in secrets:
        message = message.replace(shown, "[redacted]")
    return text(message)


class _Stop(Exception):
    """Internal: end the call with ``outcome`` and raise ``error`` to the caller."""

    def __init__(self, outcome: Event, error: BaseException) -> None:
        self.outcome = outcome
        self.error = error


class _Run:
    """The mutable state of one call on its way through the pipeline."""

    __slots__ = (
        "buffer",
        "call",
        "count_durable",
        "ctx",
        "ended",
        "exposed",
        "key",
        "pipe",
        "reached_body",
        "spec",
        "started",
        "t0",
    )

    def __init__(self, spec: ToolSpec, ctx: CallContext, t0: float, pipe: Any = None) -> None:
        self.spec = spec
        #: the executor's Pipeline (what ``call.exchanged`` is appended through); None
        #: for a run built outside ``run_spec`` (a refusal, a benchmark's copy)
        self.pipe = pipe
        self.ctx = ctx
        self.key = (ctx.run_id, ctx.call_id)
        self.t0 = t0
        self.buffer: list[Event] = []
        self.call: Call | None = None
        self.started = False
        self.reached_body = False
        # Set when user code (a hook, guard, confirm rule or port) saw the arguments: they
        # are checked against their digest again right before the body runs.
        self.exposed = False
        # Set once an event that counted the call against its run limits is durable
        # (approval.requested before a port is asked): a later failed write keeps it.
        self.count_durable = False
        # Set once the outcome is emitted: a cancel that lands later (in an after_tool
        # hook, or while the outcome is being written) must not add a second outcome.
        self.ended = False


def requested_args(spec: ToolSpec, args: Any) -> Any:
    """What ``call.requested`` records of ``args``: redacted, and never a secret in text."""
    # Raw text is recorded as given unless it names redacted values: then it is
    # parsed, and text that does not parse is withheld rather than leak a secret.
    # Text over the size limit is never parsed nor stored (validation refuses it).
    # A str is measured in UTF-8 bytes (as validation measures it), only when its
    # length in characters says it may be over: up to 4 bytes per character.
    if isinstance(args, _TEXT) and len(args) > MAX_ARGS_BYTES // 4:
        size = len(args.encode("utf-8", "replace")) if isinstance(args, str) else len(args)
        if size > MAX_ARGS_BYTES:
            return f"[withheld: {size} bytes, over the size limit]"
    if type(args) is not dict and not isinstance(args, _TEXT):
        # A mapping that is not a dict (recorded as its items), or an object given as
        # arguments (validation refuses it): as its JSON form, so that redaction
        # applies to its fields too and nothing is recorded as a placeholder.
        try:
            args = dict(args) if isinstance(args, Mapping) else msgspec.to_builtins(args)
        except (TypeError, ValueError, OverflowError, RecursionError):
            return f"[not recorded: arguments of type {type(args).__name__}]"
    if isinstance(args, dict) or not spec.redact:
        if isinstance(args, _BINARY):
            return bytes(args).decode("utf-8", "replace")
        if isinstance(args, str) and not args.isascii():
            return text(args)  # (a lone surrogate: recorded as its escape)
        return redacted(args, spec.redact)
    if not isinstance(args, _TEXT):
        # Not an object (a list, a number): no field can be told apart from another.
        return "[redacted: arguments that are not an object]"
    try:
        return redacted(msgspec.json.decode(args), spec.redact)
    except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
        # (Nesting too deep, or a lone surrogate: validation refuses the text too.)
        return "[redacted: unparsable arguments]"
