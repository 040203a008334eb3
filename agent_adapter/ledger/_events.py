"""Ledger events: msgspec Structs in one tagged union with permanent dotted tags.

Every event carries the store-assigned ``seq``, the ``ts`` of the executor's clock, the
call's ids and tool, and the chain fields ``prev`` / ``hash``. The tags are the public,
permanent names (DESIGN.md, "Names and shapes"); new fields always get defaults so that
older ledgers keep decoding, and fields this version does not know are ignored on read.
"""

from __future__ import annotations

import re
from typing import Any, Union

import msgspec

__all__ = [
    "EVENT_TAGS",
    "OUTCOME_TAGS",
    "ApprovalAnswered",
    "ApprovalConsumed",
    "ApprovalDeferred",
    "ApprovalGranted",
    "ApprovalRejected",
    "ApprovalRequested",
    "CallAmbiguous",
    "CallBlocked",
    "CallCached",
    "CallCancelled",
    "CallDenied",
    "CallDuplicate",
    "CallExchanged",
    "CallFailed",
    "CallInvalid",
    "CallLimited",
    "CallPending",
    "CallReplayed",
    "CallRequested",
    "CallStarted",
    "CallSucceeded",
    "CallTimedOut",
    "CallValidated",
    "EffectClaimed",
    "EffectRenewed",
    "EffectResolved",
    "Event",
    "GuardChecked",
    "GuardVerdict",
    "HookFailed",
    "UnknownEvent",
    "decode_event",
    "encode_event",
]


class Event(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="type"):
    """Fields every event has. ``seq``, ``prev`` and ``hash`` are set by the ledger."""

    seq: int = 0
    ts: float = 0.0
    run_id: str = ""
    call_id: str = ""
    tool: str = ""
    prev: str = ""
    hash: str = ""
    #: Set only when reading: why the stored record did not fit its type (the fields
    #: named here were read as their defaults). Empty for every record written by this
    #: version, which refuses such events (see ``_recordable``).
    malformed: str = ""

    @property
    def type(self) -> str:
        """The event's dotted tag, e.g. ``"call.requested"``."""
        return type(self).__struct_config__.tag  # type: ignore[return-value]

    @property
    def is_outcome(self) -> bool:
        """True for the call's terminal event (exactly one per call)."""
        return False


class _Outcome(Event, kw_only=True, omit_defaults=True):
    """Base of the terminal events; ``duration_ms`` is from ``call.requested``."""

    duration_ms: float = 0.0

    @property
    def is_outcome(self) -> bool:
        return True


# -- records --------------------------------------------------------------------------


class CallRequested(Event, kw_only=True, omit_defaults=True, tag="call.requested"):
    """A call entered the pipeline. ``args`` are as given, with redacted names replaced."""

    args: Any = None
    metadata: dict[str, Any] = {}


class CallValidated(Event, kw_only=True, omit_defaults=True, tag="call.validated"):
    """The arguments validated; ``digest`` (of the arguments as requested) binds the call."""

    digest: str = ""


