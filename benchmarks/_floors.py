"""The executor's floors, shared by ``bench_executor.py`` and ``bench_durable.py``.

A module of its own so that ``bench_durable.py`` does not import the SDK and the rest of
``bench_executor.py``'s imports: a heap of a few hundred thousand more objects makes a
full garbage collection that lands inside a timed durable call cost ~80 ms.

- ``ContractFloor``: what the contract alone costs per call, no executor;
- ``BookkeepingFloor``: the contract plus what ``run_spec`` must keep per call, in one
  straight line (issue 16's item 4). Its two appends go to ``append_now``: a
  MemoryLedger's, or a durable commit to await (``bench_durable.py``'s ``CallFloor``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from agent_adapter.engine import CallContext, Executor, Registry
from agent_adapter.engine._context import Call, _current
from agent_adapter.engine._digest import digest
from agent_adapter.engine._run import _Run, _validated
from agent_adapter.ledger import MemoryLedger
from agent_adapter.ledger._events import (
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallValidated,
)
from agent_adapter.ledger._follow import appending

#: call ids, unique within the process
ids = itertools.count(1)
_ids = ids

RAW = (
    '{"order_id":"ord_0001","customer":"cus_42","amount":99.5,'
    '"express":false,"note":"refund for a damaged parcel"}'
)
KWARGS = {
    "order_id": "ord_0001",
    "customer": "cus_42",
    "amount": 99.5,
    "express": False,
    "note": "refund for a damaged parcel",
}


async def lookup_order(
    order_id: str, customer: str, amount: float, express: bool, note: str
) -> str:
    """Look an order up (a trivial tool: the cost measured is the machinery around it)."""
    return "ok"


class ContractFloor:
    """What the contract alone costs per call: no executor at all (``--floors``).

    The model's text validated and digested, the four events every executed call must
    append (``call.requested``, ``call.validated``, ``call.started`` before the body, the
    outcome after it) in the two appends the write-ahead needs, on a real ``MemoryLedger``
    (encode + SHA-256 chain + record), and the body. No ids, no projection, no context
    variable, no error handling: a lower bound for any executor that keeps the contract.
    """

    def __init__(self) -> None:
        self.spec = Registry().tool(lookup_order)
        self.ledger = MemoryLedger()

    def reset(self, n: int) -> None:
        self.ledger = MemoryLedger()

    async def call(self) -> Any:
        spec, ledger = self.spec, self.ledger
        call_id = f"c{next(_ids)}"
        now = time.time
        args = spec.validate(RAW)
        call_digest = digest(args)
        common = {"run_id": "run-bench", "call_id": call_id, "tool": spec.name}
        await ledger.append_many(
            [
                CallRequested(ts=now(), args=RAW, **common),
                CallValidated(ts=now(), digest=call_digest, **common),
                CallStarted(ts=now(), digest=call_digest, **common),
            ]
        )
        result = await lookup_order(**args)
        await ledger.append_many([CallSucceeded(ts=now(), result=result, **common)])
        return result


class BookkeepingFloor(ContractFloor):
    """The contract floor plus what the executor must keep per call, in one straight line.

    What ``run_spec`` does for a plain call that succeeds, and nothing it does only to
    decide (no step checks, no buffer, no error handling, no second coroutine): the
    caller's ``CallContext``, the step-0 check of its ids, ``_Run`` and ``Call``, the
    ``call.requested`` arguments as recorded, the projection's four handlers (the outcome
    index a repeated id is answered from, the in-flight table, the run counters), the two
    context variables (``current_call()`` for the body, and the appending follower that a
    shared ledger must not hand its own events back to), the result as JSON values, the
    same four events and two appends. A lower bound for ``run_spec`` that keeps
    DESIGN's pipeline and public API.
    """

    def reset(self, n: int) -> None:
        self.executor = Executor(self.spec_registry, ledger=MemoryLedger())
        self.executor._started = True  # nothing to replay
        # Stores a call's events: the MemoryLedger's append_now (returns None), or, in
        # bench_durable.py's floor of a durable call, a commit to await (a future).
        self.append_now: Callable[[list[Any]], Awaitable[None] | None] = (
            self.executor.ledger.append_now  # type: ignore[attr-defined]
        )

    def __init__(self, fn: Callable[..., Awaitable[Any]] = lookup_order, raw: str = RAW) -> None:
        self.spec_registry = Registry()
        self.spec = self.spec_registry.tool(fn)
        self.raw = raw
        self.reset(0)

    async def call(self) -> Any:
        ex, spec, raw = self.executor, self.spec, self.raw
        state, append_now, clock = ex.state, self.append_now, time.time
        ctx = CallContext(run_id="run-bench", call_id=f"c{next(_ids)}")
        key = (ctx.run_id, ctx.call_id)
        if key in state.outcomes or key in state.inflight:
            raise AssertionError("a repeated id")
        run = _Run(spec, ctx, clock())
        common = {"run_id": ctx.run_id, "call_id": ctx.call_id, "tool": spec.name}
        requested = CallRequested(
            ts=run.t0, args=ex._requested_args(spec, raw), metadata=ctx.metadata, **common
        )
        state._requested(requested)
        mine = appending.set(ex._follower)
        token = None
        try:
            args, call_digest = _validated(spec, raw)
            validated = CallValidated(ts=clock(), digest=call_digest, **common)
            state._validated(validated)
            call = Call(tool=spec.name, spec=spec, args=args, digest=call_digest, ctx=ctx)
            run.call = call
            token = _current.set(call)
            started = CallStarted(ts=clock(), digest=call_digest, **common)
            state._started(started)
            committing = append_now([requested, validated, started])
            if committing is not None:
                await committing
            result = await spec.fn(**call.args)
            value = msgspec.to_builtins(result, str_keys=True)
            now = clock()
            outcome = CallSucceeded(
                ts=now, duration_ms=(now - run.t0) * 1000.0, result=value, **common
            )
            state._outcome(outcome)
            committing = append_now([outcome])
            if committing is not None:
                await committing
            return result
        finally:
            appending.reset(mine)
            if token is not None:
                _current.reset(token)
