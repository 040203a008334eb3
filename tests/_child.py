"""Run ``_ledger_worker.py`` commands as real child processes, synchronised by their lines."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("_ledger_worker.py")
#: Every wait on a child is bounded: a broken test fails instead of hanging.
TIMEOUT_S = 60.0


class Child:
    """One worker process; ``expect`` reads its stdout lines, ``kill`` sends SIGKILL."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    @classmethod
    async def start(cls, *args: str) -> Child:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def line(self) -> str:
        """The next complete line ('' at end of output)."""
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT_S)
        if not raw.endswith(b"\n"):
            return ""  # end of output, or a line cut short by a kill
        text = raw.decode().rstrip("\n")
        self.lines.append(text)
        return text

    async def expect(self, prefix: str) -> str:
        """Read lines until one starts with ``prefix``; return it (fail at end of output)."""
        while True:
            text = await self.line()
            if text.startswith(prefix):
                return text
            if text == "":
                await self.wait()
                raise AssertionError(
                    f"child exited ({self.proc.returncode}) before printing {prefix!r}; "
                    f"it printed {self.lines[-5:]!r}"
                )

    async def send(self, text: str) -> None:
        """Write one line to the child's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        await self.proc.stdin.drain()

    async def kill(self) -> None:
        """SIGKILL the child (no cleanup of any kind runs in it) and reap it."""
        os.kill(self.proc.pid, signal.SIGKILL)
        await self.wait()

    async def rest(self) -> list[str]:
        """Every complete line still in the pipe, up to the end of output."""
        found = []
        while text := await self.line():
            found.append(text)
        return found

    async def wait(self) -> int:
        """Wait (bounded) for the child to exit; its return code."""
        return await asyncio.wait_for(self.proc.wait(), TIMEOUT_S)

    async def close(self) -> None:
        """Kill the child if it still runs and release its pipes."""
        if self.proc.returncode is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            await self.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
