"""Other processes on a ledger file: one holding its write lock, one dying after appends,
one trying to take the file over."""

from __future__ import annotations

import selectors
import subprocess
import sys
from pathlib import Path

#: Every wait on the child is bounded: a broken test fails instead of hanging.
TIMEOUT_S = 60.0
# Holds the write lock of the file named by argv[1] until a line arrives on stdin.
LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
conn.close()
"""


# Appends argv[2] events to the ledger argv[1], then exits without closing it.
CRASHING_WRITER = """
import asyncio, os, sys
from agent_adapter.ledger import CallRequested, SQLiteLedger

async def main():
    ledger = SQLiteLedger(sys.argv[1])
    await ledger.append_many([
        CallRequested(ts=1.0, run_id="r1", call_id=f"c{i}", tool="t", args={"n": f"c{i}"})
        for i in range(int(sys.argv[2]))
    ])
    os._exit(0)  # no close, so no checkpoint: the events stay in the WAL

asyncio.run(main())
"""


def crash_after_appending(path: Path, n: int) -> tuple[int, str]:
    """A child appends ``n`` events to ``path`` and exits without closing it, leaving its
    -wal (holding the events) and -shm; (exit status, stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", CRASHING_WRITER, str(path), str(n)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    return done.returncode, done.stderr


class LockHolder:
    """A child process holding the file's write lock (``BEGIN IMMEDIATE``) until released."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LOCK_HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def wait_locked(self) -> str:
        """The child's first line (``locked`` once it holds the lock); bounded."""
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            assert sel.select(timeout=TIMEOUT_S), "the lock holder never said it was locked"
        return self.proc.stdout.readline().strip()

    def release(self) -> int:
        """Let the child roll back and exit; its exit status."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("\n")
            self.proc.stdin.close()
        status = self.proc.wait(timeout=TIMEOUT_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return status


# Tries to take the whole file (switching it out of WAL mode) without waiting.
TAKE_OVER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
try:
    print(conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0])
except sqlite3.OperationalError as exc:
    print(exc)
"""


def take_over(path: Path) -> str:
    """What another process gets when it tries to switch ``path`` out of WAL mode."""
    done = subprocess.run(
        [sys.executable, "-c", TAKE_OVER, str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert (done.returncode, done.stderr) == (0, "")
    return done.stdout.strip()
