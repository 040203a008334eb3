"""The ``agent-adapter`` command against real ledger files: every command, bad input."""

from __future__ import annotations

import asyncio
import io
import json
import os
import queue
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import _other_user
import pytest
import structlog
from _other_process import LockHolder, crash_after_appending
from _other_user import OtherUser

from agent_adapter import (
    CallbackApproval,
    Decision,
    DeferredApproval,
    Executor,
    Registry,
    digest,
)
from agent_adapter.cli import Style, main, parse_edits
from agent_adapter.errors import ApprovalDenied, ApprovalPending, ToolArgsInvalid, ToolTimeout
from agent_adapter.ledger import (
    ApprovalDeferred,
    ApprovalRequested,
    CallPending,
    CallRequested,
    CallStarted,
    CallValidated,
    Event,
    SQLiteLedger,
    decode_event,
)

TIMEOUT_S = 60.0
KEY = b"s3cret-key"


@pytest.fixture(autouse=True)
def _reset_structlog() -> Any:
    """main() configures structlog for its process; undo it after each in-process test."""
    yield
    structlog.reset_defaults()


def registry() -> Registry:
    """lookup (cached read), refund (approval, effect key), ship (times out: ambiguous)."""
    reg = Registry()

    @reg.tool(cache=60)
    async def lookup(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}"

    @reg.tool(confirm=True, effect="refund:{order_id}")
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order."""
        return f"refunded {amount_cents} on {order_id}"

    @reg.tool(effect="ship:{order_id}", timeout=0.05)
    async def ship(order_id: str) -> str:
        """Ship an order (never finishes in time)."""
        await asyncio.sleep(30)
        return "shipped"

    return reg


async def build(path: Path, clock: Any, key: bytes | None = None) -> str:
    """Write a ledger with five calls; returns the id of its open deferred request."""
    reg = registry()
    approval = CallbackApproval(
        lambda r: Decision(
            approved=r.args["amount_cents"] < 1000, reviewer="alice", reason="policy"
        )
    )
    ledger = SQLiteLedger(path, key=key)
    async with await Executor.open(reg, ledger=ledger, approval=approval, clock=clock) as ex:
        await ex.call("lookup", {"order_id": "A1"}, run_id="r1", call_id="c1")
        await ex.call("refund", {"order_id": "A1", "amount_cents": 500}, run_id="r1", call_id="c2")
        with pytest.raises(ApprovalDenied):
            await ex.call(
                "refund", {"order_id": "B2", "amount_cents": 5000}, run_id="r1", call_id="c3"
            )
        with pytest.raises(ToolTimeout):
            await ex.call("ship", {"order_id": "A1"}, run_id="r1", call_id="c4")
    ledger = SQLiteLedger(path, key=key)
    deferred = DeferredApproval(ledger, clock=clock)
    async with await Executor.open(reg, ledger=ledger, approval=deferred, clock=clock) as ex:
        with pytest.raises(ApprovalPending) as pending:
            await ex.call(
                "refund", {"order_id": "C3", "amount_cents": 700}, run_id="r2", call_id="c5"
            )
    return pending.value.request_id


async def read_events(path: Path, key: bytes | None = None) -> list[Event]:
    """Every event of the ledger file."""
    ledger = SQLiteLedger(path, key=key)
    try:
        return [e async for e in ledger.read()]
    finally:
        await ledger.close()


def holder_fields(claim: Any) -> dict[str, Any]:
    """A claim's holder and lease, as the audit and `effects list --json` show them."""
    assert claim.holder and claim.pid and claim.host and claim.lease_until > claim.ts
    return {
        "holder": claim.holder,
        "pid": claim.pid,
        "host": claim.host,
        "lease_until": claim.lease_until,
    }


class Built:
    """A ledger file written by ``build``, with its events and its open request id."""

    def __init__(self, path: Path, request_id: str, events: list[Event]) -> None:
        self.path = path
        self.db = str(path)
        self.request_id = request_id
        self.events = events


