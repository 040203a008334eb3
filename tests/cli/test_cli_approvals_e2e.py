"""Two processes, one ledger: an agent waits on a deferred approval, the CLI answers it."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent_adapter.ledger import SQLiteLedger

AGENT = Path(__file__).resolve().parents[1] / "_cli_deferred_agent.py"
DEADLINE_S = 60.0


class Lines:
    """A child's stdout read by a thread, so that every wait has a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(proc,), daemon=True)
        self._thread.start()

    def _pump(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def next(self, timeout: float = DEADLINE_S) -> str | None:
        """The next line, None at end of output; fails the test after ``timeout``."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no output within {timeout} s")

    def join(self) -> None:
        """Wait for the reading thread (the child's stdout reached its end)."""
        self._thread.join(timeout=DEADLINE_S)

    def rest(self) -> list[str]:
        """Every remaining line up to the end of output."""
        lines = []
        while (line := self.next()) is not None:
            lines.append(line)
        return lines


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``agent-adapter ARGS`` in a fresh process."""
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        env=env,
    )


def start_agent(db: Path) -> tuple[subprocess.Popen[str], Lines, str]:
    """Start process A and wait for the request id it prints."""
    proc = subprocess.Popen(
        [sys.executable, str(AGENT), str(db), str(DEADLINE_S)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = Lines(proc)
    first = lines.next()
    if first is None or not first.startswith("PENDING "):
        stop(proc, lines)
        pytest.fail(f"process A did not print its request id: {first!r}")
    return proc, lines, first.split()[1]


async def tags(db: Path) -> list[tuple[str, str]]:
    """(type, call_id) of every event in the ledger, in order."""
    ledger = SQLiteLedger(db)
    try:
        return [(e.type, e.call_id) async for e in ledger.read()]
    finally:
        await ledger.close()


async def events_of(db: Path, tag: str) -> list[object]:
    """Every event of one type."""
    ledger = SQLiteLedger(db)
    try:
        return [e async for e in ledger.read() if e.type == tag]
    finally:
        await ledger.close()


def stop(proc: subprocess.Popen[str], lines: Lines) -> None:
    """Kill process A if it still runs, and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=DEADLINE_S)
    lines.join()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def finish(proc: subprocess.Popen[str], lines: Lines) -> list[str]:
    """Process A's remaining output, after it exited with status 0."""
    rest = lines.rest()
    code = proc.wait(timeout=DEADLINE_S)
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    assert (code, stderr) == (0, "")
    return rest


PENDING_PART = [
    ("call.requested", "call-1"),
    ("call.validated", "call-1"),
    ("approval.requested", "call-1"),
    ("approval.pending", "call-1"),
    ("call.pending", "call-1"),
]


async def test_cli_approve_reaches_the_waiting_agent(tmp_path: Path) -> None:
    """`approvals approve` in another process lets the waiting agent run the tool exactly once."""
    db = tmp_path / "ledger.db"
    proc, lines, request_id = start_agent(db)
    try:
        listed = cli("approvals", "list", "--db", str(db))
        assert listed.returncode == 0
        assert request_id in listed.stdout
        answered = cli("approvals", "approve", request_id, "--db", str(db), "--reviewer", "alice")
        assert (answered.returncode, answered.stderr) == (0, "")
        assert answered.stdout == (
            f"approved request {request_id} (refund, run run-e2e) as alice\n"
        )
        assert finish(proc, lines) == ["RESULT refunded 500 on A1", "EXECUTED 1"]
    finally:
        stop(proc, lines)
    assert await tags(db) == [
        *PENDING_PART,
        ("approval.answered", "call-1"),
        ("call.requested", "call-2"),
        ("call.validated", "call-2"),
        ("approval.requested", "call-2"),
        ("approval.consumed", "call-2"),
        ("approval.granted", "call-2"),
        ("effect.claimed", "call-2"),
        ("call.started", "call-2"),
        ("call.succeeded", "call-2"),
    ]
    (granted,) = await events_of(db, "approval.granted")
    assert (granted.reviewer, granted.source, granted.edited) == ("alice", "port", False)
    shown = cli("approvals", "show", request_id, "--db", str(db))
    assert shown.returncode == 0
    assert "approved by alice; used by call call-2 (run run-e2e)" in shown.stdout


async def test_cli_approve_with_edit_runs_the_edited_arguments(tmp_path: Path) -> None:
    """`approvals approve --edit amount_cents=300` makes the waiting agent refund 300, once."""
    db = tmp_path / "ledger.db"
    proc, lines, request_id = start_agent(db)
    try:
        answered = cli(
            "approvals",
            "approve",
            request_id,
            "--db",
            str(db),
            "--reviewer",
            "bob",
            "--edit",
            "amount_cents=300",
        )
        assert (answered.returncode, answered.stderr) == (0, "")
        assert finish(proc, lines) == ["RESULT refunded 300 on A1", "EXECUTED 1"]
    finally:
        stop(proc, lines)
    (answer,) = await events_of(db, "approval.answered")
    assert (answer.approved, answer.reviewer, answer.edits) == (
        True,
        "bob",
        {"order_id": "A1", "amount_cents": 300},
    )
    (granted,) = await events_of(db, "approval.granted")
    assert (granted.reviewer, granted.edited) == ("bob", True)


async def test_cli_deny_reaches_the_waiting_agent(tmp_path: Path) -> None:
    """`approvals deny` in another process makes the waiting agent's call denied; nothing runs."""
    db = tmp_path / "ledger.db"
    proc, lines, request_id = start_agent(db)
    try:
        answered = cli(
            "approvals",
            "deny",
            request_id,
            "--db",
            str(db),
            "--reviewer",
            "carol",
            "--reason",
            "too much",
        )
        assert (answered.returncode, answered.stderr) == (0, "")
        assert finish(proc, lines) == ["DENIED refund was not approved: too much", "EXECUTED 0"]
    finally:
        stop(proc, lines)
    assert await tags(db) == [
        *PENDING_PART,
        ("approval.answered", "call-1"),
        ("call.requested", "call-2"),
        ("call.validated", "call-2"),
        ("approval.requested", "call-2"),
        ("approval.consumed", "call-2"),
        ("approval.denied", "call-2"),
        ("call.denied", "call-2"),
    ]


def test_waiting_agent_gives_up_at_its_deadline(tmp_path: Path) -> None:
    """Process A's wait is bounded: with no answer it stops at its deadline with status 3."""
    db = tmp_path / "ledger.db"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(AGENT), str(db), "0.3"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 3
    assert done.stdout.splitlines()[1:] == ["TIMEOUT"]
    assert time.monotonic() - started < DEADLINE_S
