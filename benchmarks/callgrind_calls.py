"""N calls of one kind, for callgrind: instructions per call where the VM's clock is noise.

    valgrind --tool=callgrind --callgrind-out-file=out.N python benchmarks/callgrind_calls.py KIND N

for two values of N (say 500 and 2500; 100 and 500 for ``durable``); the instructions per
call are (total at the larger N - total at the smaller) / the difference, so start-up and
imports cancel out. Run it with ``PYTHONPATH`` set to each tree to compare two commits
(issue 24's restructure: benchmarks/README.md, "The engine restructure, before and
after"). Kinds:

- ``core``: a plain call on a MemoryLedger, JSON text arguments;
- ``token``: a confirm + timeout tool whose decision is carried in the context;
- ``otel``: ``core`` with the OpenTelemetry hook (SDK provider, in-memory exporter);
- ``durable``: a write-ahead call on a SQLite ledger (``synchronous="FULL"``) in /dev/shm.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from typing import Any

import msgspec

from agent_adapter import CallContext, Executor, Registry
from agent_adapter.engine import Decision, digest
from agent_adapter.ledger import MemoryLedger, SQLiteLedger

RAW = (
    '{"order_id":"ord_0001","customer":"cus_42","amount":99.5,'
    '"express":false,"note":"refund for a damaged parcel"}'
)
#: Where the durable kind's ledger lives: memory-backed where there is one (fsync is cheap).
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None
DECISION = Decision(approved=True, digest=digest(msgspec.json.decode(RAW)))


async def lookup_order(
    order_id: str, customer: str, amount: float, express: bool, note: str
) -> str:
    """Look an order up."""
    return "ok"


async def main(kind: str, n: int) -> None:
    registry = Registry()
    if kind == "token":
        spec = registry.tool(lookup_order, confirm=True, timeout=10)
    else:
        spec = registry.tool(lookup_order)
    hooks: list[Any] = []
    exporter: Any = None
    if kind == "otel":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from agent_adapter.hooks import OpenTelemetryHook

        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        hooks = [OpenTelemetryHook(provider)]
    scratch = tempfile.TemporaryDirectory(dir=SCRATCH)
    if kind == "durable":
        ledger: Any = SQLiteLedger(os.path.join(scratch.name, "l.db"), synchronous="FULL")
    else:
        ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=hooks)
    await executor.start()
    for i in range(n):
        approval = DECISION if kind == "token" else None
        ctx = CallContext(run_id=f"r{i}", call_id=f"c{i}", approval=approval)
        await executor.run_spec(spec, RAW, ctx)
        if exporter is not None and i % 100 == 0:
            exporter.clear()
    await executor.close()
    scratch.cleanup()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("core", "token", "otel", "durable"):
        raise SystemExit("usage: callgrind_calls.py core|token|otel|durable N")
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
