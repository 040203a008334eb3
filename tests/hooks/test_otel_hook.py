"""The OpenTelemetry hook, checked with the SDK's in-memory exporter: one span per call."""

from __future__ import annotations

import os
from typing import Any

import msgspec
import pytest
from _helpers import (
    every_call_has_one_outcome,  # noqa: F401 (a fixture)
    own_pid_start,
    timeline,
)

pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK is a dev dependency")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from agent_adapter import CallContext, Executor, Registry
from agent_adapter.engine import host_identity
from agent_adapter.errors import (
    ApprovalDenied,
    DuplicateEffect,
    ToolArgsInvalid,
    ToolError,
    ToolFailed,
)
from agent_adapter.hooks import OpenTelemetryHook
from agent_adapter.ledger import MemoryLedger

pytestmark = pytest.mark.usefixtures("every_call_has_one_outcome")

SECRET = "4111111111111111"
# (holder: each executor's own random id.)
RANDOM = frozenset({"request_id", "prev", "hash", "holder"})


def registry() -> Registry:
    reg = Registry()

    @reg.tool(effect="refund:{order_id}", redact=("card",))
    async def refund(order_id: str, amount_cents: int, card: str = "") -> str:
        """Refund an order; ``card`` never reaches the ledger."""
        if amount_cents < 0:
            raise ToolError("a refund is a positive amount")
        if amount_cents == 13:
            raise RuntimeError("the payment API broke")
        return f"refunded {amount_cents} on {order_id}"

    @reg.tool(confirm=True)
    async def delete(path: str) -> str:
        """Needs an approval (and none is given here: denied)."""
        return path

    return reg


def sdk() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def events_of(span: ReadableSpan) -> list[tuple[str, dict[str, Any], int]]:
    return [(e.name, dict(e.attributes or {}), e.timestamp) for e in span.events]


def ns(seconds: float) -> int:
    return int(seconds * 1e9)


async def test_a_call_is_one_span_under_the_host_span(clock: Any) -> None:
    """A successful call is one `execute_tool refund` span, a child of the host's current
    span, with the GenAI attributes, the run, digest, effect key and outcome, each ledger
    event as a span event stamped with its ledger time, and no error status."""
    provider, exporter = sdk()
    ledger = MemoryLedger()
    executor = Executor(registry(), ledger=ledger, hooks=[OpenTelemetryHook(provider)], clock=clock)
    host_tracer = provider.get_tracer("host")
    with host_tracer.start_as_current_span("agent turn") as host:
        value = await executor.run_spec(
            executor.registry.get("refund"),
            {"order_id": "A1", "amount_cents": 500, "card": SECRET},
            CallContext(run_id="r1", call_id="c1"),
        )
    assert value == "refunded 500 on A1"
    tool_span, host_span = exporter.get_finished_spans()
    recorded = [e async for e in ledger.read()]
    digest = recorded[1].digest
    assert host_span.name == "agent turn"
    assert tool_span.name == "execute_tool refund"
    assert tool_span.kind == trace.SpanKind.INTERNAL
    assert tool_span.parent is not None
    assert (tool_span.parent.trace_id, tool_span.parent.span_id) == (
        host.get_span_context().trace_id,
        host.get_span_context().span_id,
    )
    assert tool_span.context.trace_id == host.get_span_context().trace_id
    assert dict(tool_span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "refund",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "agent_adapter.run_id": "r1",
        "agent_adapter.digest": digest,
        "agent_adapter.effect_key": "refund:A1",
        "agent_adapter.outcome": "succeeded",
    }
    assert (tool_span.status.status_code, tool_span.start_time, tool_span.end_time) == (
        StatusCode.UNSET,
        ns(1000.0),
        ns(1000.0),
    )
    assert [e.type for e in recorded] == timeline("call.succeeded", effect=True)
    # The call's digest and effect key are on the span: the events leave them out.
    assert events_of(tool_span) == [
        ("call.requested", {"agent_adapter.seq": 1}, ns(1000.0)),
        ("call.validated", {"agent_adapter.seq": 2}, ns(1000.0)),
        (
            # The claim names its holder and lease: who was running the effect.
            "effect.claimed",
            {
                "agent_adapter.seq": 3,
                "holder": executor.executor_id,
                "pid": os.getpid(),
                "host": host_identity(),
                "lease_until": 1000.0 + executor.lease_s,
                "pid_start": own_pid_start(),
            },
            ns(1000.0),
        ),
        ("call.started", {"agent_adapter.seq": 4}, ns(1000.0)),
        (
            "call.succeeded",
            {"agent_adapter.seq": 5, "duration_ms": 0.0, "redacted": False},
            ns(1000.0),
        ),
    ]


