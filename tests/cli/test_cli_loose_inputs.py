"""Inputs the CLI used to take and act on wrongly: a negative count or wait, a refund of
negative cents, a key for a ledger that has none, an edit whose number should be text."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _inbox import events, pending_request

from agent_adapter import Executor, Registry
from agent_adapter.cli import main
from agent_adapter.ledger import SQLiteLedger

TIMEOUT_S = 60.0


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``agent-adapter ARGV`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "NO_COLOR": "1"},
    )


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run ``main(argv)``, which must stop with a usage error (exit 2); its last stderr line."""
    with pytest.raises(SystemExit) as stopped:
        main(["--no-color", *argv])
    captured = capsys.readouterr()
    assert (stopped.value.code, captured.out) == (2, "")
    assert "Traceback" not in captured.err
    return captured.err.splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["ledger", "tail", "-n", "-3", "--no-follow"],
            "agent-adapter ledger tail: error: argument -n/--lines: -3 is negative: give 0 or more",
        ),
        (
            ["--lock-timeout", "-1", "ledger", "show"],
            "agent-adapter: error: argument --lock-timeout: -1 is not a wait: give 0 or more "
            "seconds",
        ),
        (
            ["ledger", "show", "--lock-timeout", "nan"],
            "agent-adapter ledger show: error: argument --lock-timeout: nan is not a wait: give "
            "0 or more seconds",
        ),
        (
            ["demo", "--edit-amount", "-5"],
            "agent-adapter demo: error: argument --edit-amount: -5: a refund is 1 cent or more",
        ),
        (
            ["demo", "--edit-amount", "0"],
            "agent-adapter demo: error: argument --edit-amount: 0: a refund is 1 cent or more",
        ),
        # A zero interval would poll in a busy loop, an infinite one never, a NaN duration
        # would never run out.
        *(
            (
                ["ledger", "tail", "--duration", "0", f"--interval={value}"],
                f"agent-adapter ledger tail: error: argument --interval: {value} is not an "
                "interval: give a positive number of seconds",
            )
            for value in ("0", "-1", "nan", "inf")
        ),
        *(
            (
                ["ledger", "tail", f"--duration={value}"],
                f"agent-adapter ledger tail: error: argument --duration: {value} is not a "
                "wait: give 0 or more seconds",
            )
            for value in ("-1", "nan")
        ),
    ],
    ids=[
        "tail-n",
        "lock-timeout-first",
        "lock-timeout-after",
        "edit-amount-neg",
        "edit-amount-0",
        "interval-0",
        "interval-neg",
        "interval-nan",
        "interval-inf",
        "duration-neg",
        "duration-nan",
    ],
)
def test_negative_counts_waits_and_amounts_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Each is refused by the parser (exit 2, one line naming the option), before any ledger
    is opened or any demo runs: nothing is written."""
    db = tmp_path / "ledger.db"
    assert usage_error(capsys, *argv, "--db", str(db)) == message
    assert not db.exists()


def test_ledger_tail_n_zero_still_means_no_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0 is a count (the header, no earlier event), not refused."""
    db = tmp_path / "ledger.db"

    async def one_call() -> None:
        registry = Registry()

        @registry.tool
        def echo(text: str) -> str:
            """Echo."""
            return text

        async with await Executor.open(registry, ledger=SQLiteLedger(db)) as executor:
            await executor.call("echo", {"text": "hi"}, run_id="r1", call_id="c1")

    asyncio.run(one_call())
    code = main(["--no-color", "ledger", "tail", "--db", str(db), "-n", "0", "--no-follow"])
    out = capsys.readouterr().out
    assert (code, [line.split()[0] for line in out.splitlines()]) == (0, ["seq"])


def test_a_key_for_a_ledger_without_one_says_it_has_none(tmp_path: Path) -> None:
    """`verify --key-file` on a ledger written without a key: the ledger has no key (not "wrong
    key, or altered"); without the key it verifies."""
    db = tmp_path / "ledger.db"
    asyncio.run(pending_request(db))
    key = tmp_path / "ledger.key"
    key.write_text("some secret\n")
    keyed = cli("ledger", "verify", "--db", str(db), "--key-file", str(key))
    assert (keyed.returncode, keyed.stderr) == (1, "")
    assert keyed.stdout == (
        "chain: cannot be checked: the ledger has no key (it is marked as written without "
        "one) and no event's hash verifies under this key: check it without the key (if it "
        "was written with this key, it was altered)\n"
    )
    plain = cli("ledger", "verify", "--db", str(db))
    assert (plain.returncode, plain.stdout) == (0, "chain: intact (5 events verified)\n")


def test_an_edit_whose_number_should_be_text_says_how_to_quote_it(tmp_path: Path) -> None:
    """`--edit order_id=7` is the number 7 (JSON); the tool wants text: the one-line refusal
    says how to quote it, nothing is recorded, and the quoted form is approved."""
    db = tmp_path / "ledger.db"
    request_id = asyncio.run(pending_request(db))
    before = asyncio.run(events(db))
    refused = cli("approvals", "approve", request_id, "--db", str(db), "--edit", "order_id=7")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"agent-adapter: error: cannot approve request {request_id}: the edits do not fit the "
        "arguments of refund: order_id: 7 is not of type 'string'; nothing was recorded "
        "(--edit order_id=7 is read as JSON; to give the text, quote it: --edit "
        "'order_id=\"7\"')\n"
    )
    assert asyncio.run(events(db)) == before
    quoted = cli("approvals", "approve", request_id, "--db", str(db), "--edit", 'order_id="7"')
    assert (quoted.returncode, quoted.stderr) == (0, "")
    answered = asyncio.run(events(db))[-1]
    assert (answered.type, answered.edits["order_id"]) == ("approval.answered", "7")
