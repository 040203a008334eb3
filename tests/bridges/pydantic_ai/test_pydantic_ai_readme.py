"""The README's pydantic-ai example runs as written and prints what the README says."""

from __future__ import annotations

from _docs import page, run_example


def test_the_pydantic_ai_example_prints_what_the_readme_says() -> None:
    """The example pauses, the reviewer approves, the resumed run reports the refund."""
    done = run_example("pydantic-ai")
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines == [
        "review: refund {'order_id': 'A1', 'amount_cents': 500} {'integration': 'pydantic_ai'}",
        "success: refunded 500 on A1",
    ]
    text = page("bridges/pydantic-ai.md")
    assert all(f"`{line}`" in text for line in lines)
