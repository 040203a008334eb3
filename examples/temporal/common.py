"""What the example's commands share: the task queue, connecting, exiting."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from temporalio.client import Client

TASK_QUEUE = "agent-adapter-example"


async def connect(address: str, command: str) -> Client:
    """``Client.connect(address)``; a server that cannot be reached ends the command with
    one line on stderr (exit 1), not a traceback."""
    try:
        return await Client.connect(address)
    except RuntimeError as exc:  # the SDK's "Failed client connect: ..."
        print(f"{command}: cannot reach Temporal at {address}: {exc}", file=sys.stderr)
        exit_now(1)


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once everything is printed, skipping interpreter
    finalization: temporalio's native threads can abort it ("Fatal Python error", SIGABRT,
    seen under load) after the command's work is done."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
