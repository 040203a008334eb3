"""Start the example's workflow: ``python starter.py --address HOST:PORT --order A1 ID``.

Prints the workflow id; with ``--wait``, waits for the result and prints it as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from common import TASK_QUEUE, connect, exit_now
from temporalio.service import RPCError
from workflow import RefundAgent


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workflow_id")
    parser.add_argument("--address", default="127.0.0.1:7233")
    parser.add_argument("--order", default="A1")
    parser.add_argument("--approval-timeout", type=float, default=3600.0, metavar="SECONDS")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--wait", action="store_true", help="wait for the result and print it")
    options = parser.parse_args()
    client = await connect(options.address, "starter")
    request = {"order_id": options.order, "approval_timeout_s": options.approval_timeout}
    try:
        handle = await client.start_workflow(
            RefundAgent.run, request, id=options.workflow_id, task_queue=options.task_queue
        )
    except RPCError as exc:  # (an id already running, ...)
        print(f"starter: cannot start {options.workflow_id}: {exc.message}", file=sys.stderr)
        return 1
    print(f"started {handle.id}", flush=True)
    if options.wait:
        print(json.dumps(await handle.result(), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    exit_now(asyncio.run(main()))
