"""Testing an OpenAI agent that runs in a Temporal workflow: a planned model and the kit's driver.

``PlannedModel`` is a fake model for ``OpenAIAgentsPlugin(model_provider=...)``: the
prompt carries its plan (``planned_prompt``), and each response is chosen from the
conversation it is given, never from state in the model. So any worker, a restarted one
too, answers a turn the same way, and a replayed turn (whose model activity is never
called again) cannot shift the plan.

``TemporalAgentDriver`` runs the conformance kit through an ``Agent`` whose tools are
``workflow_tools`` in the ``KitAgent`` workflow, on a worker whose client has the plugin
with a ``PlannedModel``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

from agents import Model, ModelResponse, ModelSettings, Usage
from agents.testing import assistant_message, function_call
from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.openai_agents.testing import TestModelProvider

from ..bridges.temporal.openai_agents import error_kind
from ..engine import Executor, new_id
from ._agent_registries import KIT_REGISTRIES
from ._kit import Attempt, Leave, Reply
from ._temporal_agent_workflows import KitAgent
from .temporal import TemporalDriver, run_attempt, settle

__all__ = ["KitAgent", "PlannedModel", "TemporalAgentDriver", "agent_client", "planned_prompt"]

#: The model name a workflow's ``Agent(model=...)`` gives; the provider ignores it.
MODEL = "agent-adapter-planned"
#: A model activity's start-to-close timeout in the plugin this module configures.
_MODEL_TIMEOUT = timedelta(seconds=30)


def planned_prompt(turns: Sequence[Sequence[Mapping[str, Any]]], final: str = "done") -> str:
    """The prompt that makes ``PlannedModel`` ask for ``turns`` (each a list of
    ``{"tool", "args", "call_id"}``, the tool calls of one model response), then answer
    ``final``."""
    plan = {"turns": [[dict(call) for call in turn] for turn in turns], "final": final}
    return json.dumps(plan, sort_keys=True)


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


class PlannedModel(Model):
    """A model whose responses follow the plan in the conversation's first user message.

    Response k is the plan's turn k, where k is how many of its tool calls the
    conversation already holds; after the last turn, the final message. A plan that is
    not JSON is answered with ``final`` text "no plan".
    """

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        """The next planned response for this conversation."""
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        prompt = next((_field(i, "content") for i in items if _field(i, "role") == "user"), None)
        try:
            plan = json.loads(prompt) if isinstance(prompt, str) else None
        except ValueError:
            plan = None
        if not isinstance(plan, dict):
            return ModelResponse(
                output=[assistant_message("no plan")], usage=Usage(), response_id=None
            )
        asked = sum(1 for i in items if _field(i, "type") == "function_call")
        for turn in plan["turns"]:
            if asked < len(turn):
                calls = [function_call(c["tool"], c["args"], call_id=c["call_id"]) for c in turn]
                return ModelResponse(output=calls, usage=Usage(), response_id=None)
            asked -= len(turn)
        return ModelResponse(
            output=[assistant_message(plan.get("final", "done"))], usage=Usage(), response_id=None
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Not planned: the plugin's workflows call ``get_response``."""
        raise NotImplementedError("PlannedModel does not stream")


def agent_client(client: Client, *, model: Model | None = None) -> Client:
    """``client`` (its connection and namespace) with ``OpenAIAgentsPlugin`` whose model
    provider answers every model name with ``model`` (default: a ``PlannedModel``)."""
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=_MODEL_TIMEOUT),
        model_provider=TestModelProvider(model if model is not None else PlannedModel()),
    )
    return Client(client.service_client, namespace=client.namespace, plugins=[plugin])


def _decoded(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


class TemporalAgentDriver(TemporalDriver):
    """Drives ``workflow_tools`` through an agent in a workflow, one execution per attempt.

    ``client`` is connected to a Temporal server; the driver adds the plugin
    (``agent_client``). Each attempt: a fresh task queue and worker (``KitAgent`` and
    ``ToolActivities(executor).activities``), a model that asks for the one call under
    the attempt's call id, then answers. The person answers through the gate's Update
    (``Leave()``: no gate, the executor's port decides). Model-visible kinds come back as
    the tool's output (channel ``"model"``); the others fail the workflow through the
    plugin's ``AgentsWorkflowError`` (channel ``"host"``, the kind by ``error_kind``).
    Its name, edits and channels are ``TemporalDriver``'s; only ``call`` differs.
    """

    def __init__(self, client: Client, *, timeout_s: float = 60.0) -> None:
        super().__init__(agent_client(client), timeout_s=timeout_s)

    async def call(self, executor: Executor, attempt: Attempt) -> Reply:
        """One ``KitAgent`` execution; the gate answered as ``attempt.answer`` says."""
        workflow_id = attempt.run_id or new_id("run")
        call_id = attempt.call_id or new_id("call")
        gated = not isinstance(attempt.answer, Leave)
        queue = f"agent-adapter-kit-agent-{new_id('queue')}"
        call = {"tool": attempt.tool, "args": attempt.args, "call_id": call_id}
        prompt = planned_prompt([[call]])
        KIT_REGISTRIES[queue] = executor.registry
        try:
            return await run_attempt(
                self.client,
                executor,
                KitAgent,
                {"prompt": prompt, "gate": gated},
                workflow_id=workflow_id,
                queue=queue,
                timeout_s=self.timeout_s,
                outcome=lambda handle: settle(
                    handle,
                    attempt.answer,
                    call_id,
                    gated=gated,
                    kind_of=error_kind,
                    reply=_reply,
                ),
            )
        finally:
            KIT_REGISTRIES.pop(queue, None)


def _reply(outputs: Any, asked: int) -> Reply:
    """The agent's outputs: the tool's output, or the error's kind (channel ``"model"``)."""
    output = _decoded(outputs[0]) if outputs else None
    if isinstance(output, dict) and isinstance(output.get("error"), dict):
        return Reply(kind=output["error"].get("kind"), channel="model", asked=asked)
    return Reply(value=output, asked=asked)