class GuardVerdict(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One guard's verdict: ``ok`` False blocks the call with ``reason``."""

    name: str
    ok: bool
    reason: str = ""


class GuardChecked(Event, kw_only=True, omit_defaults=True, tag="guard.checked"):
    """Guards ran: ``stage`` is ``"input"`` or ``"output"``."""

    stage: str = "input"
    verdicts: list[GuardVerdict] = []


class ApprovalRequested(Event, kw_only=True, omit_defaults=True, tag="approval.requested"):
    """The confirm rule asked for approval of the arguments with ``digest``."""

    request_id: str = ""
    digest: str = ""


class ApprovalGranted(Event, kw_only=True, omit_defaults=True, tag="approval.granted"):
    """Approved by ``reviewer`` through ``source`` (``"context"`` or ``"port"``) for ``digest``.

    With edits, ``digest`` is that of the edited arguments: the only ones that may run.
    """

    request_id: str = ""
    reviewer: str = ""
    source: str = ""
    digest: str = ""
    reason: str = ""
    edited: bool = False


class ApprovalRejected(Event, kw_only=True, omit_defaults=True, tag="approval.denied"):
    """Refused by ``reviewer`` through ``source``."""

    request_id: str = ""
    reviewer: str = ""
    source: str = ""
    digest: str = ""
    reason: str = ""


class ApprovalDeferred(Event, kw_only=True, omit_defaults=True, tag="approval.pending"):
    """A deferred port holds the request for out-of-band review (written once per request).

    ``redact``: the tool's redaction paths (``args`` holds ``"[redacted]"`` there); an
    answer's edits may not put a value at them. ``json_schema``: the tool's, so that an
    answer's edits are checked before they are recorded (None in requests written before
    it was recorded: the executor checks the edits when the call runs). ``effect_key``
    and ``effect_state`` (``"claimed"``, ``"committed"``, ``"ambiguous"``; ``""`` when
    free or no key) say, as the executor knew it when asking, whether the call could run
    at all, and ``effect_by_run_id`` / ``effect_by_call_id`` name the call holding the key.
    ``description``: what the tool does (its description), so that a reviewer reads it
    without the registry (``""`` in requests written before it was recorded, or for a
    tool without one).
    """

    request_id: str = ""
    digest: str = ""
    args: Any = None
    metadata: dict[str, Any] = {}
    redact: list[str] = []
    json_schema: dict[str, Any] | None = None
    effect_key: str = ""
    effect_state: str = ""
    effect_by_run_id: str = ""
    effect_by_call_id: str = ""
    description: str = ""


class ApprovalAnswered(Event, kw_only=True, omit_defaults=True, tag="approval.answered"):
    """A reviewer answered a deferred request; ``edits`` replace the arguments when given."""

    request_id: str = ""
    approved: bool = False
    reviewer: str = ""
    reason: str = ""
    edits: dict[str, Any] | None = None


class ApprovalConsumed(Event, kw_only=True, omit_defaults=True, tag="approval.consumed"):
    """A deferred decision was used by the call with these ids: one decision, one use."""

    request_id: str = ""


class EffectClaimed(Event, kw_only=True, omit_defaults=True, tag="effect.claimed"):
    """The call claimed the effect ``key`` for arguments with ``digest``.

    The holder (``holder``: the executor's id, ``pid`` started at ``pid_start`` on
    ``host``) keeps the key *in
    flight* until ``lease_until`` (its clock), renewed by ``effect.renewed`` while the
    body runs. A claim with no lease (``lease_until`` 0: written by an older version)
    has no holder to ask: once replayed, its key is ambiguous as it always was.
    """

    key: str = ""
    digest: str = ""
    holder: str = ""
    pid: int = 0
    host: str = ""
    lease_until: float = 0.0
    #: the holder process's start time (Linux: clock ticks since boot, /proc/<pid>/stat
    #: field 22; 0: not known, or an older version's claim), so that a reader on its host
    #: tells the holder's pid from a later process that reuses it
    pid_start: int = 0


class EffectRenewed(Event, kw_only=True, omit_defaults=True, tag="effect.renewed"):
    """The holder of ``key`` is alive and its body still running: the lease now lasts
    until ``lease_until`` (the holder's clock)."""

    key: str = ""
    lease_until: float = 0.0


class EffectResolved(Event, kw_only=True, omit_defaults=True, tag="effect.resolved"):
    """An operator resolved an ambiguous key: ``outcome`` is ``"committed"`` or ``"failed"``."""

    key: str = ""
    outcome: str = ""
    reviewer: str = ""
    reason: str = ""
    #: True when the reviewer overrode the refusal of a key whose holder's lease was
    #: live (``force=True``): the audit reports such a resolution.
    forced: bool = False


class CallStarted(Event, kw_only=True, omit_defaults=True, tag="call.started"):
    """The body is about to run with arguments of ``digest``; durable before it does."""

    digest: str = ""
    effect_key: str = ""


class CallExchanged(Event, kw_only=True, omit_defaults=True, tag="call.exchanged"):
    """The running body exchanged ``request`` and ``response`` with someone outside,
    mid-call (between ``call.started`` and the outcome; never an outcome itself).

    ``method`` names the exchange (an MCP upstream's ``"elicitation/create"`` or
    ``"sampling/createMessage"`` relayed to the client, say); ``error`` is set instead of
    ``response`` when the question was refused or failed. ``peer`` is who was asked
    (the client connection's identity, when known). With the spec's ``redact_result``
    the values are not stored: ``request_digest`` / ``response_digest`` are their digests
    and ``redacted`` is True; values of redacted arguments are scrubbed from both.
    """

    method: str = ""
    request: Any = None
    response: Any = None
    error: str = ""
    peer: str = ""
    request_digest: str = ""
    response_digest: str = ""
    redacted: bool = False


class CallReplayed(Event, kw_only=True, omit_defaults=True, tag="call.replayed"):
    """A repeat of a finished call returned its recorded outcome (``outcome_seq``)."""

    digest: str = ""
    outcome_seq: int = 0


class HookFailed(Event, kw_only=True, omit_defaults=True, tag="hook.failed"):
    """An observing hook raised; recorded, never the call's outcome."""

    hook: str = ""
    stage: str = ""
    error: str = ""


class UnknownEvent(Event, kw_only=True, omit_defaults=True, tag="unknown"):
    """An event of a type this version does not know (written by a newer one)."""

    original_type: str = ""
    data: dict[str, Any] = {}


# -- outcomes (exactly one per call) ---------------------------------------------------


class CallSucceeded(_Outcome, kw_only=True, omit_defaults=True, tag="call.succeeded"):
    """The body returned; ``result`` is absent when the spec has ``redact_result``."""

    result: Any = None
    result_digest: str = ""
    redacted: bool = False


class CallFailed(_Outcome, kw_only=True, omit_defaults=True, tag="call.failed"):
    """The body raised: ``error_kind`` ``tool-error`` (on purpose) or ``tool-failed``."""

    error_kind: str = ""
    error: str = ""
    #: True when the call had passed the run-limit check with no counting event since.
    counted: bool = False
    #: False when the call failed after ``call.started`` but before its body ran (its
    #: arguments were changed in place): nothing can have happened, the key is free.
    ran: bool = True


class CallTimedOut(_Outcome, kw_only=True, omit_defaults=True, tag="call.timed_out"):
    """The body exceeded ``timeout_s``."""

    timeout_s: float = 0.0


class CallCancelled(_Outcome, kw_only=True, omit_defaults=True, tag="call.cancelled"):
    """The calling task was cancelled; ``started`` tells whether the body had begun."""

    started: bool = False
    #: True when the call had passed the run-limit check (it counts against its run).
    counted: bool = False


class CallInvalid(_Outcome, kw_only=True, omit_defaults=True, tag="call.invalid"):
    """The arguments (or an edit) did not validate."""

    error: str = ""


class CallBlocked(_Outcome, kw_only=True, omit_defaults=True, tag="call.blocked"):
    """A hook or guard stopped the call (``stage``: ``hook``, ``input`` or ``output``)."""

    stage: str = ""
    by: str = ""
    reason: str = ""
    error_kind: str = "guardrail-blocked"


class CallLimited(_Outcome, kw_only=True, omit_defaults=True, tag="call.limited"):
    """A run limit refused the call."""

    reason: str = ""


class CallDenied(_Outcome, kw_only=True, omit_defaults=True, tag="call.denied"):
    """Approval was refused (or nobody could approve)."""

    reviewer: str = ""
    reason: str = ""


class CallPending(_Outcome, kw_only=True, omit_defaults=True, tag="call.pending"):
    """A deferred approval is open; a later call with the same arguments gets the decision."""

    request_id: str = ""


class CallCached(_Outcome, kw_only=True, omit_defaults=True, tag="call.cached"):
    """Answered from the cache: ``result`` as cached, for arguments with ``digest``."""

    result: Any = None
    digest: str = ""


class CallDuplicate(_Outcome, kw_only=True, omit_defaults=True, tag="call.duplicate"):
    """The effect key was already committed by (``by_run_id``, ``by_call_id``)."""

    key: str = ""
    by_run_id: str = ""
    by_call_id: str = ""
    same_args: bool = False


class CallAmbiguous(_Outcome, kw_only=True, omit_defaults=True, tag="call.ambiguous"):
    """The effect key (or this very call) has a start with no known outcome.

    ``in_flight``: the key's holder was alive (its lease live), so the refusal means
    "retry later" (``EffectInFlight``), not "resolve it".
    """

    key: str = ""
    reason: str = ""
    in_flight: bool = False


_ALL = (
    CallRequested,
    CallValidated,
    GuardChecked,
    ApprovalRequested,
    ApprovalGranted,
    ApprovalRejected,
    ApprovalDeferred,
    ApprovalAnswered,
    ApprovalConsumed,
    EffectClaimed,
    EffectRenewed,
    EffectResolved,
    CallStarted,
    CallExchanged,
    CallReplayed,
    HookFailed,
    UnknownEvent,
    CallSucceeded,
    CallFailed,
    CallTimedOut,
    CallCancelled,
    CallInvalid,
    CallBlocked,
    CallLimited,
    CallDenied,
    CallPending,
    CallCached,
    CallDuplicate,
    CallAmbiguous,
)

AnyEvent = Union[_ALL]  # type: ignore[valid-type]  # noqa: UP007

#: Tags of the terminal events.
OUTCOME_TAGS: frozenset[str] = frozenset(
    str(cls.__struct_config__.tag) for cls in _ALL if issubclass(cls, _Outcome)
)

#: Every event tag this version knows. An event of a newer version's type reads back as
#: ``unknown`` (``UnknownEvent``), so these are all the types a read can yield.
EVENT_TAGS: frozenset[str] = frozenset(str(cls.__struct_config__.tag) for cls in _ALL)


def _unencodable(obj: Any) -> str:
    # A value that cannot be encoded (in arguments a caller passed) is recorded by its
    # type rather than losing the whole event; called only for such values.
    return f"<unencodable {type(obj).__name__}>"


_encoder = msgspec.json.Encoder(enc_hook=_unencodable)
_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(AnyEvent)


def encode_event(event: Event) -> bytes:
    """Encode an event to its JSON bytes (fields at their defaults are left out)."""
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> Event:
    """Decode one stored event; it never raises, so one bad record cannot make a ledger
    unreadable.

    A type this version does not know becomes ``UnknownEvent``. A record of a known type
    whose fields do not fit it (a ``null`` where text is declared, written by an older
    version or by hand) is read with those fields at their defaults and ``malformed``
    saying which; a payload that is not a JSON object becomes an ``UnknownEvent`` with
    ``malformed`` set. The audit reports both.
    """
    try:
        return _decoder.decode(data)  # type: ignore[no-any-return]
    except msgspec.ValidationError as exc:
        error = exc
    except msgspec.DecodeError as exc:
        return UnknownEvent(malformed=f"the payload is not JSON: {exc}")
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:  # valid JSON msgspec cannot hold (1e900, say)
        return UnknownEvent(malformed=f"the payload cannot be read: {exc}")
    if not isinstance(raw, dict):
        return UnknownEvent(malformed=f"the payload is not an event: {error}")
    base = {k: raw[k] for k in _BASE if k in raw}
    tag = raw.get("type")
    if not isinstance(tag, str) or tag not in _CLASSES:
        if isinstance(tag, str):
            extra = {k: v for k, v in raw.items() if k not in _BASE and k != "type"}
            known = {"original_type": tag, "data": extra}
            return _lenient(UnknownEvent, {**base, **known}, [])
        return _lenient(UnknownEvent, base, [f"the payload has no event type ({error})"])
    fields = {k: v for k, v in raw.items() if k != "type"}
    return _lenient(_CLASSES[tag], fields, [])


_BASE = ("seq", "ts", "run_id", "call_id", "tool", "prev", "hash")
_CLASSES: dict[str, type[Event]] = {str(cls.__struct_config__.tag): cls for cls in _ALL}
_AT = re.compile(r" - at `\$\.([^`.\[]+)")


def _lenient(cls: type[Event], fields: dict[str, Any], notes: list[str]) -> Event:
    """``cls`` from ``fields``, dropping each field that does not fit (noted) until it does."""
    fields.pop("malformed", None)
    while True:
        try:
            event = msgspec.convert(fields, cls)
        except msgspec.ValidationError as exc:
            at = _AT.search(str(exc))
            if at is not None and at.group(1) in fields:
                notes.append(f"{at.group(1)} was read as its default ({exc})")
                del fields[at.group(1)]
            elif fields:
                notes.append(f"the record was read as an empty event ({exc})")
                fields = {}
            else:  # pragma: no cover - every event field has a default
                raise
            continue
        if notes:
            event.malformed = "; ".join(notes)
        return event
