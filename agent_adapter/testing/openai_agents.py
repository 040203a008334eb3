"""The conformance kit's driver for the OpenAI Agents bridge: the real ``Runner.run``.

Each attempt runs an agent whose ``ScriptedModel`` makes the one call; a paused call is
decided through ``resolve_interruptions`` with a port that gives the attempt's answer
(approve, deny, edit) or with the executor's ledger's ``DeferredApproval`` (left pending).
"""

from __future__ import annotations

from typing import Any

import msgspec
from agents import Agent, RunConfig
from agents.testing import ScriptedModel, assistant_message, function_call

from ..bridges.openai_agents import NAME, function_tools, resolve_interruptions, run
from ..engine import (
    ApprovalRequest,
    CallbackApproval,
    Decision,
    DeferredApproval,
    Executor,
    new_id,
)
from ..errors import MODEL_VISIBLE_KINDS, AdapterError
from ._kit import Attempt, Channel, Leave, Reply, decision_of

__all__ = ["OpenAIAgentsDriver"]

_CONFIG = RunConfig(tracing_disabled=True)


def _output(model: ScriptedModel, call_id: str) -> Any:
    """The function_call_output the model received for ``call_id``, decoded when JSON."""
    last = model.last_call
    if last is None:
        return None
    for item in last.input:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            if item.get("call_id") == call_id:
                text = item.get("output")
                try:
                    return msgspec.json.decode(text) if isinstance(text, str) else text
                except msgspec.DecodeError:
                    return text
    return None


class OpenAIAgentsDriver:
    """Drives the OpenAI Agents bridge through ``Runner.run`` with a ``ScriptedModel``.

    The bridge's table: the model-visible kinds are the tool's output, the others are
    raised to the host (unwrapped from the SDK's ``UserError`` by ``run``).
    """

    name = NAME
    supports_edit = True

    def channel(self, kind: str) -> Channel:
        """Model-visible kinds go to the model; the rest are raised to the host."""
        return "model" if kind in MODEL_VISIBLE_KINDS else "host"

    async def call(self, executor: Executor, attempt: Attempt) -> Reply:
        """One model turn that calls the tool, decided and resumed as the host would."""
        call_id = attempt.call_id or new_id("call")
        model = ScriptedModel(
            [
                [function_call(attempt.tool, attempt.args, call_id=call_id)],
                [assistant_message("done")],
            ]
        )
        agent: Agent[Any] = Agent(
            name="kit",
            instructions="Help.",
            tools=function_tools(executor.registry, executor=executor),  # type: ignore[arg-type]
            model=model,
        )
        context = {"run_id": attempt.run_id} if attempt.run_id else None
        asked = 0
        answer = attempt.answer

        def decide(request: ApprovalRequest) -> Decision:
            nonlocal asked
            asked += 1
            return decision_of(answer)

        try:
            result = await run(agent, "go", run_config=_CONFIG, context=context)
            while result.interruptions:
                if isinstance(answer, Leave):
                    deferred = DeferredApproval(executor.ledger)
                    state = await resolve_interruptions(
                        result, deferred, run_id=attempt.run_id or ""
                    )
                    if state.get_interruptions():
                        return Reply(kind="approval-pending", channel="host", asked=asked)
                else:
                    state = await resolve_interruptions(
                        result, CallbackApproval(decide), run_id=attempt.run_id or ""
                    )
                result = await run(agent, state, run_config=_CONFIG)
        except AdapterError as exc:
            return Reply(kind=exc.kind, channel="host", asked=asked)
        output = _output(model, call_id)
        if isinstance(output, dict) and isinstance(output.get("error"), dict):
            return Reply(kind=output["error"].get("kind"), channel="model", asked=asked)
        return Reply(value=output, asked=asked)