async def test_span_times_are_the_ledger_times(clock: Any) -> None:
    """The span starts at `call.requested`'s time and ends at the outcome's (the
    executor's clock: the ledger's times), not when the hook happened to be called."""
    provider, exporter = sdk()
    reg = Registry()

    @reg.tool
    async def slow(n: int) -> int:
        clock.advance(2.5)
        return n

    executor = Executor(
        reg, ledger=MemoryLedger(), hooks=[OpenTelemetryHook(provider)], clock=clock
    )
    await executor.call("slow", {"n": 1}, run_id="r1", call_id="c1")
    (span,) = exporter.get_finished_spans()
    assert (span.start_time, span.end_time) == (ns(1000.0), ns(1002.5))
    assert [(name, t) for name, _, t in events_of(span)] == [
        ("call.requested", ns(1000.0)),
        ("call.validated", ns(1000.0)),
        ("call.started", ns(1000.0)),
        ("call.succeeded", ns(1002.5)),
    ]


@pytest.mark.parametrize(
    ("tool", "args", "error", "outcome", "kind"),
    [
        ("refund", {"order_id": "A1", "amount_cents": 13}, ToolFailed, "failed", "tool-failed"),
        ("refund", {"order_id": "A1", "amount_cents": -1}, ToolError, "failed", "tool-error"),
        ("refund", {"order_id": "A1"}, ToolArgsInvalid, "invalid", "tool-args-invalid"),
        ("delete", {"path": "/tmp/x"}, ApprovalDenied, "denied", "approval-denied"),
    ],
    ids=["failure", "tool-error", "invalid", "denied"],
)
async def test_failures_and_refusals_have_error_status_with_the_kind(
    clock: Any, tool: str, args: dict[str, Any], error: type[Exception], outcome: str, kind: str
) -> None:
    """A failed or refused call's span has an error status whose description is the
    error kind, `error.type` = the kind, and the outcome kind."""
    provider, exporter = sdk()
    executor = Executor(
        registry(), ledger=MemoryLedger(), hooks=[OpenTelemetryHook(provider)], clock=clock
    )
    with pytest.raises(error):
        await executor.call(tool, args, run_id="r1", call_id="c1")
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert (
        span.name,
        span.status.status_code,
        span.status.description,
        attributes["error.type"],
        attributes["agent_adapter.outcome"],
        events_of(span)[-1][0],
    ) == (f"execute_tool {tool}", StatusCode.ERROR, kind, kind, outcome, f"call.{outcome}")


async def test_a_refused_duplicate_effect_names_its_key(clock: Any) -> None:
    """The second call of one effect key is a `duplicate-effect` span carrying the key."""
    provider, exporter = sdk()
    executor = Executor(
        registry(), ledger=MemoryLedger(), hooks=[OpenTelemetryHook(provider)], clock=clock
    )
    args = {"order_id": "A1", "amount_cents": 5}
    await executor.call("refund", args, run_id="r1", call_id="c1")
    with pytest.raises(DuplicateEffect):
        await executor.call("refund", args, run_id="r1", call_id="c2")
    first, second = exporter.get_finished_spans()
    assert [
        (
            s.attributes["gen_ai.tool.call.id"],
            s.attributes["agent_adapter.effect_key"],
            s.attributes["agent_adapter.outcome"],
            s.status.description,
        )
        for s in (first, second)
        if s.attributes is not None
    ] == [
        ("c1", "refund:A1", "succeeded", None),
        ("c2", "refund:A1", "duplicate", "duplicate-effect"),
    ]


