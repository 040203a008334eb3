"""Test helpers for the approval inbox: a ledger with pending requests, the real server.

``serving(db, token_file)`` starts ``agent-adapter approvals serve`` as a subprocess on a
free loopback port (``--port 0``) and yields its URL once the process has printed it,
which it does only after the socket listens: readiness, not a sleep. On the way out the
server is stopped with SIGINT and must exit 0 after printing ``stopped``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec

from agent_adapter import DeferredApproval, Executor, Registry
from agent_adapter.errors import ApprovalPending
from agent_adapter.ledger import SQLiteLedger

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
SECRET = "4111111111111111"
REFUND = {"order_id": "A1001", "amount_cents": 4250, "card": SECRET}


def registry(executed: list[dict[str, Any]] | None = None) -> Registry:
    """A refund tool that needs approval; ``executed`` collects what each run received."""
    reg = Registry()

    @reg.tool(confirm=True, effect="refund:{order_id}", redact=("card",))
    async def refund(
        order_id: Annotated[str, msgspec.Meta(description="the order to refund")],
        amount_cents: Annotated[int, msgspec.Meta(description="how much, in cents")],
        card: str = "",
    ) -> str:
        """Refund an order (integer cents); the card never reaches the ledger."""
        if executed is not None:
            executed.append({"order_id": order_id, "amount_cents": amount_cents, "card": card})
        return f"refunded {amount_cents} cents on {order_id}"

    return reg


async def pending_request(db: Path, *, run_id: str = "run-1", call_id: str = "call-1") -> str:
    """Ask for one refund through a DeferredApproval on ``db``; its request id."""
    ledger = SQLiteLedger(str(db))
    deferred = DeferredApproval(ledger)
    async with await Executor.open(registry(), ledger=ledger, approval=deferred) as executor:
        try:
            await executor.call("refund", REFUND, run_id=run_id, call_id=call_id)
        except ApprovalPending as exc:
            return exc.request_id
    raise AssertionError("the refund ran without approval")


async def events(db: Path) -> list[Any]:
    """Every event of the ledger file, read back."""
    ledger = SQLiteLedger(str(db))
    try:
        return [e async for e in ledger.read()]
    finally:
        await ledger.close()


def token_file(directory: Path) -> tuple[Path, str]:
    path = directory / "inbox.token"
    token = secrets.token_urlsafe(24)
    path.write_text(token + "\n", encoding="utf-8")
    return path, token


@contextlib.contextmanager
def serving(db: Path, tokens: Path) -> Iterator[str]:
    """``approvals serve`` on a free loopback port; yields its base URL."""
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_adapter.cli",
            "approvals",
            "serve",
            "--db",
            str(db),
            "--port",
            "0",
            "--token-file",
            str(tokens),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline() if ready else ""
        if not line.startswith("approval inbox of "):
            proc.kill()
            raise AssertionError(f"the inbox did not start: {line!r} {proc.stderr.read()!r}")
        url = line.rsplit(" at ", 1)[1].strip()
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert (proc.returncode, err, out.splitlines()[-1:]) == (0, "", ["stopped"])
