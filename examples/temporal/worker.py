"""The example's worker: ``python worker.py --address HOST:PORT --ledger FILE``.

One executor, opened on the SQLite ledger the workers share, serves the two activities
(``agent_adapter.prepare`` and ``agent_adapter.run``). Prints ``worker ready`` once it
polls, and runs until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from common import TASK_QUEUE, connect, exit_now
from temporalio.client import Client
from temporalio.worker import Worker
from tools import registry
from workflow import RefundAgent

from agent_adapter import Executor
from agent_adapter.integrations.temporal import ToolActivities
from agent_adapter.ledger import SQLiteLedger


def parse(description: str, task_queue: str) -> argparse.Namespace:
    """The worker's options: ``--address``, ``--ledger`` and ``--task-queue``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--address", default="127.0.0.1:7233")
    parser.add_argument("--ledger", default="ledger.db")
    parser.add_argument("--task-queue", default=task_queue)
    return parser.parse_args()


async def serve(client: Client, options: argparse.Namespace, workflow: type, ready: str) -> None:
    """Run ``workflow`` and the tools' activities on ``options.task_queue``; print ``ready``
    once it polls; stop on SIGINT or SIGTERM. (``agent_worker.py`` serves through it too.)"""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with await Executor.open(registry, ledger=SQLiteLedger(options.ledger)) as executor:
        worker = Worker(
            client,
            task_queue=options.task_queue,
            workflows=[workflow],  # RefundAgent here, RefundClerk in agent_worker.py
            activities=ToolActivities(executor).activities,
        )
        async with worker:
            print(ready, flush=True)
            await stop.wait()


async def main() -> None:
    options = parse(__doc__.splitlines()[0], TASK_QUEUE)
    client = await connect(options.address, "worker")
    await serve(client, options, RefundAgent, "worker ready")


if __name__ == "__main__":
    asyncio.run(main())
    exit_now(0)
