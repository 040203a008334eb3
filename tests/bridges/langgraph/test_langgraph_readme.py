"""The README's LangGraph example runs as written and prints what the README says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"


def _example(tag: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    found = [b for b in blocks if b.startswith(f"# example: {tag}\n")]
    assert len(found) == 1, f"README has {len(found)} examples tagged {tag!r}"
    return found[0]


def test_the_langgraph_example_prints_what_the_readme_says() -> None:
    """The example pauses the refund, the port approves it, the tool's answer and the
    model's last word are printed."""
    done = subprocess.run(
        [sys.executable, "-c", _example("langgraph")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "review: refund {'order_id': 'A1', 'amount_cents': 500} thread-1 call_1",
        "refunded 500 on A1",
        "Refunded order A1.",
    ]
    text = README.read_text()
    assert (
        "It prints `review: refund {'order_id': 'A1', 'amount_cents': 500} thread-1 call_1`" in text
    )
    assert "`refunded 500 on A1` and `Refunded order A1.`" in text
