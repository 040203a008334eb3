"""The tests' dev server leaves no process behind, however the run ends: the SDK starts
it as a child, which outlives a SIGKILL of the run (a CI timeout, whose teardown never
runs) unless its watchdog kills it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from _watchdog import running, start_time
from temporal_support import require

HERE = Path(__file__).resolve().parent
# Far above the seconds a kill takes: only a watchdog that never acts reaches it.
DEADLINE_S = 120

STARTER = """
import asyncio, os, sys, time
sys.path[:0] = [{tests!r}, {here!r}]
from _watchdog import children
from temporal_support import start_dev_server

async def main():
    env, watchdog = await start_dev_server({path!r})
    with open({ready!r} + ".tmp", "w") as f:
        print(*children(os.getpid(), {path!r} + " server start-dev"), file=f)
    os.rename({ready!r} + ".tmp", {ready!r})
    time.sleep(3600)

asyncio.run(main())
"""


def test_a_dev_server_whose_starter_is_killed_is_killed_too(tmp_path: Path) -> None:
    ready = tmp_path / "servers"
    code = STARTER.format(
        tests=str(HERE.parent.parent), here=str(HERE), path=require(), ready=str(ready)
    )
    # Its output (which the dev server inherits) goes to a file, as a CI run's does: a
    # pipe closed after the kill would end the server by SIGPIPE, watchdog or not.
    with open(tmp_path / "starter.log", "wb") as log:
        starter = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not ready.exists() and starter.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the starter's dev server did not start"
        servers = {int(pid): start_time(int(pid)) for pid in ready.read_text().split()}
        assert servers and all(running(pid) for pid in servers)
    finally:
        os.kill(starter.pid, signal.SIGKILL)  # the starter alone, as a CI timeout kills a run
        starter.wait()

    def left() -> list[int]:  # a pid used again by another process is not the server
        return [pid for pid, at in servers.items() if running(pid) and start_time(pid) == at]

    deadline = time.monotonic() + DEADLINE_S
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    outlived = left()
    for pid in outlived:  # what a failing run would leave behind
        os.kill(pid, signal.SIGKILL)
    assert not outlived, f"{outlived} outlived their starter"
