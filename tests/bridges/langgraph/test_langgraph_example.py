"""examples/langgraph/support_agent.py runs offline, as its docstring says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("bounded")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langgraph" / "support_agent.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """The example in a fresh process."""
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_support_agent_refunds_once_and_the_host_gets_the_duplicate(tmp_path: Path) -> None:
    """Approved: the refund runs once; the second is approved but refused with
    DuplicateEffect to the host, the thread waits at ('tools',), the host answers it and
    the agent finishes; the audit of the SQLite ledger has no problems."""
    done = run("--db", str(tmp_path / "ledger.db"))
    lines = done.stdout.splitlines()
    assert (done.returncode, done.stderr) == (0, "")
    assert lines[:8] == [
        "reviewer sees: refund {'order_id': 'A1', 'amount_cents': 500} (run support-1)",
        'model reads (lookup, success): {"order_id":"A1","status":"delivered","paid_cents":500}',
        "model reads (refund, success): refunded 500 cents on A1",
        "agent: Your refund is on its way.",
        "reviewer sees: refund {'order_id': 'A1', 'amount_cents': 500} (run support-1)",
        "host gets: duplicate-effect: effect refund:A1 was already committed by call "
        "call_refund (run support-1) with the same arguments",
        "thread waits at: ('tools',)",
        "agent: That order was refunded already.",
    ]
    assert lines.count("ledger: call.started call_refund") == 1
    assert "ledger: call.duplicate call_refund_2" in lines
    assert lines[-1] == "audit: 3 calls, problems: []"


def test_a_denied_refund_is_what_the_model_reads(tmp_path: Path) -> None:
    """Denied: the model reads approval-denied as the refund's result; no body ran."""
    done = run("--db", str(tmp_path / "ledger.db"), "--decision", "deny")
    assert done.returncode == 0, done.stderr
    assert (
        'model reads (refund, error): {"error":{"kind":"approval-denied",'
        '"message":"refund was not approved: deny"}}'
    ) in done.stdout.splitlines()
    assert "call.started call_refund" not in done.stdout
