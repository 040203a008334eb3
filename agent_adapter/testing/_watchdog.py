"""When this process ends, however it ends, stop the servers it started outside itself.

A server started for a test session (pg_ctl's PostgreSQL, the Temporal dev server the
SDK starts) outlives a run killed with SIGKILL (a CI timeout), whose teardown never runs.
``Watchdog`` is a small process in a session of its own (a kill of this process group
leaves it running) that holds the read end of a pipe whose write end only this process
has. When this process ends, the watchdog reads EOF and does what it was given: kill a
process (only while it is still the one it was: its start time is checked, so a reused
pid is never killed), run a command (only while a file it needs exists), and remove a
directory (only one whose name starts with the prefix given). ``close()``, after a
teardown that did the same, ends it with nothing left to do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["Watchdog", "children", "running", "start_time"]

_SCRIPT = r"""
import json, os, shutil, signal, subprocess, sys, time
sys.stdin.buffer.read()
job = json.loads(sys.argv[1])
for pid, start in job["kill"]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[19] == start:
                os.kill(pid, signal.SIGKILL)
    except OSError:  # gone already
        pass
try:
    if job["command"] and os.path.exists(job["needs"]):
        subprocess.run(job["command"], capture_output=True, timeout=120)
finally:
    root = job["remove"]
    if root and os.path.basename(root).startswith(job["prefix"]):
        # A server that was still starting may write into it while it goes: try again.
        for _ in range(50):
            shutil.rmtree(root, ignore_errors=True)
            if not os.path.exists(root):
                break
            time.sleep(0.1)
"""


def _stat(pid: int) -> list[str] | None:
    # The fields after the command name (which may hold spaces and parentheses).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def start_time(pid: int) -> str | None:
    """When ``pid`` started (clock ticks since boot), or None when there is no such process."""
    fields = _stat(pid)
    return None if fields is None else fields[19]


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped has ended)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def children(parent: int, marker: str) -> list[int]:
    """The live child processes of ``parent`` whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is None or fields[0] == "Z" or int(fields[1]) != parent:
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in command:
            found.append(int(entry.name))
    return found


class Watchdog:
    """Once this process is gone: kill ``kill`` (pids), run ``command`` if ``needs``
    exists, remove ``remove`` if its name starts with ``prefix``."""

    def __init__(
        self,
        *,
        kill: Sequence[int] = (),
        command: Sequence[str] = (),
        needs: Path | None = None,
        remove: Path | None = None,
        prefix: str = "",
    ) -> None:
        if remove is not None and not (prefix and remove.name.startswith(prefix)):
            raise ValueError(f"{remove} is not named {prefix!r}...: the watchdog removes no other")
        job = {
            "kill": [(pid, start_time(pid)) for pid in kill],
            "command": list(command),
            "needs": str(needs or ""),
            "remove": str(remove or ""),
            "prefix": prefix,
        }
        self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, json.dumps(job)],
            stdin=subprocess.PIPE,  # the write end is close-on-exec: no other child has it
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    @property
    def pid(self) -> int | None:
        """The watchdog's pid while it waits (None once closed)."""
        return None if self._process is None else self._process.pid

    def close(self) -> int | None:
        """End the watchdog (it does what is still to do, normally nothing); its exit code."""
        process, self._process = self._process, None
        if process is None:
            return None
        assert process.stdin is not None
        process.stdin.close()
        return process.wait(timeout=120)
