"""A bridge written outside the package, on the public bridge contract only, passes the kit.

The "framework" here is a toy agent loop with its own approval pause: before a tool runs
it may ask its reviewer, who sees the arguments and answers yes, no, an edit or nothing.
The bridge below is what a user writing a bridge for a framework we do not ship would
write: ``register_target`` at import, ``Executor.prepare`` to learn whether the call needs
approval (the engine's own confirm rule) and what the reviewer may see, a ``Decision``
bound to the prepared digest in ``CallContext.approval``, ``run_spec`` for the call, the
error table for where refusals go, ``new_id`` for ids and ``recorded_error`` to read a
recorded refusal back. A test checks it imports no private name of the package.
"""

from __future__ import annotations

import ast
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_adapter.engine import (
    CallContext,
    Decision,
    Executor,
    new_id,
    recorded_error,
    register_target,
)
from agent_adapter.errors import MODEL_VISIBLE_KINDS, AdapterError, ToolArgsInvalid
from agent_adapter.ledger import CallDenied, MemoryLedger
from agent_adapter.testing import (
    Approve,
    Attempt,
    Channel,
    Deny,
    Edit,
    Leave,
    Reply,
    Scenario,
    run_scenario,
    scenarios_for,
)

pytestmark = pytest.mark.usefixtures("bounded")

#: The bridge's target name, registered at import as a bridge outside the package does.
TOY = register_target("toy_agents")

# -- the toy framework -------------------------------------------------------------------

#: What the framework's reviewer answers: True, False, a dict of edited arguments, or
#: None (nobody answered now).
ReviewAnswer = bool | dict[str, Any] | None


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call as the toy framework hands it to a tool (its own ids)."""

    thread: str
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Pause:
    """The framework's approval pause: what its reviewer is shown."""

    tool: str
    shown: Any
    notice: str


@dataclass
class ToyTool:
    """A framework tool: a name and an async body taking the framework's request."""

    name: str
    invoke: Callable[[ToolCallRequest, Callable[[Pause], ReviewAnswer]], Awaitable[Any]]


# -- the bridge (public names only) ------------------------------------------------------


class ToolRefused(Exception):
    """A refusal raised to the host (kinds the model is not shown)."""

    def __init__(self, error: AdapterError) -> None:
        super().__init__(str(error))
        self.error = error


def toy_tools(executor: Executor) -> list[ToyTool]:
    """The registry's tools targeted to this bridge, as the toy framework's tools."""
    return [_tool(executor, spec.name) for spec in executor.registry if spec.exported_to(TOY)]


def _tool(executor: Executor, name: str) -> ToyTool:
    spec = executor.registry.get(name)

    async def invoke(request: ToolCallRequest, review: Callable[[Pause], ReviewAnswer]) -> Any:
        ids = CallContext(
            run_id=request.thread, call_id=request.call_id, metadata={"integration": TOY}
        )
        prepared = await executor.prepare(spec, request.arguments, ids)
        decision: Decision | None = None
        if prepared.ok and prepared.needs_approval:
            answer = review(Pause(spec.name, prepared.shown_args, prepared.effect_notice))
            if isinstance(answer, dict):
                problem = prepared.check_edit(answer)
                if problem is not None:
                    decision = Decision(
                        approved=False, reviewer="toy", reason=f"bad edit: {problem}"
                    )
                else:
                    decision = Decision(
                        approved=True, reviewer="toy", edits=answer, digest=prepared.digest
                    )
            elif answer is not None:
                decision = Decision(approved=answer, reviewer="toy", digest=prepared.digest)
        ctx = CallContext(
            run_id=ids.run_id, call_id=ids.call_id, approval=decision, metadata=ids.metadata
        )
        try:
            return {"ok": await executor.run_spec(spec, request.arguments, ctx)}
        except AdapterError as exc:
            if exc.kind in MODEL_VISIBLE_KINDS:
                return {"error": exc.to_dict()}
            raise ToolRefused(exc) from exc

    return ToyTool(spec.name, invoke)


# -- the driver ----------------------------------------------------------------------------