async def test_argument_values_stay_out_unless_asked_and_redaction_always_applies(
    clock: Any,
) -> None:
    """By default no argument value and no result reaches a span; with
    `record_arguments`/`record_results` they do, as the ledger recorded them: the
    redacted card is "[redacted]", never its value."""
    args = {"order_id": "A1", "amount_cents": 500, "card": SECRET}

    async def spans(**options: bool) -> ReadableSpan:
        provider, exporter = sdk()
        hook = OpenTelemetryHook(provider, **options)
        executor = Executor(registry(), ledger=MemoryLedger(), hooks=[hook], clock=clock)
        await executor.call("refund", args, run_id="r1", call_id="c1")
        (span,) = exporter.get_finished_spans()
        return span

    def every_value(span: ReadableSpan) -> str:
        values = [*(span.attributes or {}).values()]
        for event in span.events:
            values.extend((event.attributes or {}).values())
        return msgspec.json.encode(values).decode()

    quiet = await spans()
    assert "gen_ai.tool.call.arguments" not in (quiet.attributes or {})
    assert "gen_ai.tool.call.result" not in (quiet.attributes or {})
    # (The order id is in the effect key, which the span carries by design.)
    text = every_value(quiet)
    assert ("500" in text, SECRET in text, "refunded" in text) == (False, False, False)

    told = await spans(record_arguments=True, record_results=True)
    attributes = dict(told.attributes or {})
    assert msgspec.json.decode(attributes["gen_ai.tool.call.arguments"]) == {
        "order_id": "A1",
        "amount_cents": 500,
        "card": "[redacted]",
    }
    assert msgspec.json.decode(attributes["gen_ai.tool.call.result"]) == "refunded 500 on A1"
    assert events_of(told)[0][1] == {
        "agent_adapter.seq": 1,
        "args": '{"order_id":"A1","amount_cents":500,"card":"[redacted]"}',
    }
    assert SECRET not in every_value(told)


async def test_a_replayed_call_is_its_own_span(clock: Any) -> None:
    """A repeat of a finished (run, call) is answered from the ledger: one more span,
    outcome `replayed`, with the call's digest and the `call.replayed` event."""
    provider, exporter = sdk()
    ledger = MemoryLedger()
    executor = Executor(registry(), ledger=ledger, hooks=[OpenTelemetryHook(provider)], clock=clock)
    args = {"order_id": "A1", "amount_cents": 5}
    assert await executor.call("refund", args, run_id="r1", call_id="c1") == "refunded 5 on A1"
    assert await executor.call("refund", args, run_id="r1", call_id="c1") == "refunded 5 on A1"
    first, again = exporter.get_finished_spans()
    digest = first.attributes["agent_adapter.digest"] if first.attributes else None
    assert dict(again.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "refund",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "agent_adapter.run_id": "r1",
        "agent_adapter.digest": digest,
        "agent_adapter.outcome": "replayed",
    }
    assert events_of(again) == [
        ("call.replayed", {"agent_adapter.seq": 6, "outcome_seq": 5}, ns(1000.0))
    ]


async def test_without_a_provider_nothing_is_recorded_and_nothing_changes(clock: Any) -> None:
    """With no provider configured (the API's default, non-recording), the hook keeps no
    span, the ledger is exactly what it is without the hook, and a process-wide SDK
    exporter never set as the global provider receives nothing."""
    assert not isinstance(trace.get_tracer_provider(), TracerProvider), (
        "a test set a global provider: this test needs the API's default"
    )

    async def run(hooks: list[Any]) -> list[dict[str, Any]]:
        ledger = MemoryLedger()
        executor = Executor(registry(), ledger=ledger, hooks=hooks, clock=clock)
        await executor.call(
            "refund", {"order_id": "A1", "amount_cents": 5}, run_id="r", call_id="c"
        )
        with pytest.raises(ApprovalDenied):
            await executor.call("delete", {"path": "/x"}, run_id="r", call_id="d")
        # Without the random request id (and the hashes that cover it).
        return [
            {
                "type": e.type,
                **{k: v for k, v in msgspec.structs.asdict(e).items() if k not in RANDOM},
            }
            async for e in ledger.read()
        ]

    hook = OpenTelemetryHook()
    with_hook = await run([hook])
    assert with_hook == await run([])
    assert hook._open == {}
    assert "hook.failed" not in [e["type"] for e in with_hook]


