"""The conformance kit's driver for the pydantic-ai bridge: a real ``Agent`` run.

Each attempt runs an ``Agent`` whose model (a :class:`ScriptedModel`, pydantic-ai's
``FunctionModel`` underneath) makes the one call; a paused call (``DeferredToolRequests``)
is decided through ``ExecutorToolset.resolve_deferred`` with a port that gives the
attempt's answer, or with the ledger's ``DeferredApproval`` (left pending), and the run is
resumed from its message history. ``ScriptedModel`` is for users' own tests too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from ..bridges.pydantic_ai import NAME, ExecutorToolset
from ..engine import (
    ApprovalPort,
    ApprovalRequest,
    CallbackApproval,
    Decision,
    DeferredApproval,
    Executor,
    new_id,
)
from ..errors import MODEL_VISIBLE_KINDS, AdapterError
from ._kit import Attempt, Channel, Leave, Reply, decision_of

__all__ = ["PydanticAIDriver", "ScriptedModel", "tool_call"]

_decode = msgspec.json.decode


def tool_call(tool: str, args: dict[str, Any] | str, call_id: str) -> ToolCallPart:
    """A model's tool call; a dict is sent as JSON text, as a provider's model sends it."""
    text = args if isinstance(args, str) else msgspec.json.encode(args).decode()
    return ToolCallPart(tool_name=tool, args=text, tool_call_id=call_id)


class ScriptedModel:
    """A model with no network: turn ``n`` of a run answers with ``turns[n]``.

    A turn is a list of tool calls or a text answer. The turn is chosen by how many model
    responses the history holds, so a run resumed from its history goes on where it
    paused. ``returns`` holds every tool return the model was sent, by tool call id.
    """

    def __init__(self, turns: Sequence[Sequence[ToolCallPart] | str]) -> None:
        self.turns = list(turns)
        self.returns: dict[str, ToolReturnPart] = {}
        self.model = FunctionModel(self._respond)

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    if isinstance(part, ToolReturnPart):
                        self.returns[part.tool_call_id] = part
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        script = self.turns[min(turn, len(self.turns) - 1)]
        if isinstance(script, str):
            return ModelResponse(parts=[TextPart(script)])
        return ModelResponse(parts=list(script))

    def output(self, call_id: str) -> tuple[Any, str | None]:
        """The tool's output the model saw for ``call_id`` (JSON decoded) and its outcome."""
        part = self.returns.get(call_id)
        if part is None:
            return None, None
        content: Any = part.content
        if isinstance(content, str):
            try:
                content = _decode(content)
            except msgspec.DecodeError:
                pass
        return content, part.outcome


class PydanticAIDriver:
    """Drives the pydantic-ai bridge through ``Agent.run`` with a :class:`ScriptedModel`.

    The bridge's table: the model-visible kinds are tool failures the model sees
    (``ToolDenied`` for approval-denied), the others are raised to the host.
    """

    name = NAME
    supports_edit = True

    def channel(self, kind: str) -> Channel:
        """Model-visible kinds go to the model; the rest are raised to the host."""
        return "model" if kind in MODEL_VISIBLE_KINDS else "host"

    async def call(self, executor: Executor, attempt: Attempt) -> Reply:
        """One model turn that calls the tool, decided and resumed as the host would."""
        call_id = attempt.call_id or new_id("call")
        conversation = attempt.run_id or new_id("run")
        model = ScriptedModel([[tool_call(attempt.tool, attempt.args, call_id)], "done"])
        toolset = ExecutorToolset(executor.registry, executor=executor)
        agent = Agent(model.model, toolsets=[toolset], output_type=[str, DeferredToolRequests])
        asked = 0
        answer = attempt.answer

        def decide(request: ApprovalRequest) -> Decision:
            nonlocal asked
            asked += 1
            return decision_of(answer)

        port: ApprovalPort = (
            DeferredApproval(executor.ledger)
            if isinstance(answer, Leave)
            else CallbackApproval(decide)
        )
        try:
            result = await agent.run("go", conversation_id=conversation)
            while isinstance(result.output, DeferredToolRequests):
                review = await toolset.resolve_deferred(result.output, port)
                if review.pending:
                    return Reply(kind="approval-pending", channel="host", asked=asked)
                result = await agent.run(
                    message_history=result.all_messages(), deferred_tool_results=review.results
                )
        except AdapterError as exc:
            return Reply(kind=exc.kind, channel="host", asked=asked)
        output, outcome = model.output(call_id)
        if outcome in ("failed", "denied") and isinstance(output, dict):
            error = output.get("error")
            if isinstance(error, dict):
                return Reply(kind=error.get("kind"), channel="model", asked=asked)
        return Reply(value=output, asked=asked)
