"""The README's LangGraph example runs as written and prints what the README says."""

from __future__ import annotations

from _docs import page, run_example


def test_the_langgraph_example_prints_what_the_readme_says() -> None:
    """The example pauses the refund, the port approves it, the tool's answer and the
    model's last word are printed."""
    done = run_example("langgraph", timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "review: refund {'order_id': 'A1', 'amount_cents': 500} thread-1 call_1",
        "refunded 500 on A1",
        "Refunded order A1.",
    ]
    text = page("bridges/langgraph.md")
    assert (
        "It prints `review: refund {'order_id': 'A1', 'amount_cents': 500} thread-1 call_1`" in text
    )
    assert "`refunded 500 on A1` and `Refunded order A1.`" in text
