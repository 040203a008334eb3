"""The conformance kit's driver for the LangGraph bridge, and a scripted chat model.

Each attempt runs a real ``create_agent`` graph (one task per tool call, through Send)
with an ``InMemorySaver`` checkpointer, whose ``ScriptedChatModel`` makes the one call; a
paused call is decided through ``review_interrupts`` with a port that gives the attempt's
answer (approve, deny, edit) or with the executor's ledger's ``DeferredApproval`` (left
pending), and resumed with ``Command(resume=...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from ..bridges.langgraph import NAME, langgraph_tools, review_interrupts
from ..engine import ApprovalRequest, CallbackApproval, Decision, DeferredApproval, Executor, new_id
from ..errors import MODEL_VISIBLE_KINDS, AdapterError
from ._kit import Attempt, Channel, Leave, Reply, decision_of

__all__ = ["LangGraphDriver", "ScriptedChatModel", "tool_call_message"]


def tool_call_message(
    name: str, args: dict[str, Any], call_id: str | None = None, **more: Any
) -> AIMessage:
    """An AIMessage that makes one tool call (``call_id`` fresh when not given)."""
    call = {"name": name, "args": args, "id": call_id or new_id("call"), "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call], **more)


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers each turn with the next scripted message, offline.

    ``turns`` are the AIMessages it returns in order (tool calls included); past the end
    it says ``"done"``. ``seen`` holds the messages of each turn's input, so a test can
    check what the model was shown (a tool's output, a refusal). ``bind_tools`` returns
    the model itself: the script, not the tools, decides what it calls.
    """

    turns: list[AIMessage] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "agent-adapter-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        """The model itself (its script does not depend on the tools)."""
        return self

    def _next(self, messages: list[BaseMessage]) -> ChatResult:
        self.seen.append(list(messages))
        turn = len(self.seen) - 1
        message = self.turns[turn] if turn < len(self.turns) else AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._next(messages)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Its own: the default would run _generate in a thread.
        return self._next(messages)


def _output(messages: Sequence[Any], call_id: str) -> tuple[Any, str]:
    """The ToolMessage answering ``call_id``: its content (decoded when JSON), its status."""
    for message in messages:
        if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
            content = message.content
            try:
                decoded = msgspec.json.decode(content) if isinstance(content, str) else content
            except msgspec.DecodeError:
                decoded = content
            return decoded, message.status
    return None, "missing"


class LangGraphDriver:
    """Drives the LangGraph bridge through ``create_agent`` with a ``ScriptedChatModel``.

    The bridge's table: the model-visible kinds are a ``ToolMessage(status="error")``,
    the others are raised to the host out of ``ainvoke`` as themselves.
    """

    name = NAME
    supports_edit = True

    def channel(self, kind: str) -> Channel:
        """Model-visible kinds go to the model; the rest are raised to the host."""
        return "model" if kind in MODEL_VISIBLE_KINDS else "host"

    async def call(self, executor: Executor, attempt: Attempt) -> Reply:
        """One model turn that calls the tool, reviewed and resumed as the host would."""
        call_id = attempt.call_id or new_id("call")
        model = ScriptedChatModel(turns=[tool_call_message(attempt.tool, attempt.args, call_id)])
        agent = create_agent(
            model,
            langgraph_tools(executor.registry, executor=executor),
            checkpointer=InMemorySaver(),
        )
        config: Any = {"configurable": {"thread_id": attempt.run_id or new_id("thread")}}
        asked = 0
        answer = attempt.answer

        def decide(request: ApprovalRequest) -> Decision:
            nonlocal asked
            asked += 1
            return decision_of(answer)

        try:
            result = await agent.ainvoke({"messages": [HumanMessage("go")]}, config)
            while result.get("__interrupt__"):
                port = (
                    DeferredApproval(executor.ledger)
                    if isinstance(answer, Leave)
                    else CallbackApproval(decide)
                )
                review = await review_interrupts(result, port)
                if review.pending:
                    return Reply(kind="approval-pending", channel="host", asked=asked)
                result = await agent.ainvoke(review.command, config)
        except AdapterError as exc:
            return Reply(kind=exc.kind, channel="host", asked=asked)
        output, status = _output(result["messages"], call_id)
        if status == "error" and isinstance(output, dict) and isinstance(output.get("error"), dict):
            return Reply(kind=output["error"].get("kind"), channel="model", asked=asked)
        return Reply(value=output, asked=asked)
