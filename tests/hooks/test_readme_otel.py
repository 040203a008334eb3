"""The README's OpenTelemetry example runs as written, against a stand-in OTLP collector.

The collector is an HTTP server on a free loopback port, bound before the example starts
(readiness: the socket listens before the subprocess exists); the example finds it
through ``OTEL_EXPORTER_OTLP_ENDPOINT``, as the README says.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _helpers import timeline

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="a dev dependency")

from _docs import run_example
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)


class _Collector(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # (quiet: the test reads what arrived)


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    received: list[tuple[str, bytes]] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def _attributes(span: Any) -> dict[str, Any]:
    out = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = getattr(value, value.WhichOneof("value"))
    return out


def test_the_otel_example_sends_nested_spans_to_the_collector(
    collector: tuple[str, list[tuple[str, bytes]]],
) -> None:
    """The example prints the refund, and the collector receives two spans over OTLP/HTTP:
    the agent's turn and, under it, `execute_tool refund` with its attributes and no
    card number anywhere."""
    endpoint, received = collector
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": "refunds",
    }
    done = run_example("otel", timeout=120, env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "refunded 500 on A1\n", "")
    assert [path for path, _ in received] == ["/v1/traces"]
    request = ExportTraceServiceRequest.FromString(received[0][1])
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    by_name = {s.name: s for s in spans}
    assert sorted(by_name) == ["agent turn", "execute_tool refund"]
    turn, tool = by_name["agent turn"], by_name["execute_tool refund"]
    assert (tool.trace_id, tool.parent_span_id) == (turn.trace_id, turn.span_id)
    attributes = _attributes(tool)
    digest = attributes.pop("agent_adapter.digest")
    call_id = attributes.pop("gen_ai.tool.call.id")
    assert (len(digest), call_id.startswith("call")) == (64, True)
    assert attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "refund",
        "gen_ai.tool.type": "function",
        "agent_adapter.run_id": "r1",
        "agent_adapter.effect_key": "refund:A1",
        "agent_adapter.outcome": "succeeded",
    }
    assert [e.name for e in tool.events] == timeline("call.succeeded", effect=True)
    service = {
        kv.key: kv.value.string_value
        for rs in request.resource_spans
        for kv in rs.resource.attributes
    }
    assert service["service.name"] == "refunds"
    assert b"4111111111111111" not in received[0][1]


def _run_example(**env: str) -> subprocess.CompletedProcess[str]:
    """The README's example in a fresh process, without the caller's OTLP endpoint, plus
    ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
    return run_example("otel", timeout=120, env={**base, **env})


def test_without_a_collector_the_example_prints_its_spans() -> None:
    """No OTEL_EXPORTER_OTLP_ENDPOINT: the spans are printed after the result (the SDK's
    console exporter, one JSON object each): the agent's turn and, under it,
    `execute_tool refund`, with no card number anywhere."""
    done = _run_example()
    assert (done.returncode, done.stderr) == (0, "")
    first, rest = done.stdout.split("\n", 1)
    assert first == "refunded 500 on A1"
    decoder = json.JSONDecoder()
    spans: list[dict[str, Any]] = []
    text = rest.strip()
    while text:
        span, end = decoder.raw_decode(text)
        spans.append(span)
        text = text[end:].strip()
    by_name = {s["name"]: s for s in spans}
    assert sorted(by_name) == ["agent turn", "execute_tool refund"]
    turn, tool = by_name["agent turn"], by_name["execute_tool refund"]
    assert tool["parent_id"] == turn["context"]["span_id"]
    assert tool["attributes"]["agent_adapter.outcome"] == "succeeded"
    assert [e["name"] for e in tool["events"]] == timeline("call.succeeded", effect=True)
    assert "4111111111111111" not in done.stdout


def test_with_no_collector_answering_the_example_still_answers() -> None:
    """An endpoint where nothing listens: the call's result is printed, the exporter gives
    up with warnings (no traceback) and the example exits 0."""
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = _run_example(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}")
    assert (done.returncode, done.stdout) == (0, "refunded 500 on A1\n")
    assert "Traceback" not in done.stderr
    assert "Failed to export spans batch" in done.stderr
