"""A real worker process for the crash tests.

``temporal_worker.py ADDRESS QUEUE LEDGER EFFECTS [CRASH_TOOL MARKER]``.

Prints ``ready`` once it polls; runs until killed. With CRASH_TOOL it kills itself
(SIGKILL) right after that tool's outcome is committed. Sticky caching is off
(``max_cached_workflows=0``): after its death, the workflow's next task goes to the
shared queue at once, not to this dead worker's sticky queue first.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from temporal_app import CrashAfterCommit, running_worker
from temporalio.client import Client


async def main(
    argv: list[str], running: Callable[..., AbstractAsyncContextManager[Any]] = running_worker
) -> None:
    """Serve as ``running(...)`` (``running_worker``) sets the worker up, until killed;
    ``agents_worker.py`` passes its own."""
    address, queue, ledger, effects = argv[:4]
    hooks = (CrashAfterCommit(argv[4], Path(argv[5])),) if len(argv) > 4 else ()
    client = await Client.connect(address)
    async with running(client, queue, Path(ledger), Path(effects), hooks=hooks, cached_workflows=0):
        print("ready", flush=True)
        await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