class ToyDriver:
    """The kit's driver for the toy bridge: one framework tool call per attempt."""

    name = TOY
    supports_edit = True

    def channel(self, kind: str) -> Channel:
        """Model-visible kinds are the tool's output; the others are raised to the host."""
        return "model" if kind in MODEL_VISIBLE_KINDS else "host"

    async def call(self, executor: Executor, attempt: Attempt) -> Reply:
        """Make ``attempt`` through the toy framework, the reviewer answering as told."""
        (tool,) = [t for t in toy_tools(executor) if t.name == attempt.tool]
        asked = 0

        def review(pause: Pause) -> ReviewAnswer:
            nonlocal asked
            asked += 1
            answer = attempt.answer
            if isinstance(answer, Approve):
                return True
            if isinstance(answer, Edit):
                return dict(answer.args)
            if isinstance(answer, Deny | None):
                return False
            assert isinstance(answer, Leave)
            return None

        request = ToolCallRequest(
            thread=attempt.run_id or new_id("run"),
            call_id=attempt.call_id or new_id("call"),
            name=attempt.tool,
            arguments=dict(attempt.args),
        )
        try:
            output = await tool.invoke(request, review)
        except ToolRefused as refused:
            return Reply(kind=refused.error.kind, channel="host", asked=asked)
        if "error" in output:
            return Reply(kind=output["error"]["kind"], channel="model", asked=asked)
        return Reply(value=output["ok"], asked=asked)


@pytest.mark.parametrize("scenario", scenarios_for(ToyDriver()), ids=lambda s: s.name)
async def test_a_bridge_outside_the_package_conforms(scenario: Scenario) -> None:
    """Every kit scenario holds for a bridge built on the public contract alone."""
    await run_scenario(ToyDriver(), scenario)


async def test_a_recorded_denial_reads_back_as_its_error() -> None:
    """``recorded_error`` turns a recorded refusal back into the error the caller got, so
    a bridge can answer a replayed call the way the first answer went."""
    from agent_adapter.testing import Tools

    tools = Tools(TOY)
    ledger = MemoryLedger()
    async with Executor(tools.registry, ledger=ledger) as executor:
        reply = await ToyDriver().call(
            executor, Attempt("refund", {"order_id": "A1", "amount_cents": 5}, Deny())
        )
        (denied,) = [e async for e in ledger.read() if isinstance(e, CallDenied)]
    error = recorded_error(denied)
    assert (reply.kind, reply.asked, type(error).__name__, error.kind) == (  # type: ignore[attr-defined]
        "approval-denied",
        1,
        "ApprovalDenied",
        "approval-denied",
    )


async def test_prepare_records_nothing_and_refuses_bad_arguments_unasked() -> None:
    """``prepare`` appends nothing; invalid arguments come back as the ToolArgsInvalid the
    call would record, never as a call needing approval; an edit is checked by the tool's
    own validator."""
    from agent_adapter.testing import Tools

    tools = Tools(TOY)
    ledger = MemoryLedger()
    async with Executor(tools.registry, ledger=ledger) as executor:
        spec = tools.registry.get("refund")
        ctx = CallContext(run_id="r", call_id="c")
        good = await executor.prepare(spec, {"order_id": "A1", "amount_cents": 5}, ctx)
        bad = await executor.prepare(spec, '{"order_id": "A1", "amount_cents": "5"}', ctx)
        events = [e async for e in ledger.read()]
    assert (
        good.ok,
        good.needs_approval,
        good.effect_key,
        good.effect_notice,
        good.check_edit({"order_id": "A1", "amount_cents": 3}),
        good.check_edit({"order_id": "A1", "amount_cents": "3"}) is not None,
        bad.ok,
        bad.needs_approval,
        isinstance(bad.error, ToolArgsInvalid),
        events,
    ) == (True, True, "refund:A1", "", None, True, False, False, True, [])


def test_the_bridge_uses_only_public_names() -> None:
    """The bridge above imports nothing private of agent_adapter (the contract is enough)."""
    tree = ast.parse(Path(__file__).read_text())
    private = [
        f"{node.module}:{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agent_adapter")
        for alias in node.names
        if alias.name.startswith("_") or any(p.startswith("_") for p in node.module.split("."))  # type: ignore[union-attr]
    ]
    assert private == []
