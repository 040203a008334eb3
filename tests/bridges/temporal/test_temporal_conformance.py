"""The bridge conformance kit, run on the Temporal bridge through a real dev server."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from temporal_support import require

require()

from temporalio.client import WorkflowExecutionStatus  # noqa: E402

from agent_adapter.engine import Executor  # noqa: E402
from agent_adapter.integrations.temporal import NAME  # noqa: E402
from agent_adapter.ledger import MemoryLedger  # noqa: E402
from agent_adapter.testing import (  # noqa: E402
    SCENARIOS,
    Approve,
    Attempt,
    ConformanceFailure,
    Reply,
    Scenario,
    Tools,
    run_scenario,
    scenarios_for,
)
from agent_adapter.testing.temporal import TemporalDriver  # noqa: E402

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.usefixtures("bounded")]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_the_temporal_bridge_conforms(temporal_env: Any, scenario: Scenario) -> None:
    """Each shared scenario holds for the Temporal bridge (see the scenario's ``proves``)."""
    await run_scenario(TemporalDriver(temporal_env.client), scenario)


async def test_every_scenario_applies_to_temporal(temporal_env: Any) -> None:
    """An edited approval travels through the gate's Update, so no scenario is left out."""
    assert scenarios_for(TemporalDriver(temporal_env.client)) == list(SCENARIOS)


class NewRunEachTime(TemporalDriver):
    """A broken bridge: a repeat reaches the executor under a new workflow id (run id)."""

    async def call(self, executor: Executor, attempt: Attempt) -> Reply:
        return await super().call(executor, dataclasses.replace(attempt, run_id=None))


async def test_the_kit_catches_a_temporal_repeat_under_a_new_run(temporal_env: Any) -> None:
    """The kit fails a driver whose repeat is a new run: the refund is then refused as a
    duplicate effect instead of being answered from the ledger."""
    (repeated,) = [s for s in SCENARIOS if s.name == "repeated"]
    with pytest.raises(ConformanceFailure) as caught:
        await run_scenario(NewRunEachTime(temporal_env.client), repeated)
    assert str(caught.value) == (
        "repeated: the repeated value: got None, expected {'order_id': 'A1', 'refunded': 500}"
    )


async def test_an_attempt_past_its_bound_is_closed_and_its_ids_can_be_used_again(
    temporal_env: Any,
) -> None:
    """Past ``timeout_s`` the driver raises ``TimeoutError`` and terminates the workflow,
    so a later attempt under the same workflow id starts (and, here, is asked anew)."""
    client = temporal_env.client
    ids = {"run_id": f"kit-bound-{uuid.uuid4().hex[:8]}", "call_id": "kit-call-1"}
    attempt = Attempt("refund", {"order_id": "A1", "amount_cents": 500}, Approve(), **ids)
    tools = Tools(NAME)
    async with Executor(tools.registry, ledger=MemoryLedger()) as executor:
        with pytest.raises(TimeoutError):
            await TemporalDriver(client, timeout_s=0).call(executor, attempt)
        first = await client.get_workflow_handle(ids["run_id"]).describe()
        again = await TemporalDriver(client).call(executor, attempt)
    assert (first.status, again, tools.ran) == (
        WorkflowExecutionStatus.TERMINATED,
        Reply(value={"order_id": "A1", "refunded": 500}, asked=1),
        [("refund", {"order_id": "A1", "amount_cents": 500})],
    )
