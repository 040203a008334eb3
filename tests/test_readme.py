"""The examples of README.md and docs/ run as written."""

from __future__ import annotations

from _docs import page, run_example


def test_engine_example_runs_and_prints_the_audit() -> None:
    """The engine example approves one refund, refuses the duplicate and audits cleanly."""
    done = run_example("engine")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "refunded 500 on A1"
    assert lines[1] == "refused: duplicate-effect"
    assert [line.split()[1] for line in lines[2:4]] == ["refund", "refund"]
    assert lines[2].endswith("[('callback', 'port')] call.succeeded")
    assert lines[3].endswith("[('callback', 'port')] call.duplicate")
    assert lines[4] == "problems: []"
    assert len(lines) == 5


def test_durable_example_runs_the_body_once_across_a_restart() -> None:
    """The SQLite example charges once; after a restart the same call is answered from the file."""
    done = run_example("durable")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "charging A1",
        "charged 500 on A1",
        "charged 500 on A1",
        "True",
    ]


def test_bridge_contract_example_prints_what_the_readme_says() -> None:
    """The bridge-contract example: one refund, the repeat answered from the ledger, the
    denial recorded as approval-denied."""
    done = run_example("bridge-contract")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "refunded 500 on A1",
        "refunded 500 on A1",
        "approval-denied",
    ]
    assert "prints `refunded 500 on A1` twice, then `approval-denied`" in page(
        "bridges/writing-a-bridge.md"
    )


def test_exchanges_example_prints_what_the_engine_page_says() -> None:
    """The call.exchanged example: both questions inside the call, the audit clean."""
    done = run_example("exchanges")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "shipped S1 to the back door",
        "requested validated effect.claimed started exchanged exchanged succeeded",
        "[]",
    ]
    assert (
        "prints `shipped S1 to the back door`, then `requested validated effect.claimed started\n"
        "exchanged exchanged succeeded` and `[]`."
    ) in page("engine.md")
