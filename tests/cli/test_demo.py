"""``agent-adapter demo`` run to completion without a terminal, checking the ledger it wrote."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import structlog

pytest.importorskip("agents")

from agent_adapter import Executor, demo
from agent_adapter.cli import Style, build_parser, main
from agent_adapter.ledger import Event, SQLiteLedger

TIMEOUT_S = 120.0

TURN_1_LOOKUP = [
    ("call.requested", "call_lookup_1"),
    ("call.validated", "call_lookup_1"),
    ("call.started", "call_lookup_1"),
    ("call.succeeded", "call_lookup_1"),
]
#: Turn 3: another refund asked of a DeferredApproval and left open for the inbox.
LEFT_PENDING = [("approval.pending", "call_refund_3")]
DENIED = [
    *TURN_1_LOOKUP,
    ("call.requested", "call_refund_1"),
    ("call.validated", "call_refund_1"),
    ("approval.requested", "call_refund_1"),
    ("approval.denied", "call_refund_1"),
    ("call.denied", "call_refund_1"),
    *LEFT_PENDING,
]
APPROVED = [
    *TURN_1_LOOKUP,
    ("call.requested", "call_refund_1"),
    ("call.validated", "call_refund_1"),
    ("approval.requested", "call_refund_1"),
    ("approval.granted", "call_refund_1"),
    ("effect.claimed", "call_refund_1"),
    ("call.started", "call_refund_1"),
    ("call.succeeded", "call_refund_1"),
    ("call.requested", "call_lookup_2"),
    ("call.validated", "call_lookup_2"),
    ("call.cached", "call_lookup_2"),
    ("call.requested", "call_refund_2"),
    ("call.validated", "call_refund_2"),
    ("approval.requested", "call_refund_2"),
    ("approval.granted", "call_refund_2"),
    ("call.duplicate", "call_refund_2"),
    *LEFT_PENDING,
]


@pytest.fixture(autouse=True)
def _reset_structlog() -> Any:
    """main() configures structlog for its process; undo it after each test."""
    yield
    structlog.reset_defaults()


def events(path: Path) -> list[Event]:
    """Every event of the ledger file."""

    async def read() -> list[Event]:
        ledger = SQLiteLedger(path)
        try:
            return [e async for e in ledger.read()]
        finally:
            await ledger.close()

    return asyncio.run(read())


def run_demo(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``agent-adapter --no-color demo ARGV`` in this process; (status, stdout, stderr)."""
    code = main(["--no-color", "demo", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_demo_approve_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--approve: the refund runs once, the retry is refused as a duplicate, the audit is clean."""
    db = tmp_path / "demo.db"
    code, out, err = run_demo(capsys, "--db", str(db), "--approve", "--reviewer", "alice")
    assert (code, err) == (0, "")
    recorded = events(db)
    assert [(e.type, e.call_id) for e in recorded] == APPROVED
    granted = [(e.reviewer, e.source, e.edited) for e in recorded if e.type == "approval.granted"]
    assert granted == [("alice", "context", False), ("auto-policy", "context", False)]
    (duplicate,) = [e for e in recorded if e.type == "call.duplicate"]
    assert (duplicate.key, duplicate.by_call_id, duplicate.same_args) == (
        "refund:A1001",
        "call_refund_1",
        True,
    )
    (refunded,) = [e for e in recorded if e.type == "call.succeeded" and e.tool == "refund"]
    assert refunded.result == "refunded 4250 cents on order A1001"
    lines = out.splitlines()
    assert f"ledger: {db.resolve()}" in lines
    assert (
        "host: refused: DuplicateEffect: effect refund:A1001 was already committed by call "
        "call_refund_1 (run demo-run) with the same arguments"
    ) in lines
    assert "refunds the payment API received: 1" in lines
    hints = lines.index("explore the ledger (from this directory):")
    assert lines[hints - 3 : hints] == ["chain: intact (20 events verified)", "problems: none", ""]


def test_demo_audit_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The printed audit has one row per call: digest, approver and source, outcome."""
    db = tmp_path / "demo.db"
    code, out, _ = run_demo(capsys, "--db", str(db), "--approve", "--reviewer", "alice")
    assert code == 0
    digests = {e.call_id: e.digest[:12] for e in events(db) if e.type == "call.validated"}
    lines = out.splitlines()
    start = lines.index("calls: 5, events: 20")
    rows = [[c for c in line.strip().split("  ") if c] for line in lines[start + 2 : start + 6]]
    assert [[c.strip() for c in row] for row in rows] == [
        ["demo-run", "call_lookup_1", "lookup_order", digests["call_lookup_1"], "-",
         "call.succeeded"],
        ["demo-run", "call_refund_1", "refund", digests["call_refund_1"],
         "approved by alice via context", "call.succeeded"],
        ["demo-run", "call_lookup_2", "lookup_order", digests["call_lookup_2"], "-",
         "call.cached"],
        ["demo-run", "call_refund_2", "refund", digests["call_refund_2"],
         "approved by auto-policy via context", "call.duplicate"],
    ]  # fmt: skip


def test_demo_deny_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--deny: the refund never runs, no retry is attempted, the ledger records bob's denial."""
    db = tmp_path / "demo.db"
    code, out, err = run_demo(capsys, "--db", str(db), "--deny", "--reviewer", "bob")
    assert (code, err) == (0, "")
    recorded = events(db)
    assert [(e.type, e.call_id) for e in recorded] == DENIED
    (denied,) = [e for e in recorded if e.type == "approval.denied"]
    assert (denied.reviewer, denied.source, denied.reason) == ("bob", "port", "--deny")
    lines = out.splitlines()
    assert "  --deny: denied as bob" in lines
    assert "agent: I could not refund order A1001: refund was not approved: --deny." in lines
    assert "refunds the payment API received: 0" in lines
    assert "chain: intact (10 events verified)" in lines


def test_demo_edit_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--edit-amount: the edited amount is refunded; the retry of the original is a conflict."""
    db = tmp_path / "demo.db"
    code, out, err = run_demo(capsys, "--db", str(db), "--edit-amount", "1000", "--reviewer", "al")
    assert (code, err) == (0, "")
    recorded = events(db)
    assert [(e.type, e.call_id) for e in recorded] == APPROVED
    (first, _) = [e for e in recorded if e.type == "approval.granted"]
    (validated,) = [
        e for e in recorded if e.type == "call.validated" and e.call_id == "call_refund_1"
    ]
    (started,) = [e for e in recorded if e.type == "call.started" and e.call_id == "call_refund_1"]
    assert (first.reviewer, first.edited, first.digest == started.digest) == ("al", True, True)
    assert started.digest != validated.digest
    (duplicate,) = [e for e in recorded if e.type == "call.duplicate"]
    assert duplicate.same_args is False
    assert "  1000 cents on A1001 (key refund:A1001)" in out.splitlines()


def test_demo_reruns_start_from_a_fresh_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second run removes the old ledger (saying so) and writes the same events again."""
    db = tmp_path / "demo.db"
    assert run_demo(capsys, "--db", str(db), "--approve")[0] == 0
    code, out, _ = run_demo(capsys, "--db", str(db), "--approve")
    assert code == 0
    assert (
        f"ledger: {db.resolve()} (removed the previous one, so every run starts fresh)"
        in out.splitlines()
    )
    assert [(e.type, e.call_id) for e in events(db)] == APPROVED


def test_demo_log_format_json_logs_every_event_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`demo --log-format json`: one JSON log line per ledger event on stderr, none on stdout."""
    db = tmp_path / "demo.db"
    code = main(["demo", "--db", str(db), "--approve", "--log-format", "json", "--no-color"])
    captured = capsys.readouterr()
    assert code == 0
    logged = [json.loads(line) for line in captured.err.splitlines()]
    # Every event the executor appends; turn 3's approval.pending is the deferred port's
    # own write to the ledger, which the executor's hooks do not see.
    assert [(r["event"], r["call_id"]) for r in logged] == APPROVED[: -len(LEFT_PENDING)]
    assert "host: refused: DuplicateEffect" in captured.out


class _Terminal(io.StringIO):
    """Typed answers, on something that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _args(db: Path) -> Any:
    args = build_parser().parse_args(["demo", "--db", str(db), "--reviewer", "tty"])
    args.style = Style(False)
    args.logging = False
    return args


@pytest.mark.parametrize(
    ("typed", "amount", "prompts"),
    [
        ("y\n", 4250, 1),
        ("what\ne\nlots\ne\n1200\n", 1200, 5),
    ],
    ids=["yes", "edit"],
)
def test_demo_asks_the_terminal(tmp_path: Path, typed: str, amount: int, prompts: int) -> None:
    """At a terminal the demo asks: y approves; e asks for a whole number of cents."""
    db = tmp_path / "demo.db"
    out = io.StringIO()
    assert asyncio.run(demo.run(_args(db), out, stdin=_Terminal(typed))) == 0
    assert (
        out.getvalue().count("  approve? [y]es / [n]o / [e]dit amount: ")
        + out.getvalue().count("  new amount in cents: ")
        == prompts
    )
    (refunded,) = [e for e in events(db) if e.type == "call.succeeded" and e.tool == "refund"]
    assert refunded.result == f"refunded {amount} cents on order A1001"


@pytest.mark.parametrize(
    ("typed", "reason"), [("n\n", "denied at the terminal"), ("", "end of input")]
)
def test_demo_terminal_denial_and_end_of_input(tmp_path: Path, typed: str, reason: str) -> None:
    """At a terminal, n denies; end of input denies too (fail closed) instead of waiting."""
    db = tmp_path / "demo.db"
    out = io.StringIO()
    assert asyncio.run(demo.run(_args(db), out, stdin=_Terminal(typed))) == 0
    # (a real terminal echoes the typed newline; this fake one does not)
    assert f"agent: I could not refund order A1001: refund was not approved: {reason}.\n" in (
        out.getvalue()
    )
    assert [(e.type, e.call_id) for e in events(db)] == DENIED


def test_demo_without_a_terminal_denies_and_does_not_hang(tmp_path: Path) -> None:
    """`agent-adapter demo` with stdin not a terminal and no flag: denied, exit 0, clean stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", "demo"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=tmp_path,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert (
        "  no terminal to ask (and no --approve, --deny or --edit-amount): denied, failing closed"
        in done.stdout.splitlines()
    )
    assert f"ledger: {tmp_path / 'agent-adapter-demo.db'}" in done.stdout.splitlines()
    recorded = events(tmp_path / "agent-adapter-demo.db")
    assert [(e.type, e.call_id) for e in recorded] == DENIED
    # Nobody decided: no reviewer is recorded (not the OS user), only why it was denied.
    (denied,) = [e for e in recorded if e.type == "approval.denied"]
    assert (denied.reviewer, denied.source, denied.reason) == ("", "port", "no terminal to ask")
    lines = done.stdout.splitlines()
    assert "  approval.denied: no reviewer (no terminal to ask)" in lines
    (row,) = [line for line in lines if "call_refund_1" in line]
    assert "denied, no reviewer (no terminal to ask)  call.denied" in row


def test_demo_refuses_a_directory_as_its_ledger(tmp_path: Path) -> None:
    """--db naming a directory: one line on stderr, exit 1, nothing removed."""
    done = subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", "demo", "--db", str(tmp_path), "--approve"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert "Traceback" not in done.stderr
    assert (done.returncode, done.stderr) == (
        1,
        f"agent-adapter: error: {tmp_path} is a directory; pass --db FILE\n",
    )


def snapshot(directory: Path) -> dict[str, bytes | str]:
    """Every entry of ``directory``: a file's bytes, a link's target, "dir" for a directory."""
    entries: dict[str, bytes | str] = {}
    for p in sorted(directory.iterdir()):
        if p.is_symlink():
            entries[p.name] = f"-> {os.readlink(p)}"
        elif p.is_dir():
            entries[p.name] = "dir"
        else:
            entries[p.name] = p.read_bytes()
    return entries


Capsys = pytest.CaptureFixture[str]


def write_text(path: Path, capsys: Capsys) -> None:
    """A text file."""
    path.write_text("notes: refund A1001 twice?\n")


def write_other_database(path: Path, capsys: Capsys) -> None:
    """Another program's SQLite database."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE customers (name TEXT)")
        conn.execute("INSERT INTO customers VALUES ('Ada')")
    conn.close()


def write_real_ledger(path: Path, capsys: Capsys) -> None:
    """An agent-adapter ledger a service wrote (one call), not the demo."""
    reg = demo.build_registry([])

    async def write() -> None:
        async with await Executor.open(reg, ledger=SQLiteLedger(path)) as executor:
            await executor.call("lookup_order", {"order_id": "A1001"}, run_id="r", call_id="c")

    asyncio.run(write())


def write_unmarked_demo(path: Path, capsys: Capsys) -> None:
    """A ledger the demo wrote, with its mark taken out (as a ledger of an older demo)."""
    assert run_demo(capsys, "--db", str(path), "--approve")[0] == 0
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM meta WHERE name = 'created_by'")
    conn.close()


def write_empty(path: Path, capsys: Capsys) -> None:
    """An empty file."""
    path.write_bytes(b"")


def write_link(path: Path, capsys: Capsys) -> None:
    """A symbolic link to some other file."""
    path.with_name("target.db").write_bytes(b"x")
    path.symlink_to("target.db")


def write_orphan_wal(path: Path, capsys: Capsys) -> None:
    """No file, but a WAL under its name (SQLite would read it into a new database)."""
    Path(f"{path}-wal").write_bytes(b"pages of another database")


FOREIGN = {
    "text": (write_text, "is not an SQLite database (so not a ledger)"),
    "other-program": (
        write_other_database,
        "is not an agent-adapter ledger (it has other tables: customers)",
    ),
    "real-ledger": (write_real_ledger, "is an agent-adapter ledger that the demo did not write"),
    "unmarked-demo": (
        write_unmarked_demo,
        "is an agent-adapter ledger that the demo did not write",
    ),
    "empty": (write_empty, "is an empty file"),
    "link": (write_link, "is a symbolic link"),
    "orphan-wal": (write_orphan_wal, "does not exist, but {db}-wal does"),
}


@pytest.mark.parametrize("kind", FOREIGN, ids=list(FOREIGN))
def test_demo_refuses_to_replace_a_file_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """--db naming a file the demo did not write (a ledger, another program's database, a
    text file, an empty file, a link, a stray WAL): one line, exit 1, every file as it was."""
    make, what = FOREIGN[kind]
    db = tmp_path / "file.db"
    make(db, capsys)
    capsys.readouterr()
    before = snapshot(tmp_path)
    code, out, err = run_demo(capsys, "--db", str(db), "--approve")
    assert (code, out, err) == (
        1,
        "",
        f"agent-adapter: error: the demo replaces only a ledger it wrote itself: {db} "
        f"{what.format(db=db)}; it was left unchanged (pass --db with a new file name)\n",
    )
    assert snapshot(tmp_path) == before


def test_demo_marks_its_ledger_and_replaces_only_that(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's ledger carries its mark in the meta table from the start, and a run over
    it (even one left with a WAL, as by a killed demo) replaces it."""
    db = tmp_path / "demo.db"
    assert run_demo(capsys, "--db", str(db), "--deny")[0] == 0
    conn = sqlite3.connect(db)
    meta = dict(conn.execute("SELECT name, value FROM meta WHERE name NOT LIKE 'head_%'"))
    conn.close()
    assert meta == {
        "format": "agent-adapter-ledger",
        "schema_version": "1",
        "keyed": "0",
        "created_by": "agent-adapter demo",
    }
    Path(f"{db}-wal").write_bytes(b"")  # a WAL beside it, as a killed demo leaves
    code, out, _ = run_demo(capsys, "--db", str(db), "--approve")
    assert code == 0
    assert (
        f"ledger: {db.resolve()} (removed the previous one, so every run starts fresh)"
        in out.splitlines()
    )
    assert [(e.type, e.call_id) for e in events(db)] == APPROVED


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pseudo-terminal")
def test_demo_interrupted_at_the_prompt_exits_130_at_once(tmp_path: Path) -> None:
    """^C at the approval prompt (a real pseudo-terminal) ends the demo: 130, no traceback."""
    import pty
    import select
    import time

    db = tmp_path / "demo.db"
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execv(
            sys.executable, [sys.executable, "-m", "agent_adapter.cli", "demo", "--db", str(db)]
        )
    output = b""

    def pump(until: Any) -> None:
        nonlocal output
        deadline = time.monotonic() + TIMEOUT_S
        while not until() and time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # the child closed the terminal
                    return
                if not chunk:
                    return
                output += chunk

    try:
        pump(lambda: b"[e]dit amount: " in output)
        assert b"[e]dit amount: " in output
        os.write(fd, b"\x03")
        pump(lambda: False)  # until the child closes its terminal (or the deadline)
        deadline = time.monotonic() + TIMEOUT_S
        while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                pytest.fail("the demo did not end after ^C")
            time.sleep(0.05)
        status = waited[1]
    finally:
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130
    assert b"Traceback" not in output


def _asleep_in_the_kernel(tid: int) -> bool:
    """Whether thread ``tid`` of this process sleeps in a system call other than a futex
    (a futex is how a thread waits for the GIL or a lock): Linux ``/proc``."""
    task = Path(f"/proc/self/task/{tid}")
    state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "S" and "futex" not in (task / "wchan").read_text()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux /proc")
def test_demo_prompt_ends_on_a_ctrl_c_its_read_did_not_see() -> None:
    """A ^C whose C-level handler ran while the prompt was already asleep waiting for a
    line, without interrupting that wait (here it lands in another thread, as it can land
    in the ledger's, or just before the read begins), still ends the prompt at once with
    KeyboardInterrupt: no line has to be typed first."""
    read_fd, write_fd = os.pipe()
    stdin = os.fdopen(read_fd, "r")  # a real file: the prompt waits for it in the kernel
    main = threading.get_native_id()
    ended, rescued = threading.Event(), threading.Event()

    def interrupt() -> None:
        # Gated on the main thread's state, not on time: it is asleep in the prompt's wait.
        while not _asleep_in_the_kernel(main):
            os.sched_yield()
        # Thread-directed: the C handler runs here, so the main thread's wait sees no EINTR.
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        if not ended.wait(TIMEOUT_S):
            rescued.set()
            os.write(write_fd, b"y\n")  # let a prompt that slept through it return

    helper = threading.Thread(target=interrupt, daemon=True)
    helper.start()
    out = io.StringIO()
    try:
        with pytest.raises(KeyboardInterrupt):
            demo._ask(None, "tty", out, stdin)
    finally:
        ended.set()
        helper.join()
        stdin.close()
        os.close(write_fd)
    assert not rescued.is_set(), "the ^C ended the prompt only once a line was typed"
    assert out.getvalue() == "  approve? [y]es / [n]o / [e]dit amount: "
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.set_wakeup_fd(-1) == -1  # the prompt put back the wakeup fd it found


def _without(path_var: str, directory: Path) -> str:
    """``PATH`` without the entries that are ``directory``."""
    kept = [p for p in path_var.split(os.pathsep) if p and Path(p).resolve() != directory]
    return os.pathsep.join(kept)


@pytest.mark.parametrize("on_path", [False, True], ids=["not-on-PATH", "on-PATH"])
def test_demo_hint_commands_run_as_printed(tmp_path: Path, on_path: bool) -> None:
    """As `make demo` runs it (`.venv/bin/agent-adapter demo` from the checkout): every
    command the demo prints at the end runs as printed from that directory; when
    `agent-adapter` is not on PATH they name `.venv/bin/agent-adapter` and the last line
    says how to put it there, which works too."""
    venv = Path(sys.prefix).resolve()
    assert (venv / "bin" / "agent-adapter").is_file(), "the package is installed in the venv"
    (tmp_path / ".venv").symlink_to(venv)  # a checkout with its .venv, as make leaves it
    path_var = _without(os.environ.get("PATH", ""), venv / "bin")
    if on_path:
        path_var = os.pathsep.join([str(tmp_path / ".venv" / "bin"), path_var])
    env = {**os.environ, "NO_COLOR": "1", "PATH": path_var}

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            cwd=tmp_path,
            env=env,
        )

    done = run([".venv/bin/agent-adapter", "demo", "--approve"])
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    start = lines.index("explore the ledger (from this directory):")
    prefix = "agent-adapter" if on_path else ".venv/bin/agent-adapter"
    db = "agent-adapter-demo.db"
    activate = "source .venv/bin/activate"
    advice = [] if on_path else [f"to type agent-adapter alone, put it on PATH: {activate}"]
    actions = ("show", "audit", "verify", "export")
    (pending,) = [e for e in events(tmp_path / db) if e.type == "approval.pending"]
    request_id = pending.request_id
    assert f"  asked a DeferredApproval (it lives in the ledger): {request_id} pending" in lines
    assert lines[start + 1 :] == [
        *(f"  {prefix} ledger {action} --db {db}" for action in actions),
        "decide turn 3's open request in a browser (the approval inbox; Ctrl-C stops it):",
        f"  {prefix} approvals serve --db {db}",
        "or at the terminal:",
        f"  {prefix} approvals list --db {db}",
        f"  {prefix} approvals approve {request_id} --db {db} --reason 'shipping was late'",
        *advice,
    ]
    statuses = [(run(shlex.split(line)).returncode, line) for line in lines[start + 1 : start + 5]]
    assert statuses == [(0, line) for line in lines[start + 1 : start + 5]]
    # The inbox command starts as printed (on a free port: 8765 may be taken here), prints
    # where it serves once it listens, shows turn 3's request, and stops cleanly on Ctrl-C.
    serve = [*shlex.split(lines[start + 6]), "--port", "0"]
    inbox = subprocess.Popen(
        serve,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert inbox.stdout is not None
    first = inbox.stdout.readline()
    try:
        assert first.startswith(f"approval inbox of {db} at http://127.0.0.1:")
        token = inbox.stdout.readline().strip().rsplit("?token=", 1)[1]  # "open URL?token=T"
        front = urllib.request.Request(
            first.rsplit(" at ", 1)[1].strip(), headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(front, timeout=30) as page:
            shown = page.read().decode()
    finally:
        inbox.send_signal(signal.SIGINT)
        rest, err = inbox.communicate(timeout=TIMEOUT_S)
    assert f'data-request="{request_id}"' in shown
    assert (inbox.returncode, err, rest.splitlines()[-1]) == (0, "", "stopped")
    # At the terminal: listed, then approved as printed (recorded; the demo's run is over).
    listed = run(shlex.split(lines[start + 8]))
    assert (listed.returncode, listed.stderr) == (0, "")
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == [request_id]
    approved = run(shlex.split(lines[start + 9]))
    assert (approved.returncode, approved.stderr) == (0, "")
    assert [e.type for e in events(tmp_path / db)][-1] == "approval.answered"
    if not on_path:
        bash = shutil.which("bash")
        assert bash is not None
        activated = run([bash, "-c", f"{activate} && agent-adapter ledger verify --db {db}"])
        assert (activated.returncode, activated.stdout, activated.stderr) == (
            0,
            "chain: intact (21 events verified)\n",
            "",
        )


def test_demo_does_not_take_its_ledger_from_agent_adapter_db(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo replaces its ledger file: it never reads $AGENT_ADAPTER_DB (a real ledger)."""
    precious = tmp_path / "real.db"
    precious.write_bytes(b"a real ledger")
    monkeypatch.setenv("AGENT_ADAPTER_DB", str(precious))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_demo(capsys, "--approve")
    assert (code, err) == (0, "")
    assert precious.read_bytes() == b"a real ledger"
    assert f"ledger: {tmp_path / 'agent-adapter-demo.db'}" in out.splitlines()
