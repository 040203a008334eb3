"""A hook that turns each call's ledger events into one OpenTelemetry span.

The span is named ``execute_tool {tool}`` and carries the GenAI semantic conventions'
attributes for a tool execution (``gen_ai.operation.name``, ``gen_ai.tool.name``,
``gen_ai.tool.call.id``, ``gen_ai.tool.type``) plus the ledger's own facts: the run id,
the digest of the validated arguments, the effect key and the outcome kind. Every ledger
event of the call becomes a span event, stamped with the event's own ``ts``.

It is built from ``on_event``: that is the one hook method the executor calls for every
call, whatever its outcome (``before_tool`` runs only after validation, ``after_tool``
only for calls that reached the body). The executor dispatches events in the caller's
task, so the span starts under the caller's current span: it nests in the host's trace
(and in the OpenAI Agents SDK's, when the host exports that through OpenTelemetry). Its
``around_body`` makes the call's span current while the tool body runs, so that a span
the body opens (an HTTP client's, a database driver's) nests under ``execute_tool``.

Only ``opentelemetry-api`` is imported (extra ``otel``): without a configured provider the
API's tracer hands back non-recording spans and the hook keeps nothing per call.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import msgspec
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from ..engine import Call, recorded_error
from ..ledger import OUTCOME_TAGS, Event

__all__ = ["OpenTelemetryHook"]

_TRACER_NAME = "agent_adapter"

# Fields a span never shows as attributes: the chain's own bookkeeping, the ids already on
# the span, and values (argument values, results, edits, metadata, free text that may quote
# arguments), which are added only when asked for.
_BASE = frozenset({"seq", "ts", "run_id", "call_id", "tool", "prev", "hash", "malformed"})
# What a body asked mid-call (call.exchanged's request) often quotes its arguments, and
# the answer is a value it got: each stays out unless its kind of value is asked for.
_ARGUMENT_FIELDS = frozenset({"args", "edits", "error", "metadata", "data", "request"})
_RESULT_FIELDS = frozenset({"result", "response"})
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
        # The global provider is looked up at each call (one may be set later); an
        # explicit no-op provider can never record, which is known now.
        self._global = tracer_provider is None
        self._off = isinstance(tracer_provider, trace.NoOpTracerProvider)
        # A provider named in the environment is loaded by the API on first use.
        self._named = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
        # Per open call: its span and the digest and effect key already on it (span
        # events leave out what the span says).
        self._open: dict[tuple[str, str], _Open] = {}
        self._skip = _BASE | _NEVER
        if not record_arguments:
            self._skip |= _ARGUMENT_FIELDS
        if not record_results:
            self._skip |= _RESULT_FIELDS
        self._record_arguments = record_arguments
        self._record_results = record_results
        # What each event type does to a span: computed once per type, not per event.
        self._plans: dict[type[Event], _Plan] = {}

    def on_event(self, event: Event) -> None:
        """Start the call's span at ``call.requested``, add each event, end at its outcome."""
        cls = type(event)
        plan = self._plans.get(cls)
        if plan is None:
            plan = self._plan(cls)
        # (No open span at all, the case without a provider: no key is even built.)
        held = self._open.get((event.run_id, event.call_id)) if self._open else None
        if held is None:
            # Only a call's first event opens a span: call.requested, or call.replayed
            # for a repeat (step 0 records nothing else). Any other event of a call
            # without a span belongs to one not recorded (no provider then, or not
            # sampled): a lone span for its outcome would be a call cut in half.
            if plan.role is _START or plan.role is _ALONE:
                if self._may_record():
                    if plan.role is _START:
                        self._start(event, plan)
                    else:
                        self._alone(event, plan)
            return
        self._add(held, event, plan)
        if plan.role is _END:
            del self._open[(event.run_id, event.call_id)]
            self._finish(held.span, event)

    async def around_body(self, call: Call, next: Callable[[], Awaitable[Any]]) -> Any:
        """Run the body with the call's span as the current span (its spans nest in it).

        A call with no open span (not sampled, no provider, or a ``durability="outcome"``
        call, whose events reach hooks only with its outcome) runs as it is."""
        held = self._open.get((call.ctx.run_id, call.ctx.call_id)) if self._open else None
        if held is None:
            return await next()
        with trace.use_span(
            held.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            return await next()

    # -- spans --------------------------------------------------------------------------

    def _may_record(self) -> bool:
        """False when no span can record: the API's default (no provider set anywhere)
        or an explicit no-op provider. Checked before a span is made, so that a call
        costs a dictionary lookup per event and this check, nothing more."""
        if self._off:
            return False
        if self._global and not self._named:
            # The API's own global, read directly: ``get_tracer_provider()`` looks the
            # environment up at each call (~3 us on a loaded machine, as much as the
            # rest of the hook). None: no provider was ever set, so the API's tracers
            # make only non-recording spans. (Missing in some future API: spans are
            # made and asked, which is slower, never wrong.)
            return getattr(trace, "_TRACER_PROVIDER", True) is not None
        return True

    def _plan(self, cls: type[Event]) -> _Plan:
        tag = str(cls.__struct_config__.tag)
        if tag == "call.requested":
            role = _START
        elif tag in OUTCOME_TAGS:
            role = _END
        elif tag == "call.replayed":
            role = _ALONE
        else:
            role = _OTHER
        fields = tuple(f for f in cls.__struct_fields__ if f not in self._skip)
        plan = _Plan(role=role, tag=tag, fields=fields, facts=_SPAN_FACTS.get(tag))
        self._plans[cls] = plan
        return plan

    def _begin(self, event: Event) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.tool,
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.type": "function",
            "agent_adapter.run_id": event.run_id,
        }
        if self._record_arguments and hasattr(event, "args"):
            attributes["gen_ai.tool.call.arguments"] = _json(event.args)
        return self._tracer.start_span(
            f"execute_tool {event.tool}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(event.ts),
        )

    def _start(self, event: Event, plan: _Plan) -> None:
        span = self._begin(event)
        if not span.is_recording():
            return  # not sampled: nothing kept, nothing to add later
        held = _Open(span)
        self._add(held, event, plan)
        opened = self._open
        opened[(event.run_id, event.call_id)] = held
        if len(opened) > MAX_OPEN_SPANS:
            oldest = next(iter(opened))
            stale = opened.pop(oldest).span
            stale.set_attribute("agent_adapter.outcome", "unknown")
            stale.end()

    def _alone(self, event: Event, plan: _Plan) -> None:
        span = self._begin(event)
        if not span.is_recording():
            return
        self._add(_Open(span), event, plan)
        self._finish(span, event)

    def _add(self, held: _Open, event: Event, plan: _Plan) -> None:
        if plan.facts is not None:
            plan.facts(held, event)
        attributes: dict[str, Any] = {"agent_adapter.seq": event.seq}
        said = (held.digest, held.key)
        for name in plan.fields:
            value = getattr(event, name)
            if isinstance(value, str):
                # An empty text is a field left at its default; the call's digest and
                # effect key are on the span already.
                if value and value not in said:
                    attributes[name] = value
            elif isinstance(value, bool | int | float):
                attributes[name] = value
            elif value:  # (an empty list or mapping is a field left at its default)
                attributes[name] = _json(value)
        held.span.add_event(plan.tag, attributes, timestamp=_ns(event.ts))

    def _finish(self, span: Span, event: Event) -> None:
        kind = event.type.rpartition(".")[2]
        span.set_attribute("agent_adapter.outcome", kind)
        if kind == "replayed":
            pass  # a repeat answered from the ledger: the recorded outcome stands
        elif kind not in ("succeeded", "cached"):
            error_kind = _error_kind(event)
            span.set_attribute("error.type", error_kind)
            span.set_status(Status(StatusCode.ERROR, error_kind))
        elif kind == "succeeded" and self._record_results:
            span.set_attribute("gen_ai.tool.call.result", _json(getattr(event, "result", None)))
        span.end(end_time=_ns(event.ts))


class _Open:
    """A call's span while it is open, and the facts already set on it."""

    __slots__ = ("digest", "key", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.digest = ""
        self.key = ""


class _Plan(NamedTuple):
    role: str
    tag: str
    fields: tuple[str, ...]
    facts: Callable[[_Open, Event], None] | None


_START, _END, _ALONE, _OTHER = "start", "end", "alone", "other"


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
    return str(getattr(recorded_error(outcome), "kind", "tool-failed"))


def _set_digest(held: _Open, event: Event) -> None:
    digest = getattr(event, "digest", "")
    held.digest = digest
    held.span.set_attribute("agent_adapter.digest", digest)


def _set_key(held: _Open, event: Event) -> None:
    key = getattr(event, "key", "") or getattr(event, "effect_key", "")
    if key and key != held.key:
        held.key = key
        held.span.set_attribute("agent_adapter.effect_key", key)


# The span-level facts some events carry, set as the events pass.
_SPAN_FACTS: dict[str, Callable[[_Open, Event], None]] = {
    "call.validated": _set_digest,
    "call.replayed": _set_digest,
    "effect.claimed": _set_key,
    "call.duplicate": _set_key,
    "call.ambiguous": _set_key,
}
