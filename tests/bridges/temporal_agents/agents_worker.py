"""A real agent worker process for the crash tests.

``agents_worker.py ADDRESS QUEUE LEDGER EFFECTS [CRASH_TOOL MARKER]``: prints ``ready``
once it polls and runs until killed; with CRASH_TOOL it kills itself (SIGKILL) right after
that tool's outcome is committed. Sticky caching is off, so after its death the
workflow's next task goes to the shared queue at once.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

# The Temporal tests' helpers, as the tests' conftest adds them.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "temporal"))

from agents_app import running_agent_worker
from temporal_app import CrashAfterCommit
from temporalio.client import Client


async def main(argv: list[str]) -> None:
    address, queue, ledger, effects = argv[:4]
    hooks = (CrashAfterCommit(argv[4], Path(argv[5])),) if len(argv) > 4 else ()
    client = await Client.connect(address)
    async with running_agent_worker(
        client, queue, Path(ledger), Path(effects), hooks=hooks, cached_workflows=0
    ):
        print("ready", flush=True)
        await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
