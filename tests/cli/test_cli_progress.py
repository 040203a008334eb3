"""Progress on a terminal for `ledger verify`, `audit` and `export`, and nothing otherwise.

The commands run as subprocesses with stderr on a pseudo-terminal (python's ``pty``): a
ledger of 10,000 events shows progress lines (the first is written at once, so a fast
machine shows one too) and the line is erased at the end. With stderr a pipe, stderr is
empty and stdout is byte for byte what the terminal run printed.
"""

from __future__ import annotations

import asyncio
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from agent_adapter.cli._progress import EVERY_S, Progress, progress_for
from agent_adapter.ledger import CallRequested, SQLiteLedger

EVENTS = 10_000
RUN_TIMEOUT_S = 300.0
ERASE = b"\r\x1b[K"


async def big_ledger(db: Path, n: int = EVENTS) -> None:
    """``n`` requested calls, appended in batches."""
    async with SQLiteLedger(db) as ledger:
        for start in range(0, n, 1000):
            await ledger.append_many(
                [
                    CallRequested(ts=1000.0 + i, run_id="r1", call_id=f"c{i}", tool="lookup")
                    for i in range(start, min(n, start + 1000))
                ]
            )


def run(argv: list[str], *, tty: bool) -> tuple[int, bytes, bytes]:
    """``agent-adapter ARGV``: (status, stdout, stderr), stderr on a pty when ``tty``."""
    env = {**os.environ, "NO_COLOR": "1"}
    command = [sys.executable, "-m", "agent_adapter.cli", *argv]
    if not tty:
        done = subprocess.run(
            command, capture_output=True, stdin=subprocess.DEVNULL, env=env, timeout=RUN_TIMEOUT_S
        )
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env
        )
    finally:
        os.close(slave)
    assert proc.stdout is not None
    out, err = bytearray(), bytearray()
    streams = {proc.stdout.fileno(): out, master: err}
    try:
        while streams:
            ready, _, _ = select.select(list(streams), [], [], RUN_TIMEOUT_S)
            assert ready, "the command did not finish"
            for fd in ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the pty's other end closed with the process
                    chunk = b""
                if chunk:
                    streams[fd].extend(chunk)
                else:
                    del streams[fd]
        status = proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        os.close(master)
        proc.stdout.close()
        if proc.poll() is None:
            proc.kill()
    return status, bytes(out), bytes(err)


@pytest.mark.parametrize(
    ("command", "exported", "label"),
    [
        ("verify", False, b"verify: 4,096 events of 10,000 (40%)"),
        ("audit", False, b"audit (reading): 4,096 events"),
        ("export", False, b"export: 4,096 events"),
        ("verify", True, b"verify (reading): 4,096 events"),
        ("audit", True, b"audit (reading): 4,096 events"),
    ],
    ids=["verify", "audit", "export", "verify-exported-file", "audit-exported-file"],
)
async def test_progress_shows_on_a_terminal_and_nothing_changes_without_one(
    tmp_path: Path, command: str, exported: bool, label: bytes
) -> None:
    """On a terminal: at least one progress line (counting in thousands), the line erased
    at the end, stdout as without it. Off a terminal: stderr empty, stdout the same bytes.
    The same for an SQLite ledger and for the file `ledger export` wrote of it."""
    db = tmp_path / "big.db"
    await big_ledger(db)
    if exported:
        status, lines, _ = await asyncio.to_thread(
            run, ["ledger", "export", "--db", str(db)], tty=False
        )
        assert (status, lines.count(b"\n")) == (0, EVENTS)
        db = tmp_path / "big.jsonl"
        db.write_bytes(lines)
    argv = ["ledger", command, "--db", str(db)]
    plain = await asyncio.to_thread(run, argv, tty=False)
    shown = await asyncio.to_thread(run, argv, tty=True)
    assert plain[2] == b""
    assert (shown[0], shown[1]) == (plain[0], plain[1])
    lines = [part for part in shown[2].split(ERASE) if part]
    assert lines, shown[2]
    assert lines[0] == label
    assert shown[2].endswith(ERASE)
    if command == "verify":
        assert plain[1].startswith(b"chain: intact (10000 events verified)")
    if command == "export":
        assert plain[1].count(b"\n") == EVENTS


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal:
    """A stream that says it is a terminal and keeps what is written."""

    def __init__(self, tty: bool = True) -> None:
        self.tty = tty
        self.text = ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_progress_writes_at_once_then_at_most_every_interval_and_erases() -> None:
    """The first report is written at once; one within EVERY_S of it is not; a later one
    is; close erases the line; a new phase reports at once under its label."""
    term, clock = Terminal(), Clock()
    progress = Progress("verify", term, clock=clock)  # type: ignore[arg-type]
    progress.update(4096, 10_000)
    progress.update(8192, 10_000)  # too soon
    clock.now += EVERY_S
    progress.update(8192, 10_000)
    progress.phase("audit (replaying)")
    progress.update(9000)
    progress.close()
    progress.close()  # nothing more to erase
    assert term.text.split("\r\x1b[K") == [
        "",
        "verify: 4,096 events of 10,000 (40%)",
        "verify: 8,192 events of 10,000 (81%)",
        "audit (replaying): 9,000 events",
        "",
    ]


def test_no_progress_off_a_terminal_nor_among_output_on_one() -> None:
    """No progress when stderr is not a terminal, nor when the command's own output
    goes to a terminal (export's lines would be garbled)."""
    assert progress_for("export", Terminal(tty=False)) is None  # type: ignore[arg-type]
    assert progress_for("export", Terminal(), output=Terminal()) is None  # type: ignore[arg-type]
    assert progress_for("export", Terminal(), output=Terminal(tty=False)) is not None  # type: ignore[arg-type]
