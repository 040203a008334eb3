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
from temporal_worker import main

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:], running_agent_worker))
