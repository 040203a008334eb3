"""A hook that turns each call's ledger events into one OpenTelemetry span.

The span is named ``execute_tool {tool}`` and carries the GenAI semantic conventions'
attributes for a tool execution (``gen_ai.operation.name``, ``gen_ai.tool.name``,
``gen_ai.tool.call.id``, ``gen_ai.tool.type``) plus the ledger's own facts: the run id,
the digest of the validated arguments, the effect key and the outcome kind. Every ledger
event of the call becomes a span event, stamped with the event's own ``ts``.

It is built from ``on_event`` alone: that is the one hook method the executor calls for
every call, whatever its outcome (``before_tool`` runs only after validation,
``after_tool`` only for calls that reached the body). The executor dispatches events in
the caller's task, so the span starts under the caller's current span: it nests in the
host's trace (and in the OpenAI Agents SDK's, when the host exports that through
OpenTelemetry).

Only ``opentelemetry-api`` is imported (extra ``otel``): without a configured provider the
API's tracer hands back non-recording spans and the hook keeps nothing per call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from ..engine._replaying import _recorded_error
from ..ledger._events import OUTCOME_TAGS, Event

__all__ = ["OpenTelemetryHook"]

_TRACER_NAME = "agent_adapter"

# Fields a span never shows as attributes: the chain's own bookkeeping, the ids already on
# the span, and values (argument values, results, edits, metadata, free text that may quote
# arguments), which are added only when asked for.
_BASE = frozenset({"seq", "ts", "run_id", "call_id", "tool", "prev", "hash", "malformed"})
_ARGUMENT_FIELDS = frozenset({"args", "edits", "error", "metadata", "data"})
_RESULT_FIELDS = frozenset({"result"})
_NEVER = frozenset({"json_schema", "verdicts", "redact"})

# An open span per (run_id, call_id) waits for its outcome. A call whose outcome never
# reaches the hook (its process is cancelled while the outcome is written) must not hold
# memory forever: past this many open spans the oldest is ended as "unknown".
MAX_OPEN_SPANS = 10_000


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("agent-adapter")
    except Exception:  # run from a source tree, not installed
        return "0"


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode("utf-8", "replace")


class OpenTelemetryHook:
    """One span per call, ``execute_tool {tool}``, with each ledger event as a span event.

    ``tracer_provider`` defaults to the global one (``trace.get_tracer_provider()``, looked
    up at each span through the API's proxy, so a provider set after this hook is built is
    used). Span attributes: ``gen_ai.operation.name = "execute_tool"``,
    ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type = "function"``,
    ``agent_adapter.run_id``, ``agent_adapter.digest`` (of the validated arguments),
    ``agent_adapter.effect_key`` (when the tool has one) and ``agent_adapter.outcome``
    (the outcome tag's last part: ``succeeded``, ``denied``, ...). A call that did not
    succeed (a failure or a refusal: every outcome but ``succeeded`` and ``cached``) gets
    ``error.type`` = its error kind and an error status whose description is that kind.

    Values stay out of the trace unless asked for: ``record_arguments=True`` adds the
    arguments as recorded (``gen_ai.tool.call.arguments``, JSON) and the argument-bearing
    fields of span events (edits, metadata, error messages, which may quote arguments);
    ``record_results=True`` adds the result (``gen_ai.tool.call.result``). Both read the
    ledger's events, so the tool's redaction always applies: a redacted argument is
    ``"[redacted]"`` here too, a ``redact_result`` result only its digest.
    """

    name = "opentelemetry"

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        record_arguments: bool = False,
        record_results: bool = False,
    ) -> None:
        self._tracer = trace.get_tracer(_TRACER_NAME, _version(), tracer_provider=tracer_provider)
        self._open: dict[tuple[str, str], Span] = {}
        self._skip = _BASE | _NEVER
        if not record_arguments:
            self._skip |= _ARGUMENT_FIELDS
        if not record_results:
            self._skip |= _RESULT_FIELDS
        self._record_arguments = record_arguments
        # Which fields of each event type become span-event attributes: computed once
        # per type, not per event.
        self._fields: dict[type[Event], tuple[str, ...]] = {}

    def on_event(self, event: Event) -> None:
        """Start the call's span at ``call.requested``, add each event, end at its outcome."""
        key = (event.run_id, event.call_id)
        span = self._open.get(key)
        tag = event.type
        if span is None:
            if tag == "call.requested":
                self._start(key, event)
            elif tag == "call.replayed" or tag in OUTCOME_TAGS:
                # A call whose start this hook did not see: a replay (step 0 records only
                # call.replayed), or a hook added while the call was in flight.
                self._alone(event)
            return
        self._add(span, event)
        if tag in OUTCOME_TAGS:
            del self._open[key]
            self._finish(span, event)

    # -- spans --------------------------------------------------------------------------

    def _begin(self, event: Event) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.tool,
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.type": "function",
            "agent_adapter.run_id": event.run_id,
        }
        return self._tracer.start_span(
            f"execute_tool {event.tool}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(event.ts),
        )

    def _start(self, key: tuple[str, str], event: Event) -> None:
        span = self._begin(event)
        if not span.is_recording():
            return  # no provider (or not sampled): nothing kept, nothing to add later
        if self._record_arguments:
            span.set_attribute("gen_ai.tool.call.arguments", _json(getattr(event, "args", None)))
        self._add(span, event)
        opened = self._open
        opened[key] = span
        if len(opened) > MAX_OPEN_SPANS:
            oldest = next(iter(opened))
            stale = opened.pop(oldest)
            stale.set_attribute("agent_adapter.outcome", "unknown")
            stale.end()

    def _alone(self, event: Event) -> None:
        span = self._begin(event)
        if not span.is_recording():
            return
        self._add(span, event)
        self._finish(span, event)

    def _add(self, span: Span, event: Event) -> None:
        tag = event.type
        setter = _SPAN_FACTS.get(tag)
        if setter is not None:
            setter(span, event)
        cls = type(event)
        names = self._fields.get(cls)
        if names is None:
            names = tuple(f for f in cls.__struct_fields__ if f not in self._skip)
            self._fields[cls] = names
        attributes: dict[str, Any] = {"agent_adapter.seq": event.seq}
        for name in names:
            value = getattr(event, name)
            if isinstance(value, str):
                if value:  # an empty text is a field left at its default
                    attributes[name] = value
            elif isinstance(value, bool | int | float):
                attributes[name] = value
            elif value:  # (an empty list or mapping is a field left at its default)
                attributes[name] = _json(value)
        span.add_event(tag, attributes, timestamp=_ns(event.ts))

    def _finish(self, span: Span, event: Event) -> None:
        kind = event.type.rpartition(".")[2]
        span.set_attribute("agent_adapter.outcome", kind)
        if kind == "replayed":
            pass  # a repeat answered from the ledger: the recorded outcome stands
        elif kind not in ("succeeded", "cached"):
            error_kind = _error_kind(event)
            span.set_attribute("error.type", error_kind)
            span.set_status(Status(StatusCode.ERROR, error_kind))
        elif kind == "succeeded" and self._skip.isdisjoint(_RESULT_FIELDS):
            span.set_attribute("gen_ai.tool.call.result", _json(getattr(event, "result", None)))
        span.end(end_time=_ns(event.ts))


