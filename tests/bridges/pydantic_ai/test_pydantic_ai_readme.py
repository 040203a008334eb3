"""The README's pydantic-ai example runs as written and prints what the README says."""

from __future__ import annotations

import subprocess
import sys

from _docs import example as _example
from _docs import page


def test_the_pydantic_ai_example_prints_what_the_readme_says() -> None:
    """The example pauses, the reviewer approves, the resumed run reports the refund."""
    done = subprocess.run(
        [sys.executable, "-c", _example("pydantic-ai")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines == [
        "review: refund {'order_id': 'A1', 'amount_cents': 500} {'integration': 'pydantic_ai'}",
        "success: refunded 500 on A1",
    ]
    text = page("bridges/pydantic-ai.md")
    assert all(f"`{line}`" in text for line in lines)
