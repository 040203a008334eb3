"""The agent tests' registry, workflow worker and history helpers.

Shared by the tests (an in-process worker) and ``agents_worker.py`` (a worker process the
tests kill), so both run the same registry on the same ledger, with Temporal's OpenAI
plugin on the client and a ``PlannedModel`` behind every model call.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

from agents_tools import shop_registry
from agents_workflows import ShopAgent
from temporal_app import running_worker
from temporalio.client import Client, WorkflowHistory
from temporalio.openai_agents import OpenAIAgentsPlugin
from temporalio.worker import Replayer

from agent_adapter import Executor
from agent_adapter.testing.temporal_openai_agents import agent_client

#: The model activity the plugin schedules for each model call.
MODEL_ACTIVITY = "invoke_model_activity"


def running_agent_worker(
    client: Client, *args: Any, **kwargs: Any
) -> AbstractAsyncContextManager[Executor]:
    """``running_worker`` (its arguments) for ``ShopAgent`` on ``shop_registry``, with the
    plugin on ``client``: the tool activities run on an executor opened on ``ledger``."""
    return running_worker(
        agent_client(client), *args, workflow=ShopAgent, registry=shop_registry, **kwargs
    )


def scheduled(history: WorkflowHistory, activity: str) -> int:
    """How many times the workflow scheduled ``activity`` (each model call is one)."""
    return sum(
        1
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    )


async def replay(history: WorkflowHistory) -> None:
    """Replay ``history`` under ``ShopAgent`` with the plugin, as a new worker would."""
    await Replayer(workflows=[ShopAgent], plugins=[OpenAIAgentsPlugin()]).replay_workflow(history)