def _ns(ts: float) -> int:
    """A ledger timestamp (seconds, as ``time.time``) in the nanoseconds spans take."""
    return int(ts * 1e9)


def _error_kind(outcome: Event) -> str:
    """The outcome's error kind (``tool-failed``, ``approval-denied``, ...), by the one rule
    replay uses, so that a new kind needs no change here; a cancelled call is
    ``cancelled`` (it has no error of ours: the caller's task was cancelled)."""
    recorded = getattr(outcome, "error_kind", "")
    if recorded:
        return str(recorded)
    if outcome.type == "call.cancelled":
        return "cancelled"
    return str(getattr(_recorded_error(outcome), "kind", "tool-failed"))


def _set_digest(span: Span, event: Event) -> None:
    span.set_attribute("agent_adapter.digest", getattr(event, "digest", ""))


def _set_key(span: Span, event: Event) -> None:
    key = getattr(event, "key", "") or getattr(event, "effect_key", "")
    if key:
        span.set_attribute("agent_adapter.effect_key", key)


# The span-level facts some events carry, set as the events pass.
_SPAN_FACTS: dict[str, Callable[[Span, Event], None]] = {
    "call.validated": _set_digest,
    "call.replayed": _set_digest,
    "effect.claimed": _set_key,
    "call.duplicate": _set_key,
    "call.ambiguous": _set_key,
}
