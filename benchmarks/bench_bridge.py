"""The bridge's whole per-call overhead beside the SDK's own ``@function_tool``, same run.

Every variant awaits ``tool.on_invoke_tool(ToolContext, raw_args)`` for the same trivial
function (``add(a, b)``), with a fresh ToolContext (a new call id) per call:

- ``sdk @function_tool`` (baseline): the SDK parses the JSON, validates with Pydantic and
  calls the function; nothing is recorded. The function is async in every variant (a
  sync one would add the SDK's thread hop to the baseline).
- ``bridge FunctionTool``: our tool; the executor validates (msgspec), digests, and
  appends requested / validated / started / succeeded to a ``MemoryLedger``.
- ``bridge FunctionTool, confirm=True + token``: a gated tool whose call carries a token
  issued just before it (issue + take, approval from the context: two more events).
- ``executor.run_spec`` alone: the engine without the bridge (called as the bridge calls
  it: a fresh run id per call, metadata), for the split.
- ``ToolContext()`` alone: building the per-call context, part of every tool figure;
  and ``ToolContext() + executor.run_spec``: both without the bridge, so that the
  bridge's own share is the difference, per round.
- ``langgraph @tool`` (the LangGraph baseline): LangChain's own ``@tool`` for the same
  function, called as a ToolNode calls it (``await tool.ainvoke(tool_call)``, a ToolCall
  with a fresh id, answered with a ToolMessage); nothing is recorded.
- ``langgraph bridge tool``: the LangGraph bridge's tool, called the same way with the
  ``ToolRuntime`` a ToolNode injects (a fresh thread per call, as the OpenAI variant has
  a fresh run per call); the executor validates, digests and records as above.

The LangGraph bridge's ratio to its own baseline is printed beside the OpenAI bridge's
ratio to its own, from the same run, and their quotient (target: at most 1.3).

A fresh executor (and memory ledger) per block keeps ledger growth out of the figures.

The pydantic-ai bridge (``bench_pydantic_ai``, same run): ``ExecutorToolset`` beside
pydantic-ai's own ``FunctionToolset`` for the same function, each timed as pydantic-ai's
tool manager calls a toolset (the tool's ``args_validator.validate_json`` on the model's
JSON, then ``call_tool`` with a fresh per-call ``RunContext``); then a whole ``Agent.run``
with a ``FunctionModel`` that calls the tool once, through each toolset. Its ratio is
compared with the OpenAI bridge's ratio above (target: within 1.3x of it).

Run: ``python benchmarks/bench_bridge.py [--quick] [--clock wall|cpu]`` (wall by default;
``cpu``, the thread's CPU time, keeps a loaded shared machine's preemption out: every
variant here is CPU-bound in the calling thread).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from typing import Any

from _harness import (
    DEFAULT_PACKAGES,
    Variant,
    abench,
    fmt_ns,
    fmt_pct,
    fmt_ratio,
    header,
    markdown_table,
    paired_ratio,
    parse_args,
    results_table,
    summarize,
)
from agents import function_tool as sdk_function_tool
from agents.agent_tool_state import set_agent_tool_state_scope
from agents.tool_context import ToolContext
from langchain_core.tools import tool as langchain_tool
from langgraph.prebuilt import ToolRuntime
from pydantic_ai import Agent
from pydantic_ai import RunContext as PydanticRunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import RunUsage

from agent_adapter import CallContext, Decision, Executor, Registry, digest
from agent_adapter.bridges.langgraph import NAME as LANGGRAPH
from agent_adapter.bridges.langgraph import langgraph_tools
from agent_adapter.bridges.openai_agents import INTEGRATION, function_tool
from agent_adapter.bridges.pydantic_ai import NAME as PYDANTIC_AI
from agent_adapter.bridges.pydantic_ai import ExecutorToolset
from agent_adapter.ledger import MemoryLedger

ARGS = '{"a":1,"b":2}'
SCOPE = "bench-scope"
_ids = itertools.count()


async def add_async(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _registry() -> Registry:
    registry = Registry()
    registry.tool(add_async, name="add", targets=["openai_agents", PYDANTIC_AI])
    registry.tool(add_async, name="add_gated", confirm=True, targets=["openai_agents", PYDANTIC_AI])
    return registry


def _langgraph_registry() -> Registry:
    registry = Registry()
    registry.tool(add_async, name="add", targets=[LANGGRAPH])
    return registry


REGISTRY = _registry()
LANGGRAPH_REGISTRY = _langgraph_registry()
ARGS_DICT = {"a": 1, "b": 2}


def _tool_call(**injected: Any) -> dict[str, Any]:
    return {
        "name": "add",
        "args": {**ARGS_DICT, **injected},
        "id": f"c{next(_ids)}",
        "type": "tool_call",
    }


def _runtime() -> ToolRuntime[Any, Any]:
    """The ToolRuntime a ToolNode injects (a fresh thread per call)."""
    return ToolRuntime(
        state={"messages": []},
        context=None,
        config={"configurable": {"thread_id": f"t{next(_ids)}"}, "metadata": {}},
        stream_writer=lambda _chunk: None,
        tool_call_id=None,
        store=None,
    )


def _context(name: str) -> ToolContext[Any]:
    ctx: ToolContext[Any] = ToolContext(
        context=None, tool_name=name, tool_call_id=f"c{next(_ids)}", tool_arguments=ARGS
    )
    set_agent_tool_state_scope(ctx, SCOPE)
    return ctx


class Holder:
    """The per-block state: a fresh executor and the tools bound to it."""

    def __init__(self) -> None:
        self.reset(0)

    def reset(self, n: int) -> None:
        self.executor = Executor(REGISTRY, ledger=MemoryLedger())
        self.tool = function_tool(REGISTRY.get("add"), executor=self.executor)
        self.gated = function_tool(REGISTRY.get("add_gated"), executor=self.executor)
        self.lg_executor = Executor(LANGGRAPH_REGISTRY, ledger=MemoryLedger())
        (self.lg_tool,) = langgraph_tools(LANGGRAPH_REGISTRY, executor=self.lg_executor)


def main() -> None:
    args = parse_args(__doc__ or "")
    sdk_tool = sdk_function_tool(add_async, name_override="add")
    holder = Holder()
    spec = REGISTRY.get("add")
    decision = Decision(approved=True, reviewer="bench")
    tokens = INTEGRATION.tokens
    args_digest = digest(REGISTRY.get("add_gated").validate(ARGS))

    async def sdk_op() -> Any:
        return await sdk_tool.on_invoke_tool(_context("add"), ARGS)

    async def bridge_op() -> Any:
        return await holder.tool.on_invoke_tool(_context("add"), ARGS)

    async def gated_op() -> Any:
        ctx = _context("add_gated")
        binding = (SCOPE, ctx.tool_call_id, "add_gated")
        tokens.issue(binding, args_digest, decision)
        return await holder.gated.on_invoke_tool(ctx, ARGS)

    async def engine_op() -> Any:
        # As the bridge calls it with tracing off: a fresh run per call, with metadata.
        ctx = CallContext(
            run_id=f"r{next(_ids)}", call_id=f"c{next(_ids)}", metadata={"integration": "x"}
        )
        return await holder.executor.run_spec(spec, ARGS, ctx)

    async def context_engine_op() -> Any:
        tool_ctx = _context("add")
        ctx = CallContext(
            run_id=f"r{next(_ids)}", call_id=tool_ctx.tool_call_id, metadata={"integration": "x"}
        )
        return await holder.executor.run_spec(spec, ARGS, ctx)

    async def context_op() -> Any:
        return _context("add")

    async def add_plain(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    # Evaluated annotations, as a module without postponed annotations has: LangChain
    # reads a tool function's type hints on every call, and this module's strings would
    # be compiled each time, slowing the baseline for a reason of this file's own.
    add_plain.__annotations__ = {"a": int, "b": int, "return": int}
    lg_plain = langchain_tool(add_plain)

    async def lg_plain_op() -> Any:
        return await lg_plain.ainvoke(_tool_call())

    async def lg_bridge_op() -> Any:
        runtime = _runtime()
        call = _tool_call(agent_adapter_runtime=runtime)
        runtime.tool_call_id = call["id"]
        return await holder.lg_tool.ainvoke(call)

    async def check() -> None:
        assert await sdk_op() == 3
        assert await bridge_op() == "3"
        assert await gated_op() == "3"  # the token approved it (no port: it would be denied)
        assert await engine_op() == 3
        assert (await lg_plain_op()).content == "3"
        reply = await lg_bridge_op()
        assert (reply.content, reply.status) == ("3", "success")

    async def run() -> Any:
        await check()
        return await abench(
            [
                Variant("sdk @function_tool", sdk_op),
                Variant("bridge FunctionTool", bridge_op, setup=holder.reset),
                Variant("bridge FunctionTool, confirm=True + token", gated_op, setup=holder.reset),
                Variant("executor.run_spec alone", engine_op, setup=holder.reset),
                Variant("ToolContext() alone", context_op),
                Variant("ToolContext() + executor.run_spec", context_engine_op, setup=holder.reset),
                Variant("langgraph @tool", lg_plain_op),
                Variant("langgraph bridge tool", lg_bridge_op, setup=holder.reset),
            ],
            baseline="sdk @function_tool",
            rounds=args.rounds,
            block_ms=args.block_ms,
            clock=args.clock or "wall",
        )

    results = asyncio.run(run())
    print(header((*DEFAULT_PACKAGES, "pydantic-ai-slim")))
    print(
        results_table(
            results, title="Per-call overhead: on_invoke_tool, ratio to the SDK's @function_tool"
        )
    )
    bridge = results["bridge FunctionTool"].samples
    parts = results["ToolContext() + executor.run_spec"].samples
    own, spread = summarize([b - p for b, p in zip(bridge, parts, strict=True)])
    print(
        "The bridge's own share (bridge FunctionTool - (ToolContext() + executor.run_spec), "
        f"per round): {fmt_ns(own)} ns (spread {fmt_pct(spread)}).\n"
    )
    openai_ratio = paired_ratio(
        results["bridge FunctionTool"].samples, results["sdk @function_tool"].samples
    )
    lg_ratio = paired_ratio(
        results["langgraph bridge tool"].samples, results["langgraph @tool"].samples
    )
    print(
        markdown_table(
            ["bridge", "bridge / framework's own tool call", "quotient to the OpenAI bridge's"],
            [
                ["OpenAI Agents (FunctionTool / @function_tool)", fmt_ratio(openai_ratio), "1.00x"],
                [
                    "LangGraph (bridge tool / @tool, both through tool.ainvoke(tool_call))",
                    fmt_ratio(lg_ratio),
                    f"{lg_ratio / openai_ratio:.2f}x (target <= 1.3x)",
                ],
            ],
        )
    )
    added = {
        bridge: summarize(
            [
                b - f
                for b, f in zip(results[bridge].samples, results[framework].samples, strict=True)
            ]
        )
        for bridge, framework in (
            ("bridge FunctionTool", "sdk @function_tool"),
            ("langgraph bridge tool", "langgraph @tool"),
        )
    }
    print(
        "\nAdded per call (bridge - the framework's own tool call, per round): OpenAI Agents "
        f"{fmt_ns(added['bridge FunctionTool'][0])} ns, LangGraph "
        f"{fmt_ns(added['langgraph bridge tool'][0])} ns (a LangChain tool call is itself "
        "several times the SDK's, so the same executor cost is a smaller ratio)."
    )
    print(f"\n{args.rounds} rounds, median; spread = inter-quartile range / median.\n")
    pydantic_baseline = results["bridge FunctionTool"].ratio
    assert pydantic_baseline is not None
    bench_pydantic_ai(args, pydantic_baseline)


class PydanticHolder:
    """The pydantic-ai bridge's toolset and agent, built once, and a fresh executor per block.

    The agent is built once, as the plain one is: a new Agent's first run does one-time
    work that would otherwise be charged to the bridge's few runs per block.
    """

    def __init__(self) -> None:
        self.executor = Executor(REGISTRY, ledger=MemoryLedger())
        self.toolset = ExecutorToolset(REGISTRY, executor=self.executor)
        self.agent = Agent(_one_call_model(), toolsets=[self.toolset])

    def reset(self, n: int) -> None:
        self.executor = Executor(REGISTRY, ledger=MemoryLedger())
        self.toolset.executor = self.executor


def _one_call_model() -> FunctionModel:
    """A FunctionModel that calls ``add`` once, then answers with text."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("add", ARGS, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def bench_pydantic_ai(args: Any, openai_ratio: float) -> None:
    """The pydantic-ai bridge's rows, timed in this run, beside the OpenAI bridge's ratio."""
    holder = PydanticHolder()
    plain = FunctionToolset([add_async], id="plain")
    base = PydanticRunContext(
        deps=None, model=TestModel(), usage=RunUsage(), conversation_id="conv-bench"
    )

    def ctx_for(name: str, *, approved: bool = False) -> PydanticRunContext[None]:
        # What pydantic-ai's tool manager builds for every call (dataclasses.replace).
        return replace(
            base, tool_name=name, tool_call_id=f"c{next(_ids)}", tool_call_approved=approved
        )

    async def run() -> Any:
        plain_tool = (await plain.get_tools(base))["add_async"]
        tools = await holder.toolset.get_tools(base)
        ours, gated = tools["add"], tools["add_gated"]
        args_digest = digest(REGISTRY.get("add_gated").validate(ARGS))
        decision = Decision(approved=True, reviewer="bench")
        plain_agent = Agent(_one_call_model())
        plain_agent.tool_plain(add_async, name="add")

        async def plain_op() -> Any:
            ctx = ctx_for("add_async")
            return await plain.call_tool(
                "add_async", plain_tool.args_validator.validate_json(ARGS), ctx, plain_tool
            )

        async def bridge_op() -> Any:
            ctx = ctx_for("add")
            toolset = holder.toolset
            return await toolset.call_tool(
                "add", ours.args_validator.validate_json(ARGS), ctx, ours
            )

        async def gated_op() -> Any:
            ctx = ctx_for("add_gated", approved=True)
            toolset = holder.toolset
            toolset.tokens.issue(
                ("conv-bench", ctx.tool_call_id or "", "add_gated"), args_digest, decision
            )
            return await toolset.call_tool(
                "add_gated", gated.args_validator.validate_json(ARGS), ctx, gated
            )

        async def engine_op() -> Any:
            ctx = CallContext(
                run_id="conv-bench",
                call_id=f"c{next(_ids)}",
                metadata={"integration": PYDANTIC_AI},
            )
            return await holder.executor.run_spec(REGISTRY.get("add"), ARGS, ctx)

        async def agent_plain_op() -> Any:
            return (await plain_agent.run("go")).output

        async def agent_bridge_op() -> Any:
            return (await holder.agent.run("go")).output

        assert (await plain_op(), await bridge_op(), await gated_op(), await engine_op()) == (
            3,
            3,
            3,
            3,
        )
        assert await agent_plain_op() == await agent_bridge_op() == "done"
        calls = await abench(
            [
                Variant("pydantic-ai FunctionToolset", plain_op),
                Variant("bridge ExecutorToolset", bridge_op, setup=holder.reset),
                Variant(
                    "bridge ExecutorToolset, confirm=True + token", gated_op, setup=holder.reset
                ),
                Variant(
                    "executor.run_spec alone (one conversation)", engine_op, setup=holder.reset
                ),
            ],
            baseline="pydantic-ai FunctionToolset",
            rounds=args.rounds,
            block_ms=args.block_ms,
            clock=args.clock or "wall",
        )
        runs = await abench(
            [
                Variant("Agent.run, plain tool_plain", agent_plain_op),
                Variant("Agent.run, ExecutorToolset", agent_bridge_op, setup=holder.reset),
            ],
            baseline="Agent.run, plain tool_plain",
            rounds=args.rounds,
            block_ms=args.block_ms,
            clock=args.clock or "wall",
        )
        return calls, runs

    calls, runs = asyncio.run(run())
    print(
        results_table(
            calls,
            title="pydantic-ai: per call (validate_json + call_tool), ratio to FunctionToolset",
        )
    )
    print(results_table(runs, title="pydantic-ai: one Agent.run with one tool call"))
    ratio = calls["bridge ExecutorToolset"].ratio
    assert ratio is not None
    relative = ratio / openai_ratio
    print(
        f"pydantic-ai bridge ratio {ratio:.3f} / OpenAI bridge ratio {openai_ratio:.3f} = "
        f"{relative:.2f}x (target <= 1.3x: {'met' if relative <= 1.3 else '**missed**'}).\n"
    )


if __name__ == "__main__":
    main()
