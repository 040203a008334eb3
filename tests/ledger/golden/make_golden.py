"""Record a new golden ledger from real executor runs: every event tag this version writes.

Run it from the repository root, naming a file that does not exist yet::

    PYTHONPATH=. .venv/bin/python tests/ledger/golden/make_golden.py \
        tests/ledger/golden/engine_v3.jsonl

It writes a NEW file and never rewrites an existing one (it refuses a path that exists):
the golden files are the point, they prove that ledgers written by an older engine still
decode, verify, replay and reopen. When the engine changes what it writes, record another
file (``engine_v3.jsonl``, ...) beside the old ones and give it its own checks in
``tests/ledger/test_golden_ledger.py``; never regenerate an old one to make a test pass.

How it is made: one ``Executor`` over a ``MemoryLedger``, with an injected clock (each
reading is 1 ms after the previous one, from 1_700_100_000.0), fixed run and call ids, a
fixed holder (executor id, pid and host, so the file names no real machine), and one
``DeferredApproval`` port. Every call goes through ``run_spec`` as an agent's would; the
one body that must outlive a lease renewal is gated by ``asyncio.Event``s, and the only
real waits are the ``lookup`` timeout (0.05 s) and the lease's renewal period (0.1 s).
The approval request ids are the engine's own (random), so two runs never give the
same bytes; each gives the same events, in the same order.

The one event no executor writes is ``unknown``: this version stores that tag only for
an event it read as ``UnknownEvent`` (a newer version's type) and appends again, so the
script appends one such event, through the ledger's ``append``, last.

The file has one JSON object per line, as ``engine_v1.jsonl``: ``seq``, ``prev``, ``hash``
and ``payload`` (the stored bytes of the event, as text).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from agent_adapter import CallContext, Decision, DeferredApproval, Executor, Registry, RunLimits
from agent_adapter.engine import record_exchange
from agent_adapter.errors import AdapterError, ApprovalPending, GuardrailBlocked, ToolError
from agent_adapter.ledger import EffectRenewed, MemoryLedger, Record, UnknownEvent

RUN = "golden2"
START = 1_700_100_000.0


class TickClock:
    """A clock 1 ms later at each reading (rounded to the millisecond, as written)."""

    def __init__(self, start: float = START) -> None:
        self.start = start
        self.ticks = 0

    def __call__(self) -> float:
        self.ticks += 1
        return round(self.start + self.ticks / 1000, 3)


class GoldenHook:
    """A before_tool hook that stops notices "at night" and an after_tool hook that fails
    for every notify call (a broken pager: recorded, never the call's outcome)."""

    name = "golden-hook"

    def before_tool(self, call: Any) -> None:
        if call.tool == "notify" and call.args["message"] == "at night":
            raise RuntimeError("quiet hours")

    def after_tool(self, call: Any, outcome: Any) -> None:
        if call.tool == "notify":
            raise RuntimeError("pager down")


def within_limit(call: Any) -> None:
    """An input guard: transfers over 10_000 cents are blocked."""
    if call.args["amount_cents"] > 10_000:
        raise GuardrailBlocked("over the transfer limit")


def registry(gates: dict[str, asyncio.Event]) -> Registry:
    """The tools of the recording; ``gates`` hold the bodies that must wait."""
    tools = Registry()

    @tools.tool(confirm=True, effect="refund:{order_id}", redact=["note"])
    async def refund(order_id: str, amount_cents: int, note: str = "") -> str:
        if amount_cents == 0:
            raise ToolError("nothing to refund")
        if amount_cents < 0:
            raise RuntimeError("gateway down")
        return f"refunded {amount_cents}"

    @tools.tool(cache=60)
    async def quote(sku: str) -> dict[str, Any]:
        return {"sku": sku, "price": 1.5}

    @tools.tool(guards=[within_limit])
    async def transfer(account: str, amount_cents: int) -> str:
        return f"sent {amount_cents} to {account}"

    @tools.tool
    async def notify(message: str) -> str:
        return f"sent: {message}"

    @tools.tool(timeout=0.05)
    async def lookup(order_id: str) -> str:
        await asyncio.Event().wait()  # never set: the 0.05 s deadline ends it
        return order_id

    @tools.tool
    async def export(report: str) -> str:
        gates["export entered"].set()
        await asyncio.Event().wait()  # never set: the caller cancels it
        return report

    @tools.tool(effect="ship:{order_id}")
    async def ship(order_id: str) -> str:
        gates["ship entered"].set()
        await gates["ship go"].wait()  # set once the lease was renewed
        return f"shipped {order_id}"

    @tools.tool(redact=["card"])
    async def survey(card: str, question: str) -> str:
        # Asked mid-call (from engine_v3.jsonl on): one answered, one refused, each a
        # call.exchanged of this call, the card scrubbed from what was asked.
        await record_exchange(
            "elicitation/create",
            request={"message": f"{question} (card {card})"},
            response={"action": "accept", "content": {"answer": "yes"}},
            peer="golden-client 1.0",
        )
        await record_exchange(
            "sampling/createMessage",
            request={"messages": [question]},
            error="refused: the client did not declare sampling",
            peer="golden-client 1.0",
        )
        return "surveyed"

    return tools


async def record() -> list[Record]:
    """Run the recording; returns the ledger's records."""
    clock = TickClock()
    ledger = MemoryLedger()
    gates = {name: asyncio.Event() for name in ("export entered", "ship entered", "ship go")}
    tools = registry(gates)
    deferred = DeferredApproval(ledger, clock=clock)
    executor = Executor(
        tools,
        ledger=ledger,
        approval=deferred,
        hooks=[GoldenHook()],
        limits=RunLimits(max_calls_per_tool={"notify": 1}),
        clock=clock,
        # Renewed every 0.1 s of real time: the gated ship body sees one renewal.
        lease_s=0.3,
    )
    # The claims' holder, fixed: the file must not name the machine that recorded it.
    # (The pipeline holds them: set before the first call, as the executor itself would.)
    pipe = executor._pipe
    pipe.executor_id, pipe.pid, pipe.host = "golden-exec", 4242, "golden-host"
    ui = Decision(approved=True, reviewer="ui")

    async def call(tool: str, args: Any, call_id: str, approval: Any = None) -> Any:
        ctx = CallContext(run_id=RUN, call_id=call_id, approval=approval)
        try:
            return await executor.run_spec(tools.get(tool), args, ctx)
        except AdapterError as exc:
            return exc

    # Effects: a refund, its duplicate, a ToolError (frees the key), a crash-like failure
    # whose retry is ambiguous until an operator resolves it, and one left ambiguous.
    await call("refund", {"order_id": "A1", "amount_cents": 500, "note": "secret"}, "c1", ui)
    await call("refund", {"order_id": "A1", "amount_cents": 500, "note": "secret"}, "c2", ui)
    await call("refund", {"order_id": "B2", "amount_cents": 0}, "c3", ui)
    await call("refund", {"order_id": "C3", "amount_cents": -1}, "c4", ui)
    await call("refund", {"order_id": "C3", "amount_cents": 300}, "c5", ui)
    await executor.resolve_effect(
        "refund:C3", outcome="failed", reviewer="ops", reason="the gateway has no refund"
    )
    await call("refund", {"order_id": "C3", "amount_cents": 300}, "c6", ui)
    await call("refund", {"order_id": "F6", "amount_cents": -5}, "c7", ui)
    # Approvals: refused in the context; deferred to the port, answered yes and no, and
    # each answer consumed by the next call with the same arguments.
    no = Decision(approved=False, reviewer="ui", reason="not this one")
    await call("refund", {"order_id": "G7", "amount_cents": 100}, "c8", no)
    pending = await call("refund", {"order_id": "D4", "amount_cents": 900}, "c9")
    assert isinstance(pending, ApprovalPending), pending
    await deferred.answer(pending.request_id, approved=True, reviewer="carol", reason="ok")
    await call("refund", {"order_id": "D4", "amount_cents": 900}, "c10")
    pending = await call("refund", {"order_id": "R9", "amount_cents": 700}, "c11")
    assert isinstance(pending, ApprovalPending), pending
    await deferred.answer(pending.request_id, approved=False, reviewer="dave", reason="fraud")
    await call("refund", {"order_id": "R9", "amount_cents": 700}, "c12")
    # Cache, invalid arguments, guards, hooks and limits.
    await call("quote", {"sku": "é-1"}, "c13")
    await call("quote", {"sku": "é-1"}, "c14")
    await call("quote", '{"sku": 5}', "c15")
    await call("transfer", {"account": "acc-1", "amount_cents": 2_500}, "c16")
    await call("transfer", {"account": "acc-1", "amount_cents": 25_000}, "c17")
    await call("notify", {"message": "at night"}, "c18")
    await call("notify", {"message": "refund sent"}, "c19")
    await call("notify", {"message": "again"}, "c20")
    # A timeout, and a call cancelled while its body runs.
    await call("lookup", {"order_id": "A1"}, "c21")
    cancelled = asyncio.ensure_future(call("export", {"report": "daily"}, "c22"))
    await gates["export entered"].wait()
    cancelled.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await cancelled
    # A body that outlives a renewal of its lease: released by the renewal itself.
    events = executor.subscribe()
    shipping = asyncio.ensure_future(call("ship", {"order_id": "S1"}, "c23"))
    await gates["ship entered"].wait()
    async for event in events:
        if isinstance(event, EffectRenewed):
            break
    gates["ship go"].set()
    await shipping
    await events.aclose()  # type: ignore[attr-defined]
    await call("survey", {"card": "4111", "question": "Go on?"}, "c24")
    # A repeat of a finished call id: its recorded outcome, no second run.
    await call("refund", {"order_id": "A1", "amount_cents": 500, "note": "secret"}, "c1", ui)
    # An event of a newer version's type, as this version stores one it passes on.
    await ledger.append(
        UnknownEvent(
            ts=clock(),
            run_id=RUN,
            original_type="run.annotated",
            data={"note": "written by a newer version"},
        )
    )
    await executor.close()
    return list(ledger.records)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_golden.py NEW_FILE.jsonl (a file that does not exist)", file=sys.stderr)
        return 2
    path = Path(argv[0])
    records = asyncio.run(record())
    lines = [
        json.dumps(
            {"seq": r.seq, "prev": r.prev, "hash": r.hash, "payload": r.payload.decode()},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        for r in records
    ]
    try:
        # "x": never rewrite a golden file, whatever the caller passes.
        with path.open("x", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
    except FileExistsError:
        print(f"{path} exists: golden files are never rewritten; name a new one", file=sys.stderr)
        return 1
    print(f"wrote {len(records)} records to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
