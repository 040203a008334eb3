"""examples/pydantic_ai/support_agent.py runs as written, approving and denying."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "pydantic_ai" / "support_agent.py"


def _run(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    return done.stdout.splitlines()


def test_the_example_refunds_once_and_refuses_the_duplicate(tmp_path: Path) -> None:
    """Approved: the refund runs; the second conversation's refund, approved too, is refused
    as a duplicate effect; the lookup is cached; the audit is clean."""
    lines = _run("--db", str(tmp_path / "ledger.db"))
    review = "review: refund {'order_id': 'A1', 'amount_cents': 500} (run support-%d)"
    assert lines == [
        "paused: refund digest a2deed7ceede",
        review % 1,
        "Done: refunded 500 on A1.",
        "paused: refund digest a2deed7ceede",
        review % 2,
        "refused: duplicate-effect",
        "support-1 lookup_order call.succeeded",
        "support-1 refund call.succeeded",
        "support-2 lookup_order call.cached",
        "support-2 refund call.duplicate",
        "problems: []",
    ]


@pytest.mark.parametrize("db", [True, False], ids=["db", "temp"])
def test_the_example_with_a_denial_never_refunds(tmp_path: Path, db: bool) -> None:
    """Denied: the model is told approval-denied; both refunds are recorded as denied."""
    lines = _run("--deny", *(["--db", str(tmp_path / "ledger.db")] if db else []))
    assert lines[2].startswith('Sorry, I could not refund: {"error":{"kind":"approval-denied"')
    assert lines[-3:] == [
        "support-2 lookup_order call.cached",
        "support-2 refund call.denied",
        "problems: []",
    ]