@pytest.fixture
def built(tmp_path: Path, clock: Any) -> Built:
    """A real ledger file (see ``build``)."""
    path = tmp_path / "ledger.db"
    request_id = asyncio.run(build(path, clock))
    return Built(path, request_id, asyncio.run(read_events(path)))


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """main(argv) in this process, without colour; (status, stdout, stderr)."""
    code = main(["--no-color", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cli(*argv: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``agent-adapter ARGV`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )


def columns(line: str) -> list[str]:
    """A table row split on runs of two or more spaces."""
    return re.split(r"\s{2,}", line.strip())


def tamper(path: Path, seq: int) -> None:
    """Change one stored payload behind the ledger's back (as an attacker would)."""
    conn = sqlite3.connect(path)
    with conn:
        (payload,) = conn.execute("SELECT payload FROM events WHERE seq = ?", (seq,)).fetchone()
        altered = bytes(payload).replace(b'"amount_cents":500', b'"amount_cents":900')
        assert altered != payload
        conn.execute("UPDATE events SET payload = ? WHERE seq = ?", (altered, seq))
    conn.close()


EXPECTED_TYPES = [
    ("call.requested", "c1"),
    ("call.validated", "c1"),
    ("call.started", "c1"),
    ("call.succeeded", "c1"),
    ("call.requested", "c2"),
    ("call.validated", "c2"),
    ("approval.requested", "c2"),
    ("approval.granted", "c2"),
    ("effect.claimed", "c2"),
    ("call.started", "c2"),
    ("call.succeeded", "c2"),
    ("call.requested", "c3"),
    ("call.validated", "c3"),
    ("approval.requested", "c3"),
    ("approval.denied", "c3"),
    ("call.denied", "c3"),
    ("call.requested", "c4"),
    ("call.validated", "c4"),
    ("effect.claimed", "c4"),
    ("call.started", "c4"),
    ("call.timed_out", "c4"),
    ("call.requested", "c5"),
    ("call.validated", "c5"),
    ("approval.requested", "c5"),
    ("approval.pending", "c5"),
    ("call.pending", "c5"),
]


def test_fixture_ledger_has_the_expected_events(built: Built) -> None:
    """The ledger every test below reads holds exactly these events."""
    assert [(e.type, e.call_id) for e in built.events] == EXPECTED_TYPES


# -- ledger show / export / tail -------------------------------------------------------


def test_show_prints_every_event_as_a_table(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ledger show` prints a header and one row per event: seq, time, type, run, call, tool."""
    code, out, err = run_main(capsys, "ledger", "show", "--db", built.db)
    assert (code, err) == (0, "")
    header, *rows = out.splitlines()
    assert columns(header) == ["seq", "time (UTC)", "type", "run", "call", "tool", "details"]
    assert [columns(r)[:6] for r in rows] == [
        [str(e.seq), "1970-01-01 00:16:40.000", e.type, e.run_id, e.call_id, e.tool]
        for e in built.events
    ]


def test_show_row_details_name_the_fields(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    """A row's details are the event's own fields, digests shortened to 12 characters."""
    code, out, _ = run_main(capsys, "ledger", "show", "--db", built.db, "--call", "c3")
    assert code == 0
    denied = next(line for line in out.splitlines() if " call.denied " in line)
    # duration_ms comes from the executor's own timer, not the injected clock
    assert re.sub(r"duration_ms=\S+ ", "", columns(denied)[6]) == "reviewer=alice reason=policy"
    validated = next(line for line in out.splitlines() if " call.validated " in line)
    assert columns(validated)[6] == f"digest={built.events[12].digest[:12]}"


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (["--run", "r2"], [i for i, (_, c) in enumerate(EXPECTED_TYPES) if c == "c5"]),
        (["--call", "c2"], [i for i, (_, c) in enumerate(EXPECTED_TYPES) if c == "c2"]),
        (["--tool", "ship"], [i for i, (_, c) in enumerate(EXPECTED_TYPES) if c == "c4"]),
        (
            ["--type", "approval.*"],
            [i for i, (t, _) in enumerate(EXPECTED_TYPES) if t.startswith("approval.")],
        ),
        (
            ["--type", "call.denied", "--type", "call.timed_out"],
            [
                i
                for i, (t, _) in enumerate(EXPECTED_TYPES)
                if t in ("call.denied", "call.timed_out")
            ],
        ),
        (["--run", "r1", "--tool", "refund", "--type", "call.succeeded"], [10]),
        (["--run", "nope"], []),
    ],
)
def test_show_filters_as_json_lines(
    built: Built, capsys: pytest.CaptureFixture[str], filters: list[str], expected: list[int]
) -> None:
    """`ledger show --jsonl` with --run/--call/--tool/--type prints exactly the matching events,
    one per line; `--json` the same events as one JSON array (`[]` when none match)."""
    code, out, err = run_main(capsys, "ledger", "show", "--db", built.db, "--jsonl", *filters)
    assert (code, err) == (0, "")
    assert [decode_event(line) for line in out.splitlines()] == [built.events[i] for i in expected]
    code, document, err = run_main(capsys, "ledger", "show", "--db", built.db, "--json", *filters)
    assert (code, err) == (0, "")
    assert json.loads(document) == [json.loads(line) for line in out.splitlines()]


def test_export_is_every_event_as_json_lines(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ledger export` writes every event with its tag, seq, prev and hash, one per line."""
    code, out, err = run_main(capsys, "ledger", "export", "--db", built.db)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [decode_event(line) for line in lines] == built.events
    first = json.loads(lines[0])
    assert (first["type"], first["seq"], first["prev"], first["hash"]) == (
        "call.requested",
        1,
        "",
        built.events[0].hash,
    )


def test_tail_without_follow_prints_the_last_events(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ledger tail -n 2 --no-follow` prints the last two events and exits."""
    code, out, err = run_main(
        capsys, "ledger", "tail", "--db", built.db, "-n", "2", "--no-follow", "--jsonl"
    )
    assert (code, err) == (0, "")
    assert [decode_event(line) for line in out.splitlines()] == built.events[-2:]


def test_tail_duration_bounds_the_whole_command(built: Built) -> None:
    """`ledger tail --duration 0.2 --interval 600` prints the last event and exits 0 well
    before one interval: no pause outlasts the time left (TIMEOUT_S is a tenth of it)."""
    done = cli(
        "ledger", "tail", "--db", built.db, "-n", "1", "--jsonl",
        "--duration", "0.2", "--interval", "600",
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert [decode_event(line) for line in done.stdout.splitlines()] == built.events[-1:]


def test_tail_follows_a_ledger_another_process_writes(built: Built, clock: Any) -> None:
    """`ledger tail` prints events appended after it started, then stops cleanly on ^C."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent_adapter.cli",
            "ledger",
            "tail",
            "--db",
            built.db,
            "-n",
            "1",
            "--interval",
            "0.05",
            "--type",
            "call.s*",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        header = lines.get(timeout=TIMEOUT_S)
        assert header.split() == ["seq", "time", "(UTC)", "type", "run", "call", "tool", "details"]
        first = lines.get(timeout=TIMEOUT_S)
        assert first.split()[:7] == [
            "20",
            "1970-01-01",
            "00:16:40.000",
            "call.started",
            "r1",
            "c4",
            "ship",
        ]

        async def more() -> None:
            ledger = SQLiteLedger(built.path)
            async with await Executor.open(registry(), ledger=ledger, clock=clock) as ex:
                await ex.call("lookup", {"order_id": "Z9"}, run_id="r3", call_id="c6")

        asyncio.run(more())
        # --type call.s* lets only call.started and call.succeeded of the new call through
        followed = [lines.get(timeout=TIMEOUT_S) for _ in range(2)]
        assert [line.split()[:7] for line in followed] == [
            ["29", "1970-01-01", "00:16:40.000", "call.started", "r3", "c6", "lookup"],
            ["30", "1970-01-01", "00:16:40.000", "call.succeeded", "r3", "c6", "lookup"],
        ]
        # Printed while following, in the layout of the first lines: under the header.
        assert [line.index(" r3 ") + 1 for line in followed] == 2 * [header.index("run")]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=TIMEOUT_S) == 130
        assert proc.stderr is not None
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=TIMEOUT_S)
        reader.join(timeout=TIMEOUT_S)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


# -- verify / audit --------------------------------------------------------------------


def test_verify_intact_chain_exits_zero(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger verify` on an untouched ledger says it is intact and exits 0."""
    assert run_main(capsys, "ledger", "verify", "--db", built.db) == (
        0,
        f"chain: intact ({len(built.events)} events verified)\n",
        "",
    )


def test_verify_tampered_chain_names_the_first_bad_seq(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ledger verify` on an altered record exits 1 and names its seq."""
    tamper(built.path, 5)
    assert run_main(capsys, "ledger", "verify", "--db", built.db) == (
        1,
        "chain: broken at seq 5: seq 5 does not match its hash (altered)\n",
        "",
    )


def test_verify_deleted_record_names_the_gap(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ledger verify` after a record was deleted exits 1 and names the missing seq."""
    conn = sqlite3.connect(built.path)
    with conn:
        conn.execute("DELETE FROM events WHERE seq = 15")
    conn.close()
    assert run_main(capsys, "ledger", "verify", "--db", built.db) == (
        1,
        "chain: broken at seq 15: seq 15 is missing (found 16)\n",
        "",
    )


def test_verify_keyed_chain_needs_its_key(
    tmp_path: Path, clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A keyed ledger: no key cannot check (exit 1), --key-file checks it, a wrong key fails."""
    path = tmp_path / "keyed.db"
    asyncio.run(build(path, clock, key=KEY))
    (tmp_path / "key").write_bytes(KEY + b"\n")
    (tmp_path / "wrong").write_bytes(b"other\n")
    code, out, err = run_main(capsys, "ledger", "verify", "--db", str(path))
    assert (code, out, err) == (
        1,
        f"chain: cannot be checked: ledger {path} is keyed (HMAC): its chain cannot be "
        "checked without the key\n",
        "",
    )
    key_file = str(tmp_path / "key")
    assert run_main(capsys, "ledger", "verify", "--db", str(path), "--key-file", key_file) == (
        0,
        "chain: intact (26 events verified)\n",
        "",
    )
    wrong = str(tmp_path / "wrong")
    assert run_main(capsys, "ledger", "verify", "--db", str(path), "--key-file", wrong) == (
        1,
        "chain: cannot be checked: no event's hash verifies under this key: wrong key, or the "
        "ledger was altered\n",
        "",
    )


def test_audit_prints_each_call_and_key_and_fails_on_the_ambiguous_one(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ledger audit`: one row per call (digest, approver, outcome), one per effect key
    with its status; the key the timed-out ship left ambiguous is a problem: exit 1."""
    code, out, err = run_main(capsys, "ledger", "audit", "--db", built.db)
    assert (code, err) == (1, "")
    lines = out.splitlines()
    digests = {e.call_id: e.digest[:12] for e in built.events if e.type == "call.validated"}
    assert lines[0] == "calls: 5, events: 26"
    assert columns(lines[1]) == ["run", "call", "tool", "args digest", "approval", "outcome"]
    assert [columns(line) for line in lines[2:7]] == [
        ["r1", "c1", "lookup", digests["c1"], "-", "call.succeeded"],
        ["r1", "c2", "refund", digests["c2"], "approved by alice via port", "call.succeeded"],
        ["r1", "c3", "refund", digests["c3"], "denied by alice via port", "call.denied"],
        ["r1", "c4", "ship", digests["c4"], "-", "call.timed_out"],
        ["r2", "c5", "refund", digests["c5"], "pending at a reviewer", "call.pending"],
    ]
    assert lines[7] == "effect keys: 2"
    assert [columns(line) for line in lines[8:11]] == [
        ["key", "status", "run", "call", "outcome"],
        ["refund:A1", "committed", "r1", "c2", "call.succeeded"],
        ["ship:A1", "ambiguous", "r1", "c4", "call.timed_out"],
    ]
    assert lines[11:] == [
        "chain: intact (26 events verified)",
        "problems: 1",
        "  ambiguous (seq 17): effect ship:A1: call c4 (ship) timed out after its body "
        "started; the effect may or may not have happened, and no effect.resolved says which",
    ]


def test_audit_of_a_resolved_key_shows_who_and_exits_zero(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once `effects resolve` answered for the timed-out key, the audit names the answer
    and has no problem: exit 0."""
    assert (
        run_main(
            capsys,
            "effects",
            "resolve",
            "ship:A1",
            "--failed",
            "--db",
            built.db,
            "--reviewer",
            "ops",
        )[0]
        == 0
    )
    code, out, err = run_main(capsys, "ledger", "audit", "--db", built.db)
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert [columns(line) for line in lines[8:11]] == [
        ["key", "status", "run", "call", "outcome"],
        ["refund:A1", "committed", "r1", "c2", "call.succeeded"],
        ["ship:A1", "resolved failed by ops", "r1", "c4", "call.timed_out"],
    ]
    assert lines[11:] == ["chain: intact (27 events verified)", "problems: none"]


def test_audit_json_report(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger audit --json` is one JSON object with calls, effect keys, chain and problems."""
    code, out, _ = run_main(capsys, "ledger", "audit", "--db", built.db, "--json")
    assert code == 1
    report = json.loads(out)
    assert [(c["call_id"], c["outcome"], c["effect_key"]) for c in report["calls"]] == [
        ("c1", "call.succeeded", None),
        ("c2", "call.succeeded", "refund:A1"),
        ("c3", "call.denied", None),
        ("c4", "call.timed_out", "ship:A1"),
        ("c5", "call.pending", None),
    ]
    digests = {e.call_id: e.digest for e in built.events if e.type == "call.validated"}
    holders = {e.call_id: holder_fields(e) for e in built.events if e.type == "effect.claimed"}
    assert report["effects"] == [
        {
            "key": "refund:A1",
            "run_id": "r1",
            "call_id": "c2",
            "tool": "refund",
            "digest": digests["c2"],
            "seq": 9,
            "outcome": "call.succeeded",
            "status": "committed",
            "resolution": None,
            **holders["c2"],
        },
        {
            "key": "ship:A1",
            "run_id": "r1",
            "call_id": "c4",
            "tool": "ship",
            "digest": digests["c4"],
            "seq": 19,
            "outcome": "call.timed_out",
            "status": "ambiguous",
            "resolution": None,
            **holders["c4"],
        },
    ]
    assert report["chain"] == {"ok": True, "checked": 26, "first_bad_seq": None, "reason": ""}
    assert report["problems"] == [
        {
            "kind": "ambiguous",
            "message": "effect ship:A1: call c4 (ship) timed out after its body started; the "
            "effect may or may not have happened, and no effect.resolved says which",
            "run_id": "r1",
            "call_id": "c4",
            "seq": 17,
            "key": "ship:A1",
        }
    ]


def test_audit_tampered_ledger_fails_naming_the_seq(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ledger audit` on an altered ledger exits 1 with a broken-chain problem at that seq."""
    tamper(built.path, 5)
    code, out, err = run_main(capsys, "ledger", "audit", "--db", built.db)
    assert (code, err) == (1, "")
    assert out.splitlines()[-4:-1] == [
        "chain: broken at seq 5: seq 5 does not match its hash (altered)",
        "problems: 2",
        "  broken-chain (seq 5): seq 5 does not match its hash (altered)",
    ]


def test_audit_reports_a_call_that_started_and_never_finished(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """A crash between call.started and its outcome is an ambiguous problem: exit 1."""

    async def crash() -> None:
        ledger = SQLiteLedger(built.path)
        try:
            await ledger.append_many(
                [
                    CallRequested(ts=2000.0, run_id="r9", call_id="c9", tool="ship", args={}),
                    CallStarted(ts=2000.0, run_id="r9", call_id="c9", tool="ship", digest="d"),
                ]
            )
        finally:
            await ledger.close()

    asyncio.run(crash())
    code, out, _ = run_main(capsys, "ledger", "audit", "--db", built.db)
    assert code == 1
    assert out.splitlines()[-3:] == [
        "problems: 2",
        "  ambiguous (seq 17): effect ship:A1: call c4 (ship) timed out after its body "
        "started; the effect may or may not have happened, and no effect.resolved says which",
        "  ambiguous (seq 27): call c9 (ship) started and has no outcome: its effect may or "
        "may not have happened",
    ]


# -- approvals -------------------------------------------------------------------------


def test_approvals_list_shows_the_open_request(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`approvals list` prints the open request: id, time, run, call, tool, arguments."""
    code, out, err = run_main(capsys, "approvals", "list", "--db", built.db)
    assert (code, err) == (0, "")
    header, row = out.splitlines()
    assert columns(header) == ["request", "asked (UTC)", "run", "call", "tool", "arguments"]
    assert columns(row) == [
        built.request_id,
        "1970-01-01 00:16:40.000",
        "r2",
        "c5",
        "refund",
        '{"order_id":"C3","amount_cents":700}',
    ]
    code, out, _ = run_main(capsys, "approvals", "list", "--db", built.db, "--json")
    [listed] = json.loads(out)
    assert (listed["request_id"], listed["tool"], listed["args"]) == (
        built.request_id,
        "refund",
        {"order_id": "C3", "amount_cents": 700},
    )


def test_approvals_show_a_pending_request(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    """`approvals show ID` prints the request and its status."""
    code, out, _ = run_main(capsys, "approvals", "show", built.request_id, "--db", built.db)
    assert code == 0
    assert [re.split(r"\s+", line, maxsplit=1) for line in out.splitlines()[:6]] == [
        ["request", built.request_id],
        ["status", "pending"],
        ["asked", "(UTC) 1970-01-01 00:16:40.000"],
        ["run", "r2"],
        ["call", "c5"],
        ["tool", "refund"],
    ]


def test_approvals_approve_records_the_answer_once(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`approvals approve` records approval.answered; a second answer is refused (exit 1)."""
    code, out, err = run_main(
        capsys,
        "approvals",
        "approve",
        built.request_id,
        "--db",
        built.db,
        "--reviewer",
        "alice",
        "--reason",
        "ok",
    )
    assert (code, out, err) == (
        0,
        f"approved request {built.request_id} (refund, run r2) as alice\n",
        "",
    )
    answered = asyncio.run(read_events(built.path))[-1]
    assert (
        answered.type,
        answered.request_id,
        answered.approved,
        answered.reviewer,
        answered.reason,
        answered.edits,
    ) == ("approval.answered", built.request_id, True, "alice", "ok", None)
    assert run_main(capsys, "approvals", "list", "--db", built.db) == (
        0,
        "no pending approval requests\n",
        "",
    )
    code, out, err = run_main(
        capsys, "approvals", "deny", built.request_id, "--db", built.db, "--reviewer", "bob"
    )
    assert (code, out, err) == (
        1,
        "",
        f"agent-adapter: error: approval request {built.request_id!r} is already answered\n",
    )


def test_approvals_deny_and_edit(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    """`approvals deny` records a refusal with its reason."""
    code, _, err = run_main(
        capsys,
        "approvals",
        "deny",
        built.request_id,
        "--db",
        built.db,
        "--reviewer",
        "bob",
        "--reason",
        "too much",
    )
    assert (code, err) == (0, "")
    answered = asyncio.run(read_events(built.path))[-1]
    assert (answered.approved, answered.reviewer, answered.reason) == (False, "bob", "too much")


def test_approvals_approve_with_edits_replaces_the_arguments(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--edit key=value` (JSON values, else text) records the full edited arguments."""
    code, out, err = run_main(
        capsys,
        "approvals",
        "approve",
        built.request_id,
        "--db",
        built.db,
        "--reviewer",
        "alice",
        "--edit",
        "amount_cents=300",
    )
    assert (code, err) == (0, "")
    assert out == (
        f"approved request {built.request_id} (refund, run r2) as alice with arguments "
        '{"order_id":"C3","amount_cents":300}\n'
    )
    answered = asyncio.run(read_events(built.path))[-1]
    assert answered.edits == {"order_id": "C3", "amount_cents": 300}


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ("amount_cents=abc", "amount_cents: 'abc' is not of type 'integer'"),
        ("amount_cents=1.5", "amount_cents: 1.5 is not of type 'integer'"),
        ("amount=300", "Additional properties are not allowed ('amount' was unexpected)"),
    ],
    ids=["text", "float", "unknown"],
)
def test_an_edit_that_does_not_fit_the_tool_is_refused_and_nothing_recorded(
    built: Built, edit: str, problem: str
) -> None:
    """`approve --edit` is checked against the tool's schema recorded with the request: one
    line naming the field, exit 1, the ledger unchanged; the request can still be answered."""
    before = snapshot(built.path.parent)
    done = cli(
        "approvals", "approve", built.request_id, "--db", built.db, "--reviewer", "alice",
        "--edit", edit,
    )  # fmt: skip
    assert_one_line_error(
        done,
        f"cannot approve request {built.request_id}: the edits do not fit the arguments of "
        f"refund: {problem}; nothing was recorded",
    )
    assert snapshot(built.path.parent) == before
    done = cli(
        "approvals", "approve", built.request_id, "--db", built.db, "--reviewer", "alice",
        "--edit", "amount_cents=300",
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")


async def _open_request(path: Path, clock: Any, registry: Registry, args: dict[str, Any]) -> str:
    """Ask a deferred port on ``path`` about ``args`` (run r3, call c6); the request id."""
    ledger = SQLiteLedger(path)
    deferred = DeferredApproval(ledger, clock=clock)
    async with await Executor.open(registry, ledger=ledger, approval=deferred, clock=clock) as ex:
        with pytest.raises(ApprovalPending) as pending:
            await ex.call(registry_tool(registry), args, run_id="r3", call_id="c6")
    return pending.value.request_id


def registry_tool(registry: Registry) -> str:
    """The name of the registry's only tool that needs approval."""
    (name,) = [spec.name for spec in registry if spec.confirm is True]
    return name


def test_an_edit_may_leave_a_redacted_argument_as_shown(
    tmp_path: Path, clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--edit` of another argument keeps a redacted one as "[redacted]" (its requested value
    is what runs); the schema check does not refuse the placeholder."""
    path = tmp_path / "ledger.db"
    ran: list[tuple[int, int]] = []
    reg = Registry()

    @reg.tool(confirm=True, redact=["card"])
    async def charge(card: int, amount: int) -> str:
        """Charge a card."""
        ran.append((card, amount))
        return "charged"

    request_id = asyncio.run(_open_request(path, clock, reg, {"card": 4111, "amount": 50}))
    code, out, err = run_main(
        capsys, "approvals", "approve", request_id, "--db", str(path), "--reviewer", "alice",
        "--edit", "amount=5",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert out == (
        f"approved request {request_id} (charge, run r3) as alice with arguments "
        '{"card":"[redacted]","amount":5}\n'
    )

    async def again() -> Any:
        ledger = SQLiteLedger(path)
        deferred = DeferredApproval(ledger, clock=clock)
        async with await Executor.open(reg, ledger=ledger, approval=deferred, clock=clock) as ex:
            return await ex.call("charge", {"card": 4111, "amount": 50}, run_id="r3")

    assert asyncio.run(again()) == "charged"
    assert ran == [(4111, 5)]
    # Not as a number anywhere in the files (hex digests and ids may hold the digits by
    # chance: a match must not touch another hex digit).
    files = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert re.search(rb"(?<![0-9a-f])4111(?![0-9a-f])", files) is None


def test_an_edit_of_a_request_recorded_without_a_schema_is_checked_when_the_call_runs(
    tmp_path: Path, clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """An open request an older version recorded (no schema): the edit is recorded with a
    note saying it could not be checked, and the executor refuses it when the call runs."""
    path = tmp_path / "ledger.db"
    args = {"order_id": "C3", "amount_cents": 700}
    common = {"ts": 1000.0, "run_id": "r2", "call_id": "c5", "tool": "refund"}

    async def write_old() -> None:
        async with SQLiteLedger(path) as ledger:
            for event in (
                CallRequested(**common, args=args),
                CallValidated(**common, digest=digest(args)),
                ApprovalRequested(**common, request_id="q-old", digest=digest(args)),
                ApprovalDeferred(**common, request_id="q-old", digest=digest(args), args=args),
                CallPending(**common, request_id="q-old"),
            ):
                await ledger.append(event)

    asyncio.run(write_old())
    code, out, err = run_main(
        capsys, "approvals", "approve", "q-old", "--db", str(path), "--reviewer", "alice",
        "--edit", "amount_cents=abc",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        'approved request q-old (refund, run r2) as alice with arguments {"order_id":"C3",'
        '"amount_cents":"abc"}',
        "note: this request was recorded without the tool's schema (by an older "
        "agent-adapter), so the edits could not be checked here; the executor validates "
        "them when the call runs, and refuses the call if they do not fit",
    ]

    async def again() -> None:
        ledger = SQLiteLedger(path)
        deferred = DeferredApproval(ledger, clock=clock)
        async with await Executor.open(
            registry(), ledger=ledger, approval=deferred, clock=clock
        ) as ex:
            with pytest.raises(ToolArgsInvalid):
                await ex.call("refund", args, run_id="r2", call_id="c6")

    asyncio.run(again())
    outcome = asyncio.run(read_events(path))[-1]
    assert (outcome.type, outcome.call_id, outcome.error) == (
        "call.invalid",
        "c6",
        "edited invalid arguments for refund: Expected `int`, got `str` - at `$.amount_cents`",
    )


def test_approvals_show_and_list_say_a_committed_key_cannot_run(
    built: Built, clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A request whose effect key was committed before it was asked: `show` and `list` say
    approving cannot make it run, naming the call that committed it."""
    request_id = asyncio.run(
        _open_request(built.path, clock, registry(), {"order_id": "A1", "amount_cents": 500})
    )
    notice = "refund:A1 is already committed by call c2 (run r1): approving cannot make it run"
    code, out, err = run_main(capsys, "approvals", "show", request_id, "--db", built.db)
    assert (code, err) == (0, "")
    assert [re.split(r"\s+", line, maxsplit=1) for line in out.splitlines()] == [
        ["request", request_id],
        ["status", "pending"],
        ["asked", "(UTC) 1970-01-01 00:16:40.000"],
        ["run", "r3"],
        ["call", "c6"],
        ["tool", "refund"],
        ["arguments", '{"order_id":"A1","amount_cents":500}'],
        ["digest", digest({"order_id": "A1", "amount_cents": 500})],
        ["effect", notice],
        ["metadata", "{}"],
    ]
    code, out, err = run_main(capsys, "approvals", "list", "--db", built.db)
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == f"request {request_id}: {notice}"
    assert [columns(line)[0] for line in out.splitlines()[1:-1]] == [built.request_id, request_id]
    code, out, _ = run_main(capsys, "approvals", "show", request_id, "--db", built.db, "--json")
    shown = json.loads(out)
    assert {k: v for k, v in shown.items() if k.startswith("effect")} == {
        "effect_key": "refund:A1",
        "effect_state": "committed",
        "effect_by_run_id": "r1",
        "effect_by_call_id": "c2",
        "effect_notice": notice,
    }


def test_approvals_show_says_a_key_committed_since_the_request_was_asked(
    built: Built, clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The key was free when asked and another call committed it since: `show` tells the
    state now, and what it was when asked."""

    async def commit() -> None:
        approval = CallbackApproval(lambda r: True)
        ledger = SQLiteLedger(built.path)
        async with await Executor.open(
            registry(), ledger=ledger, approval=approval, clock=clock
        ) as ex:
            await ex.call(
                "refund", {"order_id": "C3", "amount_cents": 1}, run_id="r4", call_id="c7"
            )

    asyncio.run(commit())
    code, out, err = run_main(capsys, "approvals", "show", built.request_id, "--db", built.db)
    assert (code, err) == (0, "")
    (effect,) = [line for line in out.splitlines() if line.startswith("effect")]
    assert re.split(r"\s+", effect, maxsplit=1) == [
        "effect",
        "refund:C3 is already committed by call c7 (run r4): approving cannot make it run; "
        "when asked it was free",
    ]


def test_approvals_show_of_a_used_approval_states_the_key_without_a_warning(
    built: Built, clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once a request is answered (and its call committed the key), `show` gives the key's
    state plainly: nobody is about to approve it, so there is nothing to warn about."""
    assert (
        run_main(
            capsys, "approvals", "approve", built.request_id, "--db", built.db, "--reviewer", "al"
        )[0]
        == 0
    )

    async def resume() -> Any:
        ledger = SQLiteLedger(built.path)
        deferred = DeferredApproval(ledger, clock=clock)
        async with await Executor.open(
            registry(), ledger=ledger, approval=deferred, clock=clock
        ) as ex:
            args = {"order_id": "C3", "amount_cents": 700}
            return await ex.call("refund", args, run_id="r2", call_id="c6")

    assert asyncio.run(resume()) == "refunded 700 on C3"
    code, out, err = run_main(capsys, "approvals", "show", built.request_id, "--db", built.db)
    assert (code, err) == (0, "")
    (effect,) = [line for line in out.splitlines() if line.startswith("effect")]
    assert re.split(r"\s+", effect, maxsplit=1) == [
        "effect",
        "refund:C3 (committed by call c6, run r2); when asked it was free",
    ]


def test_parse_edits_reads_json_values_and_falls_back_to_text() -> None:
    """`key=value`: JSON numbers, booleans and quoted strings parse; anything else is text."""
    assert parse_edits(["a=1", "b=true", 'c="7"', "d=A1", "e=", "f=x=y"]) == {
        "a": 1,
        "b": True,
        "c": "7",
        "d": "A1",
        "e": "",
        "f": "x=y",
    }


# -- effects ---------------------------------------------------------------------------


def test_effects_list_shows_the_ambiguous_key(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`effects list` shows the key of the timed-out call; --all also the committed one."""
    code, out, err = run_main(capsys, "effects", "list", "--db", built.db)
    assert (code, err) == (0, "")
    assert [columns(line) for line in out.splitlines()] == [
        ["key", "status", "run", "call", "holder"],
        ["ship:A1", "ambiguous", "r1", "c4"],
    ]
    code, out, _ = run_main(capsys, "effects", "list", "--db", built.db, "--all", "--json")
    holders = {e.call_id: holder_fields(e) for e in built.events if e.type == "effect.claimed"}
    assert json.loads(out) == [
        {"key": "refund:A1", "status": "committed", "run_id": "r1", "call_id": "c2"}
        | holders["c2"],
        {"key": "ship:A1", "status": "ambiguous", "run_id": "r1", "call_id": "c4"} | holders["c4"],
    ]


@pytest.mark.parametrize("how", ["--failed", "--committed"])
def test_effects_resolve_records_the_decision(
    built: Built, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """`effects resolve KEY --failed|--committed` records effect.resolved; the key is settled."""
    code, out, err = run_main(
        capsys,
        "effects",
        "resolve",
        "ship:A1",
        how,
        "--db",
        built.db,
        "--reviewer",
        "ops",
        "--reason",
        "checked the carrier",
    )
    assert (code, err) == (0, "")
    meaning = {
        "--failed": "failed (key is free)",
        "--committed": "committed (later calls are refused)",
    }[how]
    assert out == f"resolved effect ship:A1 as {meaning} by ops\n"
    resolved = asyncio.run(read_events(built.path))[-1]
    assert (resolved.type, resolved.key, resolved.outcome, resolved.reviewer, resolved.reason) == (
        "effect.resolved",
        "ship:A1",
        how[2:],
        "ops",
        "checked the carrier",
    )
    assert run_main(capsys, "effects", "list", "--db", built.db) == (
        0,
        "no ambiguous effects\n",
        "",
    )
    code, out, err = run_main(
        capsys, "effects", "resolve", "ship:A1", how, "--db", built.db, "--reviewer", "ops"
    )
    status = "unknown" if how == "--failed" else "committed"
    assert (code, out, err) == (
        1,
        "",
        f"agent-adapter: error: effect ship:A1 is {status}, not ambiguous; nothing to resolve\n",
    )


# -- logging and colour ----------------------------------------------------------------


def test_log_format_json_logs_the_events_to_stderr(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """--log-format json wires the structlog hook: each appended event is a JSON log line."""
    code, _, err = run_main(
        capsys,
        "--log-format",
        "json",
        "effects",
        "resolve",
        "ship:A1",
        "--failed",
        "--db",
        built.db,
        "--reviewer",
        "ops",
    )
    assert code == 0
    (line,) = err.splitlines()
    logged = json.loads(line)
    assert (logged["event"], logged["key"], logged["outcome"], logged["level"]) == (
        "effect.resolved",
        "ship:A1",
        "failed",
        "info",
    )


def test_logging_is_off_by_default(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --log-format the same command logs nothing."""
    code, _, err = run_main(
        capsys, "effects", "resolve", "ship:A1", "--failed", "--db", built.db, "--reviewer", "o"
    )
    assert (code, err) == (0, "")


class _Tty:
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """Colour is on for a TTY, off with NO_COLOR, off for a pipe, off with --no-color."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert Style.for_stream(_Tty()).enabled is True  # type: ignore[arg-type]
    assert Style.for_stream(_Tty(), force_off=True).enabled is False  # type: ignore[arg-type]
    assert Style.for_stream(io.StringIO()).enabled is False
    monkeypatch.setenv("NO_COLOR", "1")
    assert Style.for_stream(_Tty()).enabled is False  # type: ignore[arg-type]
    assert Style(True).paint("x", "red") == "\x1b[31mx\x1b[0m"
    assert Style(False).paint("x", "red") == "x"


# -- bad input: one line on stderr, non-zero exit, no traceback, no change -------------

READING = [
    ["ledger", "show"],
    ["ledger", "tail", "--no-follow"],
    ["ledger", "verify"],
    ["ledger", "audit"],
    ["ledger", "export"],
    ["approvals", "list"],
    ["approvals", "show", "nope"],
    ["effects", "list"],
]
WRITING = [
    ["approvals", "approve", "nope", "--reviewer", "x"],
    ["approvals", "deny", "nope", "--reviewer", "x"],
    ["effects", "resolve", "ship:A1", "--failed", "--reviewer", "x"],
]
ALL = READING + WRITING


def status_on_fixture(command: list[str]) -> int:
    """The exit status of a reading command on the ``built`` ledger: `ledger audit` fails
    on it (the timed-out ship left its key ambiguous), the others succeed."""
    return 1 if command[:2] == ["ledger", "audit"] else 0


def ids(commands: list[list[str]]) -> list[str]:
    """Test ids: the command words."""
    return [" ".join(c[:2]) for c in commands]


def assert_one_line_error(done: subprocess.CompletedProcess[str], message: str) -> None:
    """Exit 1, nothing on stdout, exactly ``agent-adapter: error: MESSAGE`` on stderr."""
    assert "Traceback" not in done.stderr
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"agent-adapter: error: {message}\n",
    )


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file in ``directory`` and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.parametrize("command", ALL, ids=ids(ALL))
def test_missing_file_is_an_error_and_is_not_created(tmp_path: Path, command: list[str]) -> None:
    """A missing --db file: one line, exit 1, and no file appears."""
    db = tmp_path / "missing.db"
    done = cli(*command, "--db", str(db))
    assert_one_line_error(done, f"{db}: no such file")
    assert list(tmp_path.iterdir()) == []


BAD_FILES = {
    "text": (b"hello, not a ledger\n", "{db} is not a ledger (not an SQLite database)"),
    "empty": (b"", "{db} is empty, not a ledger"),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
@pytest.mark.parametrize("command", ALL, ids=ids(ALL))
def test_file_that_is_not_a_ledger_is_refused_unchanged(
    tmp_path: Path, command: list[str], kind: str
) -> None:
    """A text or empty file: one line naming it, exit 1, the file unchanged."""
    content, message = BAD_FILES[kind]
    if kind == "text" and command[:2] in (["ledger", "verify"], ["ledger", "audit"]):
        # These two also read an exported ledger, and say why this is not one either.
        message = (
            "{db} is not a ledger (not an SQLite database, nor an exported JSON-lines ledger: "
            "line 1 is not JSON (JSON is malformed: invalid character (byte 0)))"
        )
    db = tmp_path / "notes.db"
    db.write_bytes(content)
    done = cli(*command, "--db", str(db))
    assert_one_line_error(done, message.format(db=db))
    assert snapshot(tmp_path) == {"notes.db": content}


@pytest.mark.parametrize("command", ALL, ids=ids(ALL))
def test_sqlite_file_of_another_program_is_refused_unchanged(
    tmp_path: Path, command: list[str]
) -> None:
    """An SQLite database with other tables: one line naming it, exit 1, unchanged."""
    db = tmp_path / "other.db"
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("CREATE TABLE people (name TEXT)")
        conn.execute("INSERT INTO people VALUES ('ada')")
    conn.close()
    before = snapshot(tmp_path)
    done = cli(*command, "--db", str(db))
    assert_one_line_error(
        done,
        f"{db} is not an agent-adapter ledger (it has other tables: people); it was left unchanged",
    )
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [READING[0], WRITING[0]], ids=ids([READING[0], WRITING[0]]))
def test_ledger_of_a_newer_version_is_refused_unchanged(built: Built, command: list[str]) -> None:
    """A ledger written by a newer schema: one line naming the file, exit 1, unchanged."""
    conn = sqlite3.connect(built.path)
    with conn:
        conn.execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    conn.close()
    before = snapshot(built.path.parent)
    done = cli(*command, "--db", built.db)
    assert_one_line_error(
        done,
        f"ledger {built.db} was written by a newer version of agent-adapter (schema 99; this "
        "version reads up to 1); it was left unchanged",
    )
    # The whole directory: the probe creates no -wal/-shm beside a file it refuses.
    assert snapshot(built.path.parent) == before
    assert list(before) == ["ledger.db", "ledger.db-mark"]


def test_directory_is_refused(tmp_path: Path) -> None:
    """A directory given as --db: one line, exit 1."""
    assert_one_line_error(
        cli("ledger", "show", "--db", str(tmp_path)),
        f"{tmp_path} is a directory, not a ledger file",
    )


def make_fifo(path: Path) -> None:
    """A named pipe at ``path`` that no process ever writes to."""
    os.mkfifo(path)


def make_socket(path: Path) -> None:
    """A Unix socket file at ``path`` (the file stays after the socket is closed)."""
    # Bound by a relative name: a socket's path is limited to ~100 bytes, tmp_path not.
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)
    finally:
        os.chdir(here)


@pytest.mark.parametrize("command", ALL, ids=ids(ALL))
def test_named_pipe_is_refused_at_once(tmp_path: Path, command: list[str]) -> None:
    """A FIFO as --db: one line, exit 1, without waiting for a writer that never comes
    (opening a FIFO to read blocks until one does); nothing appears beside it."""
    db = tmp_path / "pipe.db"
    make_fifo(db)
    done = cli(*command, "--db", str(db))
    assert_one_line_error(done, f"{db} is a named pipe (FIFO), not a ledger file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.db"]


@pytest.mark.parametrize("command", [READING[0], WRITING[0]], ids=ids([READING[0], WRITING[0]]))
@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("socket", "{db} is a socket, not a ledger file"),
        ("device", "{db} is a character device, not a ledger file"),
        ("link-to-fifo", "{db} is a named pipe (FIFO), not a ledger file"),
    ],
)
def test_file_that_is_not_a_regular_file_is_refused(
    tmp_path: Path, command: list[str], kind: str, message: str
) -> None:
    """A socket, a device, or a symlink to a FIFO as --db: one line naming what it is,
    exit 1, nothing created beside it."""
    if kind == "socket":
        db = tmp_path / "s.db"
        make_socket(db)
    elif kind == "device":
        db = Path(os.devnull)
    else:
        make_fifo(tmp_path / "pipe")
        db = tmp_path / "link.db"
        db.symlink_to(tmp_path / "pipe")
    before = sorted(p.name for p in tmp_path.iterdir())
    done = cli(*command, "--db", str(db))
    assert_one_line_error(done, message.format(db=db))
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_symlink_to_a_ledger_file_is_followed(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """A symlink to a regular ledger file is that ledger: verify reads it through the link."""
    link = built.path.parent / "link.db"
    link.symlink_to(built.path)
    assert run_main(capsys, "ledger", "verify", "--db", str(link)) == (
        0,
        f"chain: intact ({len(built.events)} events verified)\n",
        "",
    )


@pytest.mark.parametrize("command", WRITING, ids=ids(WRITING))
def test_read_only_file_refuses_writing_commands_unchanged(
    built: Built, command: list[str]
) -> None:
    """A read-only ledger: approve/deny/resolve print one line and exit 1; nothing changes."""
    request = [built.request_id if word == "nope" else word for word in command]
    before = snapshot(built.path.parent)
    built.path.chmod(0o444)
    try:
        done = cli(*request, "--db", built.db)
    finally:
        built.path.chmod(0o644)
    assert_one_line_error(
        done, f"{built.db} is read-only; this command records a decision and needs to write"
    )
    assert snapshot(built.path.parent) == before


@pytest.mark.parametrize("command", READING[:6], ids=ids(READING[:6]))
def test_read_only_file_can_still_be_read(built: Built, command: list[str]) -> None:
    """A read-only ledger: the reading commands work and leave it unchanged."""
    before = snapshot(built.path.parent)
    built.path.chmod(0o444)
    try:
        done = cli(*command, "--db", built.db)
    finally:
        built.path.chmod(0o644)
    assert (done.returncode, done.stderr) == (status_on_fixture(command), "")
    assert snapshot(built.path.parent) == before


@pytest.mark.parametrize("command", [WRITING[0], WRITING[2]], ids=ids([WRITING[0], WRITING[2]]))
def test_locked_file_is_one_clear_line(built: Built, command: list[str]) -> None:
    """A ledger another process holds locked: a writing command says so in one line, exit 1."""
    before = snapshot(built.path.parent)
    holder = sqlite3.connect(built.path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        done = cli("--lock-timeout", "0.2", *command, "--db", built.db)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_one_line_error(
        done,
        f"ledger {built.db}: opening: another connection held the write lock for more than 0.2 s",
    )
    assert snapshot(built.path.parent) == before


def reading(command: list[str], built: Built) -> list[str]:
    """A reading command on ``built``: the open request instead of ``nope``."""
    return [built.request_id if word == "nope" else word for word in command]


@pytest.mark.parametrize("command", READING, ids=ids(READING))
def test_reading_commands_do_not_wait_for_the_write_lock(built: Built, command: list[str]) -> None:
    """While another process holds the write lock, a reading command prints what it prints
    without the lock, with the same exit status; the lock is held throughout, so it never
    waited for it."""
    expected = cli(*reading(command, built), "--db", built.db)
    assert (expected.returncode, expected.stderr) == (status_on_fixture(command), "")
    before = snapshot(built.path.parent)
    holder = LockHolder(built.path)
    try:
        assert holder.wait_locked() == "locked"
        done = cli("--lock-timeout", "0.5", *reading(command, built), "--db", built.db)
    finally:
        assert holder.release() == 0
    assert (done.returncode, done.stdout, done.stderr) == (
        status_on_fixture(command),
        expected.stdout,
        "",
    )
    assert snapshot(built.path.parent) == before


@pytest.fixture(scope="session")
def other_user() -> Any:
    """Runs ``agent-adapter`` as user nobody when the tests run as root (root may write any
    file, so it could not show that reading needs no write access), from a copy every user
    can reach wherever the checkout lives; see ``_other_user``."""
    yield from _other_user.other_user()


@pytest.fixture
def read_only_copy(built: Built, other_user: OtherUser) -> Any:
    """``built``'s ledger copied to a chmod 0444 file in a chmod 0555 directory that the
    other user can reach (pytest's tmp_path is private to its owner)."""
    yield from _other_user.read_only_ledger(other_user, built.path)


@pytest.mark.parametrize("command", READING, ids=ids(READING))
def test_reading_commands_work_on_a_read_only_file_in_a_read_only_directory(
    built: Built, other_user: OtherUser, read_only_copy: Path, command: list[str]
) -> None:
    """A user who cannot write the file or its directory gets the same output and exit
    status as the owner, and nothing changes (no -wal/-shm could be created, none is needed)."""
    expected = cli(*reading(command, built), "--db", built.db)
    assert (expected.returncode, expected.stderr) == (status_on_fixture(command), "")
    before = snapshot(read_only_copy.parent)
    done = other_user.run(*reading(command, built), "--db", str(read_only_copy))
    assert (done.returncode, done.stdout, done.stderr) == (
        status_on_fixture(command),
        expected.stdout,
        "",
    )
    assert snapshot(read_only_copy.parent) == before


def test_a_user_without_write_access_cannot_decide(
    built: Built, other_user: OtherUser, read_only_copy: Path
) -> None:
    """The same user is refused a writing command in one line: the fixture really is read-only."""
    done = other_user.run(
        "approvals", "approve", built.request_id, "--reviewer", "x", "--db", str(read_only_copy)
    )
    assert_one_line_error(
        done,
        f"{read_only_copy} is read-only; this command records a decision and needs to write",
    )


def test_read_only_directory_reads_what_a_crashed_writer_left_in_its_wal(
    other_user: OtherUser, read_only_copy: Path
) -> None:
    """A writer that died left its -wal and -shm: a user who cannot write reads its commits."""
    directory = read_only_copy.parent
    directory.chmod(0o755)
    read_only_copy.unlink()
    Path(f"{read_only_copy}-mark").unlink()  # a new ledger in its place, not a damaged one
    assert crash_after_appending(read_only_copy, 3) == (0, "")
    directory.chmod(0o555)
    before = snapshot(directory)
    done = other_user.run("ledger", "verify", "--db", str(read_only_copy))
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "chain: intact (3 events verified)\n",
        "",
    )
    assert sorted(before) == ["ledger.db", "ledger.db-mark", "ledger.db-shm", "ledger.db-wal"]
    assert snapshot(directory) == before


def test_read_only_directory_refuses_a_wal_it_cannot_read(
    other_user: OtherUser, read_only_copy: Path
) -> None:
    """A crashed writer's -wal without its -shm, in a directory the user cannot write: one
    line saying why, exit 1, nothing changed (reading the file alone would miss commits)."""
    directory = read_only_copy.parent
    directory.chmod(0o755)
    read_only_copy.unlink()
    Path(f"{read_only_copy}-mark").unlink()  # a new ledger in its place, not a damaged one
    assert crash_after_appending(read_only_copy, 3) == (0, "")
    (directory / "ledger.db-shm").unlink()
    directory.chmod(0o555)
    before = snapshot(directory)
    done = other_user.run("ledger", "verify", "--db", str(read_only_copy))
    db = read_only_copy
    assert_one_line_error(
        done,
        f"ledger {db} cannot be read here: {db}-wal holds commits of a writer that did not "
        f"close, and {db}-shm cannot be created (unable to open database file); open it once "
        "where it can be written, which recovers it",
    )
    assert snapshot(directory) == before


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["approvals", "show", "nope"], "no approval request 'nope' in this ledger"),
        (
            ["approvals", "approve", "nope", "--reviewer", "x"],
            "no approval request 'nope' in this ledger",
        ),
        (
            ["approvals", "deny", "nope", "--reviewer", "x"],
            "no approval request 'nope' in this ledger",
        ),
        (
            ["effects", "resolve", "nope", "--failed", "--reviewer", "x"],
            "effect nope is unknown, not ambiguous; nothing to resolve",
        ),
        (
            ["ledger", "verify", "--key-file", "/nonexistent/key"],
            "key file /nonexistent/key: no such file",
        ),
    ],
    ids=["show", "approve", "deny", "resolve", "key-file"],
)
def test_unknown_id_is_one_clear_line_and_no_change(
    built: Built, command: list[str], message: str
) -> None:
    """An unknown request id, effect key or key file: one line, exit 1, the ledger unchanged."""
    before = snapshot(built.path.parent)
    assert_one_line_error(cli(*command, "--db", built.db), message)
    assert snapshot(built.path.parent) == before


def test_bad_edit_is_one_clear_line_and_no_change(built: Built) -> None:
    """`--edit` without '=': one line, exit 1, nothing recorded."""
    before = snapshot(built.path.parent)
    done = cli("approvals", "approve", built.request_id, "--db", built.db, "--edit", "oops")
    assert_one_line_error(done, "--edit 'oops': expected key=value")
    assert snapshot(built.path.parent) == before


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[" * 100_000, "the value must not nest deeper than 63 levels"),
        ("[" * 64 + "]" * 64, "the value must not nest deeper than 63 levels"),
        ('{"a":' * 64 + "1" + "}" * 64, "the value must not nest deeper than 63 levels"),
        ("NaN", "the value must not contain nan, which is not a JSON number"),
        ("[1e400]", "the value must not contain inf, which is not a JSON number"),
    ],
    ids=["unclosed-100000", "closed-64", "objects-64", "nan", "overflow"],
)
def test_edit_no_tool_could_take_is_one_clear_line_and_no_change(
    built: Built, value: str, message: str
) -> None:
    """`--edit` with a value nested deeper than arguments may be (64 levels, the arguments
    object included; parsing 100000 levels would be a RecursionError) or a number JSON has
    not (the ledger would record null): one line naming the field, exit 1, nothing recorded."""
    before = snapshot(built.path.parent)
    done = cli(
        "approvals", "approve", built.request_id, "--reviewer", "x", "--db", built.db,
        "--edit", f"amount_cents={value}",
    )  # fmt: skip
    assert_one_line_error(done, f"--edit amount_cents: {message}")
    assert snapshot(built.path.parent) == before


def test_parse_edits_takes_what_the_engine_validates_as_arguments() -> None:
    """An edit nested 63 levels deep parses, and the engine takes it as an argument (64 with
    the arguments object); the CLI's limit is the engine's, not a stricter or looser one."""
    deep: Any = 1
    for _ in range(63):
        deep = [deep]
    edits = parse_edits(["value=" + json.dumps(deep), 'text="[[["', "plain=[[[x"])
    assert edits == {"value": deep, "text": "[[[", "plain": "[[[x"}
    reg = Registry()

    @reg.tool
    async def store(value: Any, text: str, plain: str) -> None:
        """Store a value."""

    assert reg.get("store").validate(edits) == edits
    with pytest.raises(ToolArgsInvalid, match="nest deeper than 64 levels"):
        reg.get("store").validate({**edits, "value": [deep]})


#: An argument as the shell passes bytes that are not UTF-8 (Python decodes argv with
#: surrogateescape, so b"\xff" arrives as "\udcff").
NOT_UTF8 = os.fsdecode(b"\xff")


@pytest.mark.parametrize(
    ("command", "name", "raw"),
    [
        (["ledger", "show", "--run", NOT_UTF8], "--run", b"\xff"),
        (["ledger", "show", "--call", NOT_UTF8], "--call", b"\xff"),
        (["ledger", "show", "--tool", NOT_UTF8], "--tool", b"\xff"),
        (["ledger", "show", "--type", "call.*", "--type", NOT_UTF8], "--type", b"\xff"),
        (["ledger", "tail", "--no-follow", "--run", NOT_UTF8], "--run", b"\xff"),
        (["approvals", "show", NOT_UTF8], "REQUEST_ID", b"\xff"),
        (["approvals", "approve", NOT_UTF8, "--reviewer", "x"], "REQUEST_ID", b"\xff"),
        (["approvals", "approve", "REQ", "--reviewer", NOT_UTF8], "--reviewer", b"\xff"),
        (["approvals", "approve", "REQ", "--reviewer", "x", "--reason", NOT_UTF8], "--reason",
         b"\xff"),
        (["approvals", "approve", "REQ", "--reviewer", "x", "--edit", f"order_id={NOT_UTF8}"],
         "--edit", b"order_id=\xff"),
        (["approvals", "deny", "REQ", "--reviewer", f"b{NOT_UTF8}b"], "--reviewer", b"b\xffb"),
        (["effects", "resolve", NOT_UTF8, "--failed", "--reviewer", "x"], "KEY", b"\xff"),
    ],
    ids=[
        "show-run", "show-call", "show-tool", "show-type", "tail-run", "approvals-show",
        "approve-id", "approve-reviewer", "approve-reason", "approve-edit", "deny-reviewer",
        "resolve-key",
    ],
)  # fmt: skip
def test_argument_that_is_not_utf8_is_one_clear_line_and_no_change(
    built: Built, command: list[str], name: str, raw: bytes
) -> None:
    """An id, filter or value whose bytes are not UTF-8 can match nothing and cannot be
    recorded: one line naming the argument and its bytes, exit 1, the ledger unchanged."""
    argv = [built.request_id if word == "REQ" else word for word in command]
    before = snapshot(built.path.parent)
    done = cli(*argv, "--db", built.db)
    assert_one_line_error(done, f"argument {name}: {raw!r} is not valid UTF-8")
    assert snapshot(built.path.parent) == before


@pytest.mark.parametrize("command", [READING[2], WRITING[1]], ids=ids([READING[2], WRITING[1]]))
def test_ledger_file_name_that_is_not_utf8_is_one_clear_line(
    built: Built, command: list[str]
) -> None:
    """A --db name whose bytes are not UTF-8 (SQLite takes UTF-8 names): one line naming
    the bytes, exit 1, the file unchanged."""
    db = built.path.parent / os.fsdecode(b"ledger-\xff.db")
    built.path.rename(db)
    argv = [built.request_id if word == "nope" else word for word in command]
    before = snapshot(db.parent)
    done = cli(*argv, "--db", str(db))
    raw = os.fsencode(db)
    assert_one_line_error(done, f"argument --db: the file name {raw!r} is not valid UTF-8")
    assert snapshot(db.parent) == before


def test_usage_error_exits_two_without_traceback() -> None:
    """An unknown subcommand is a usage error: exit 2, argparse's message, no traceback."""
    done = cli("ledger", "frobnicate", "--db", "x.db")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith("agent-adapter ledger: error: argument ACTION")


def test_keyed_ledger_refuses_a_decision_without_its_key(
    tmp_path: Path, clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Approving on a keyed ledger without --key-file: one line, exit 1, nothing appended."""
    path = tmp_path / "keyed.db"
    request_id = asyncio.run(build(path, clock, key=KEY))
    before = path.read_bytes()
    code, out, err = run_main(
        capsys, "approvals", "approve", request_id, "--db", str(path), "--reviewer", "alice"
    )
    assert (code, out, err) == (
        1,
        "",
        f"agent-adapter: error: ledger {path} is keyed (HMAC): appending needs its key "
        "(SQLiteLedger(path, key=...))\n",
    )
    assert path.read_bytes() == before
    (tmp_path / "key").write_bytes(KEY)
    code, _, err = run_main(
        capsys, "approvals", "approve", request_id, "--db", str(path), "--reviewer", "alice",
        "--key-file", str(tmp_path / "key"),
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert run_main(
        capsys, "ledger", "verify", "--db", str(path), "--key-file", str(tmp_path / "key")
    ) == (0, "chain: intact (27 events verified)\n", "")


def test_ledger_commands_do_not_import_the_agents_sdk(built: Built) -> None:
    """Only the demo needs openai-agents: `ledger verify` runs without importing it."""
    code = (
        "import sys; from agent_adapter.cli import main; "
        f"status = main(['ledger', 'verify', '--db', {built.db!r}]); "
        "print(status, 'agents' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert (done.returncode, done.stdout.splitlines()[-1], done.stderr) == (0, "0 False", "")


@pytest.mark.parametrize("command", [READING[0], WRITING[0]], ids=ids([READING[0], WRITING[0]]))
def test_corrupt_ledger_is_refused_unchanged(built: Built, command: list[str]) -> None:
    """A ledger whose pages were overwritten: one line saying it is corrupt, exit 1, unchanged."""
    with built.path.open("r+b") as fh:
        fh.seek(4096)
        fh.write(b"\xff" * 8192)
    before = snapshot(built.path.parent)
    done = cli(*command, "--db", built.db)
    assert_one_line_error(
        done,
        f"ledger {built.db} is corrupt (reading its schema): database disk image is malformed",
    )
    # The whole directory (see test_ledger_of_a_newer_version_is_refused_unchanged).
    assert snapshot(built.path.parent) == before
    assert list(before) == ["ledger.db", "ledger.db-mark"]