async def test_an_edited_approval_keeps_the_digest_it_approved(clock: Any) -> None:
    """An approval of edited arguments shows, on its span event, the digest it approved
    (not the call's requested digest, which the span carries), so a trace tells the two
    apart."""
    from agent_adapter import CallbackApproval, Decision
    from agent_adapter.engine import digest

    provider, exporter = sdk()
    reg = Registry()

    @reg.tool(confirm=True)
    async def pay(amount_cents: int) -> int:
        """Pays."""
        return amount_cents

    port = CallbackApproval(
        lambda request: Decision(approved=True, reviewer="alice", edits={"amount_cents": 20})
    )
    executor = Executor(
        reg, ledger=MemoryLedger(), approval=port, hooks=[OpenTelemetryHook(provider)], clock=clock
    )
    assert await executor.call("pay", {"amount_cents": 2000}, run_id="r1", call_id="c1") == 20
    (span,) = exporter.get_finished_spans()
    granted = [
        {k: v for k, v in a.items() if k != "request_id"}  # (random)
        for name, a, _ in events_of(span)
        if name == "approval.granted"
    ]
    assert (span.attributes or {})["agent_adapter.digest"] == digest({"amount_cents": 2000})
    assert granted == [
        {
            "agent_adapter.seq": 4,
            "reviewer": "alice",
            "source": "port",
            "digest": digest({"amount_cents": 20}),
            "edited": True,
        }
    ]


_LATER = """
import asyncio
import os
import socket
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from agent_adapter import Executor, Registry
from agent_adapter.hooks import OpenTelemetryHook

registry = Registry()

@registry.tool
async def echo(text: str) -> str:
    return text

async def main():
    hook = OpenTelemetryHook()  # built before any provider exists
    executor = Executor(registry, hooks=[hook])
    await executor.call("echo", {"text": "before"}, run_id="r", call_id="c1")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    await executor.call("echo", {"text": "after"}, run_id="r", call_id="c2")
    spans = exporter.get_finished_spans()
    print([(s.name, s.attributes["gen_ai.tool.call.id"]) for s in spans], len(hook._open))

asyncio.run(main())
"""


