"""``resolve_interruptions`` of N paused calls, and the resume, beside the SDK's own cost.

For each N, every repeat starts from a fresh paused run (``Runner.run`` with a
``ScriptedModel`` that asks for N approval-gated ``refund`` calls in one turn; not timed)
and times, on that run's state or a copy made the same way:

- ``resolve_interruptions`` (ours), given the paused ``RunState``: the port asked N
  times, N decisions applied, N tokens issued at one instant;
- ``resume`` (``Runner.run(agent, state)``): the SDK runs the N approved tools, each
  through our executor with its token, then one more model turn;
- ``SDK decide, direct`` (part of ours): the SDK calls ours now makes, alone:
  ``state.get_interruptions()`` and the run context's ``approve_tool`` per call;
- ``SDK state.approve loop`` (what the bridge did before): ``state.approve(item)`` for
  each item of ``get_interruptions()``, which deep-copies every pending item per call.

Ratios are to the ``SDK state.approve loop`` of the same N (the old bridge's floor).
Times are the process's CPU time (``time.process_time``), so that a loaded shared
machine's preemption stays out (all of it is CPU-bound). ``--quick`` runs N=16 only,
with one repeat (a smoke run).

Run: ``python benchmarks/bench_approvals.py [--quick]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from _harness import fmt_ratio, header, markdown_table, parse_args
from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_adapter import CallbackApproval, Executor, Registry
from agent_adapter.bridges.openai_agents import INTEGRATION, function_tools, resolve_interruptions
from agent_adapter.ledger import MemoryLedger

CONFIG = RunConfig(tracing_disabled=True)
APPROVE = CallbackApproval(lambda request: True, reviewer="host")


async def _paused(n: int) -> tuple[Agent[Any], Any, list[str]]:
    """A run paused on ``n`` refund calls: (agent, result, the order ids that ran)."""
    registry = Registry()
    ran: list[str] = []

    @registry.tool(confirm=True)
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order."""
        ran.append(order_id)
        return "ok"

    executor = Executor(registry, ledger=MemoryLedger())
    calls = [
        function_call("refund", {"order_id": f"A{i}", "amount_cents": 5}, call_id=f"c{i}")
        for i in range(n)
    ]
    model = ScriptedModel([calls, [assistant_message("done")]])
    agent = Agent(name="support", tools=function_tools(registry, executor=executor), model=model)
    result = await Runner.run(agent, "go", run_config=CONFIG)
    assert len(result.interruptions) == n
    return agent, result, ran


async def _ours(n: int) -> tuple[float, float]:
    """(resolve s, resume s) for one fresh paused run of ``n`` calls."""
    agent, result, ran = await _paused(n)
    paused = result.to_state()
    started = time.process_time()
    state = await resolve_interruptions(paused, APPROVE)
    resolved = time.process_time()
    await Runner.run(agent, state, run_config=CONFIG)
    resumed = time.process_time()
    assert len(ran) == n, f"{len(ran)} of {n} calls ran"
    INTEGRATION.tokens.clear()
    return resolved - started, resumed - resolved


async def _sdk_direct(n: int) -> float:
    """The SDK calls our resolve makes: get_interruptions, then approve_tool per call."""
    _agent, result, _ran = await _paused(n)
    state = result.to_state()
    started = time.process_time()
    items = state.get_interruptions()
    context = state._context  # the bridge's own access (see _approvals._direct)
    for item in state._current_step.interruptions:
        context.approve_tool(item)
    elapsed = time.process_time() - started
    assert len(items) == n
    return elapsed


async def _sdk_loop(n: int) -> float:
    """The SDK's own per-item ``state.approve`` over ``get_interruptions()``."""
    _agent, result, _ran = await _paused(n)
    state = result.to_state()
    started = time.process_time()
    for item in state.get_interruptions():
        state.approve(item)
    return time.process_time() - started


async def main() -> None:
    args = parse_args(__doc__ or "")
    sizes = (16,) if args.quick else (64, 256)
    repeats = 1 if args.quick else 3
    print(header())
    rows = []
    for n in sizes:
        ours = [await _ours(n) for _ in range(repeats)]
        direct = [await _sdk_direct(n) for _ in range(repeats)]
        # The old loop is quadratic: at 256 one repeat is a minute on a loaded machine.
        loop = [await _sdk_loop(n) for _ in range(1 if n > 64 else repeats)]
        resolve = statistics.median(r for r, _ in ours)
        resume = statistics.median(r for _, r in ours)
        base = statistics.median(loop)
        for name, value in (
            ("resolve_interruptions (ours)", resolve),
            ("resume: Runner.run on the resolved state", resume),
            ("SDK decide, direct (part of ours)", statistics.median(direct)),
            ("SDK state.approve loop (the old bridge's floor)", base),
        ):
            rows.append((f"N={n}: {name}", f"{value * 1000:,.1f}", fmt_ratio(value / base)))
    print(f"### resolve + resume of N approvals ({repeats} repeats, median, process CPU time)\n")
    print(markdown_table(("what", "CPU ms", "ratio to the SDK's approve loop"), rows))
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
