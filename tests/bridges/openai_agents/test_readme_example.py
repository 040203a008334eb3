"""The bridge page's "Run and approve" example runs as written, and so does the README's copy."""

from __future__ import annotations

import ast
import subprocess
import sys
from typing import Any

from _docs import example as docs_example
from agents import Agent, RunConfig, Runner, Tool
from agents.testing import ScriptedModel as _ScriptedModel
from agents.testing import assistant_message, function_call

from agent_adapter import ApprovalRequest, CallbackApproval, Executor, Registry

# Verbatim from the bridge's contract (seeds/000, "Run and approve").
SNIPPET = """\
from agent_adapter.integrations.openai_agents import function_tools, resolve_interruptions

tools: list[Tool] = list(function_tools(registry, executor=Executor()))
agent = Agent(name="support", instructions="Help.", tools=tools, model=ScriptedModel())
config = RunConfig(tracing_disabled=True)

result = await Runner.run(agent, "Refund order A1", run_config=config)
if result.interruptions:  # `refund` has confirm=True: the run paused for approval
    # One-use tokens for the approved calls; the SDK's own flag never approves alone.
    state = await resolve_interruptions(result, CallbackApproval(review))
    result = await Runner.run(agent, state, run_config=config)
"""


class ScriptedModel(_ScriptedModel):
    """The example's model: asks for one refund, then answers (no network, no key)."""

    def __init__(self) -> None:
        refund_a1 = {"order_id": "A1", "amount_cents": 500}
        super().__init__(
            [
                [function_call("refund", refund_a1, call_id="call_1")],
                [assistant_message("Refunded order A1.")],
            ]
        )


async def test_the_run_and_approve_snippet_runs_as_written() -> None:
    """The snippet pauses on the confirm=True refund, asks review once, and finishes the run."""
    registry = Registry()
    refunds: list[tuple[str, int]] = []
    reviewed: list[ApprovalRequest] = []

    @registry.tool(confirm=True)
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order. Amounts are integer minor units."""
        refunds.append((order_id, amount_cents))
        return f"refunded {amount_cents} on {order_id}"

    def review(request: ApprovalRequest) -> bool:
        reviewed.append(request)
        return request.args["amount_cents"] < 10_000

    namespace: dict[str, Any] = {
        "registry": registry,
        "review": review,
        "Agent": Agent,
        "CallbackApproval": CallbackApproval,
        "Executor": Executor,
        "RunConfig": RunConfig,
        "Runner": Runner,
        "ScriptedModel": ScriptedModel,
        "Tool": Tool,
    }
    code = compile(SNIPPET, "<run-and-approve>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    await eval(code, namespace)

    assert namespace["result"].final_output == "Refunded order A1."
    assert refunds == [("A1", 500)]
    assert [(r.tool, r.call_id, r.args, r.metadata) for r in reviewed] == [
        (
            "refund",
            "call_1",
            {"order_id": "A1", "amount_cents": 500},
            {"integration": "openai_agents"},
        )
    ]


def test_the_readme_copy_runs() -> None:
    """The README's ``# example: openai-agents`` block runs and prints the review and the answer."""
    example = docs_example("openai-agents")
    missing = [line for line in SNIPPET.splitlines() if line.strip() not in example]
    assert missing == []  # the README shows the contract's snippet, line for line
    done = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "review: refund {'order_id': 'A1', 'amount_cents': 500} {'integration': 'openai_agents'}",
        "Refunded order A1.",
    ]