def test_a_global_provider_set_after_the_hook_is_used() -> None:
    """A hook built before the application sets its global provider records nothing
    until then and uses the provider from then on (in a fresh process: the global
    provider can be set once per process)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _LATER], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "[('execute_tool echo', 'c2')] 0\n",
        "",
    )


async def test_a_call_that_was_not_sampled_leaves_no_half_span(clock: Any) -> None:
    """With a sampler that drops the first call's span and keeps the next, the dropped
    call leaves nothing (no lone span for its outcome) and the kept one is whole."""
    from opentelemetry.sdk.trace.sampling import Decision as Sampled
    from opentelemetry.sdk.trace.sampling import Sampler, SamplingResult

    class EverySecond(Sampler):
        def __init__(self) -> None:
            self.asked = 0

        def should_sample(
            self,
            parent: Any,
            trace_id: int,
            name: str,
            kind: Any = None,
            attributes: Any = None,
            *args: Any,
            **kwargs: Any,
        ) -> SamplingResult:
            self.asked += 1
            keep = self.asked % 2 == 0
            decision = Sampled.RECORD_AND_SAMPLE if keep else Sampled.DROP
            return SamplingResult(decision, attributes if keep else None)

        def get_description(self) -> str:
            return "every second"

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=EverySecond())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    executor = Executor(
        registry(), ledger=MemoryLedger(), hooks=[OpenTelemetryHook(provider)], clock=clock
    )
    await executor.call("refund", {"order_id": "A1", "amount_cents": 5}, run_id="r", call_id="c1")
    await executor.call("refund", {"order_id": "A2", "amount_cents": 5}, run_id="r", call_id="c2")
    assert [
        (s.attributes["gen_ai.tool.call.id"], [e.name for e in s.events])
        for s in exporter.get_finished_spans()
        if s.attributes is not None
    ] == [
        (
            "c2",
            timeline("call.succeeded", effect=True),
        )
    ]


@pytest.mark.parametrize("kind", ["async", "sync", "timeout"])
async def test_a_span_opened_in_the_body_nests_under_the_calls_span(kind: str) -> None:
    """A span the tool body opens (an HTTP client's, say) is a child of the call's
    `execute_tool` span, not of the host's: the hook's around_body makes the call's span
    current while the body runs, for an async body, a sync one (in its worker thread) and
    one under a timeout."""
    provider, exporter = sdk()
    body_tracer = provider.get_tracer("http-client")
    reg = Registry()

    def fetch_sync(url: str) -> str:
        """Opens its own span, in a worker thread."""
        with body_tracer.start_as_current_span("GET"):
            return url

    async def fetch_async(url: str) -> str:
        """Opens its own span."""
        with body_tracer.start_as_current_span("GET"):
            return url

    if kind == "sync":
        reg.tool(fetch_sync, name="fetch")
    else:
        reg.tool(fetch_async, name="fetch", timeout=5 if kind == "timeout" else None)
    executor = Executor(reg, ledger=MemoryLedger(), hooks=[OpenTelemetryHook(provider)])
    with provider.get_tracer("host").start_as_current_span("agent turn"):
        assert await executor.call("fetch", {"url": "https://x"}, run_id="r", call_id="c") == (
            "https://x"
        )
    body_span, tool_span, host_span = exporter.get_finished_spans()
    assert (body_span.name, tool_span.name, host_span.name) == (
        "GET",
        "execute_tool fetch",
        "agent turn",
    )
    assert body_span.parent is not None and tool_span.parent is not None
    assert (body_span.parent.span_id, tool_span.parent.span_id) == (
        tool_span.context.span_id,
        host_span.context.span_id,
    )


async def test_an_exchange_mid_call_is_an_event_of_the_calls_span(clock: Any) -> None:
    """call.exchanged is a span event between call.started and the outcome: the method
    and peer always, what was asked and answered only when arguments / results are."""
    from agent_adapter.engine import record_exchange

    reg = Registry()

    @reg.tool()
    async def ask(question: str) -> str:
        await record_exchange(
            "elicitation/create", request={"q": question}, response={"a": "yes"}, peer="desk"
        )
        return "ok"

    async def span_of(**options: bool) -> ReadableSpan:
        provider, exporter = sdk()
        hook = OpenTelemetryHook(provider, **options)
        executor = Executor(reg, ledger=MemoryLedger(), hooks=[hook], clock=clock)
        await executor.call("ask", {"question": "go?"}, run_id="r1", call_id="c1")
        (span,) = exporter.get_finished_spans()
        return span

    quiet = await span_of()
    names = [name for name, _, _ in events_of(quiet)]
    assert names[names.index("call.started") + 1 :] == ["call.exchanged", "call.succeeded"]
    (exchanged,) = [attrs for name, attrs, _ in events_of(quiet) if name == "call.exchanged"]
    assert exchanged == {
        "agent_adapter.seq": 4,
        "method": "elicitation/create",
        "peer": "desk",
        "redacted": False,
    }
    told = await span_of(record_arguments=True, record_results=True)
    (exchanged,) = [attrs for name, attrs, _ in events_of(told) if name == "call.exchanged"]
    assert (exchanged["request"], exchanged["response"]) == ('{"q":"go?"}', '{"a":"yes"}')
