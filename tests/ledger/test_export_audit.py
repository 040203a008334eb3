"""`ledger export` round-trips: `ledger audit` and `ledger verify` of the exported file.

The file is told from an SQLite ledger by its content. An intact export (the golden
ledger too) checks clean, byte for byte, keyed or not; one changed field is named by
its seq; a malformed line is one clear error naming the line.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from test_golden_ledger import _records as golden_records

from agent_adapter import CallbackApproval, Executor, Registry
from agent_adapter.cli import event_json, main
from agent_adapter.errors import ToolTimeout
from agent_adapter.ledger import (
    CallRequested,
    CallSucceeded,
    MemoryLedger,
    SQLiteLedger,
    chain_hash,
    check_chain,
    decode_event,
    export_line,
    parse_export_line,
)
from agent_adapter.ledger._chain import make_record

KEY = b"export-key"
NOTE = (
    "note: an exported file has no authenticated head: events removed from its end "
    "cannot be detected"
)


@pytest.fixture(autouse=True)
def _reset_structlog() -> Any:
    """main() configures structlog for its process; undo it after each in-process test."""
    yield
    structlog.reset_defaults()


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """main(argv) in this process, without colour; (status, stdout, stderr)."""
    code = main(["--no-color", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def write_ledger(path: Path, key: bytes | None = None) -> None:
    """Two paid orders, one of them resolved after a timeout, in an SQLite file."""
    registry = Registry()

    @registry.tool(confirm=True, effect="pay:{order_id}", timeout=0.05)
    async def pay(order_id: str, amount_cents: int) -> str:
        if amount_cents < 0:
            await asyncio.Event().wait()  # never set: past the timeout
        return f"paid {amount_cents}"

    approval = CallbackApproval(lambda request: True)
    ledger = SQLiteLedger(path, key=key)
    async with Executor(registry, ledger=ledger, approval=approval, clock=lambda: 1e9) as ex:
        await ex.call("pay", {"order_id": "A1", "amount_cents": 500}, run_id="r", call_id="c1")
        with pytest.raises(ToolTimeout):
            await ex.call("pay", {"order_id": "B2", "amount_cents": -1}, run_id="r", call_id="c2")
        await ex.resolve_effect("pay:B2", outcome="failed", reviewer="ops", reason="no charge")


def export(capsys: pytest.CaptureFixture[str], db: Path, out: Path) -> list[bytes]:
    """`ledger export --db DB` written to ``out``; its lines."""
    code, text, err = run_main(capsys, "ledger", "export", "--db", str(db))
    assert (code, err) == (0, "")
    out.write_text(text, encoding="utf-8")
    return out.read_bytes().splitlines()


@pytest.fixture
def exported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """An SQLite ledger and its export (named .db on purpose: content decides, not name)."""
    db = tmp_path / "ledger.sqlite"
    asyncio.run(write_ledger(db))
    out = tmp_path / "export.db"
    export(capsys, db, out)
    return db, out


def test_audit_and_verify_of_an_intact_export_match_the_ledger(
    exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The export audits exactly as its ledger does (plus the note that a file has no
    head), and verifies intact."""
    db, out = exported
    from_db = run_main(capsys, "ledger", "audit", "--db", str(db))
    from_file = run_main(capsys, "ledger", "audit", "--db", str(out))
    lines = from_db[1].splitlines()
    at = lines.index("chain: intact (15 events verified)")
    assert (from_db[0], from_db[2], lines[at + 1 :]) == (0, "", ["problems: none"])
    assert from_file == (0, "\n".join([*lines[: at + 1], NOTE, *lines[at + 1 :]]) + "\n", "")
    assert run_main(capsys, "ledger", "verify", "--db", str(out)) == (
        0,
        f"chain: intact (15 events verified)\n{NOTE}\n",
        "",
    )


def test_audit_json_of_an_export_matches_the_ledger(
    exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`audit --json` of the export is the ledger's report plus the note."""
    db, out = exported
    code_db, text_db, _ = run_main(capsys, "ledger", "audit", "--db", str(db), "--json")
    code_file, text_file, _ = run_main(capsys, "ledger", "audit", "--db", str(out), "--json")
    report = msgspec.json.decode(text_db)
    assert (code_file, msgspec.json.decode(text_file)) == (
        code_db,
        {**report, "note": NOTE.removeprefix("note: ")},
    )


async def test_golden_ledger_exports_and_audits_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The golden ledger, put in an SQLite file (same hashes), exports to lines that are
    event_json of its events, and the export verifies and audits clean."""
    records = golden_records()
    db = tmp_path / "golden.db"
    async with SQLiteLedger(db) as ledger:
        appended = await ledger.append_many([decode_event(r.payload) for r in records])
    assert [e.hash for e in appended] == [r.hash for r in records]
    out = tmp_path / "golden.jsonl"
    lines = await asyncio.to_thread(export, capsys, db, out)
    assert [line.decode() for line in lines] == [event_json(e) for e in appended]
    verify = await asyncio.to_thread(run_main, capsys, "ledger", "verify", "--db", str(out))
    audit = await asyncio.to_thread(run_main, capsys, "ledger", "audit", "--db", str(out))
    assert verify == (0, f"chain: intact (58 events verified)\n{NOTE}\n", "")
    assert (audit[0], audit[1].splitlines()[-3:], audit[2]) == (
        0,
        ["chain: intact (58 events verified)", NOTE, "problems: none"],
        "",
    )


def changed_line(line: bytes, name: str, value: Any) -> bytes:
    """The export line with one field set to ``value`` (same encoder as export)."""
    data = msgspec.json.decode(line)
    data[name] = value
    return msgspec.json.encode(data)


@pytest.mark.parametrize(
    ("seq", "name", "value", "reason"),
    [
        (9, "digest", "0" * 64, "seq 9 does not match its hash (altered)"),
        (4, "reviewer", "mallory", "seq 4 does not match its hash (altered)"),
        (5, "reason", "added", "seq 5 does not match its hash (altered)"),
        (10, "ts", 2e9, "seq 10 does not match its hash (altered)"),
        (2, "type", "call.replayed", "seq 2 does not match its hash (altered)"),
        (8, "hash", "f" * 64, "seq 8 does not match its hash (altered)"),
        (9, "prev", "e" * 64, "seq 9 does not link to the hash of seq 8"),
        (11, "seq", 12, "seq 11 is missing (found 12)"),
    ],
)
def test_one_changed_field_is_named_by_its_seq(
    exported: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    seq: int,
    name: str,
    value: Any,
    reason: str,
) -> None:
    """One field of one exported line changed: verify and audit exit 1 naming that seq."""
    _, out = exported
    lines = out.read_bytes().splitlines()
    lines[seq - 1] = changed_line(lines[seq - 1], name, value)
    out.write_bytes(b"\n".join(lines) + b"\n")
    broken = f"chain: broken at seq {seq}: {reason}"
    assert run_main(capsys, "ledger", "verify", "--db", str(out)) == (1, f"{broken}\n{NOTE}\n", "")
    code, text, err = run_main(capsys, "ledger", "audit", "--db", str(out))
    lines_out = text.splitlines()
    at = lines_out.index(broken)
    assert (code, err, lines_out[at + 1 : at + 4]) == (
        1,
        "",
        [NOTE, "problems: 1", f"  broken-chain (seq {seq}): {reason}"],
    )


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_changed_value_of_any_line_is_found(data: Any) -> None:
    """Property: any value of any line of the golden export set to another value (or a
    key dropped) is found by the exported file's check at that line's seq."""
    lines = [export_line(r) for r in golden_records()]
    index = data.draw(st.integers(0, len(lines) - 1))
    row = msgspec.json.decode(lines[index])
    name = data.draw(st.sampled_from(sorted(row)))
    value = row[name]
    if data.draw(st.booleans()) and name not in ("type", "seq", "prev", "hash"):
        del row[name]
    else:
        other = {"type": "call.x", "seq": value + 1 if isinstance(value, int) else 1}
        row[name] = other.get(name, [value] if not isinstance(value, str) else value + "!")
    lines[index] = msgspec.json.encode(row)
    records = [parse_export_line(line) for line in lines]
    result = check_chain((r.seq, r.prev, r.hash, r.payload) for r in records)
    assert (result.ok, result.first_bad_seq) == (False, index + 1)


def test_a_keyed_export_is_checked_only_with_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --key-file the export cannot be checked (exit 1, never intact, never
    altered); with it, intact; with another key, cannot be checked; altered, named."""
    db = tmp_path / "keyed.db"
    asyncio.run(write_ledger(db, key=KEY))
    out = tmp_path / "keyed.jsonl"
    lines = export(capsys, db, out)
    (tmp_path / "key").write_bytes(KEY + b"\n")
    (tmp_path / "other").write_bytes(b"other\n")
    key, other = str(tmp_path / "key"), str(tmp_path / "other")
    no_key = (
        "chain: cannot be checked: no event's hash is the SHA-256 of its bytes: the chain is "
        "keyed (HMAC) and cannot be checked without its key, or every event was altered"
    )
    wrong = (
        "chain: cannot be checked: no event's hash verifies under this key: a wrong key, or a "
        "chain written (or rewritten) without it"
    )
    assert [
        run_main(capsys, "ledger", "verify", "--db", str(out)),
        run_main(capsys, "ledger", "verify", "--db", str(out), "--key-file", key),
        run_main(capsys, "ledger", "verify", "--db", str(out), "--key-file", other),
    ] == [
        (1, f"{no_key}\n{NOTE}\n", ""),
        (0, f"chain: intact (15 events verified)\n{NOTE}\n", ""),
        (1, f"{wrong}\n{NOTE}\n", ""),
    ]
    audited = run_main(capsys, "ledger", "audit", "--db", str(out), "--key-file", key)
    assert (audited[0], audited[1].splitlines()[-1]) == (0, "problems: none")
    lines[3] = changed_line(lines[3], "reviewer", "mallory")
    out.write_bytes(b"\n".join(lines) + b"\n")
    assert run_main(capsys, "ledger", "verify", "--db", str(out), "--key-file", key) == (
        1,
        f"chain: broken at seq 4: seq 4 does not match its hash (altered)\n{NOTE}\n",
        "",
    )
    assert run_main(capsys, "ledger", "verify", "--db", str(out))[1].startswith(no_key)


def test_events_of_a_newer_version_are_checked_exactly(
    exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """An exported event of a type this version does not know, and a known one with a
    field it does not know, are checked byte for byte: intact, and the audit reads on."""
    _, out = exported
    lines = out.read_bytes().splitlines()
    prev = parse_export_line(lines[-1]).hash
    for seq, payload in (
        (
            16,
            b'{"type":"call.teleported","ts":1.0,"run_id":"r","call_id":"c9","tool":"t","to":"mars"}',
        ),
        (
            17,
            b'{"type":"call.requested","ts":1.0,"run_id":"r","call_id":"c9","tool":"t","later":[1]}',
        ),
    ):
        stored = chain_hash(seq, prev, payload)
        head = {"type": msgspec.json.decode(payload)["type"], "seq": seq, "prev": prev}
        row = {**head, "hash": stored, **msgspec.json.decode(payload)}
        lines.append(msgspec.json.encode(row))
        prev = stored
    out.write_bytes(b"\n".join(lines) + b"\n")
    assert run_main(capsys, "ledger", "verify", "--db", str(out)) == (
        0,
        f"chain: intact (17 events verified)\n{NOTE}\n",
        "",
    )
    code, text, _ = run_main(capsys, "ledger", "audit", "--db", str(out))
    assert (code, text.splitlines()[-4:]) == (
        1,
        [
            "chain: intact (17 events verified)",
            NOTE,
            "problems: 1",
            "  incomplete (seq 16): call c9 (t) has no outcome",
        ],
    )


@pytest.mark.parametrize(
    ("line", "what"),
    [
        (b'{"type":"call.requested","seq":', "line 3 is not JSON"),
        (b"[1, 2]", "line 3 is not a JSON object"),
        (b'{"type":"call.requested","prev":"","hash":""}', 'line 3 has no "seq" (an integer)'),
        (b'{"seq":3,"prev":"","hash":""}', 'line 3 has no "type" (a string)'),
        (b'{"type":"call.requested","seq":3,"prev":""}', 'line 3 has no "hash" (a string)'),
        (b"", "line 3 is empty"),
    ],
)
@pytest.mark.parametrize("command", ["verify", "audit"])
def test_a_malformed_line_is_one_clear_error_naming_it(
    exported: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    line: bytes,
    what: str,
    command: str,
) -> None:
    """A line that export could not have written: exit 1, one line naming the file and
    the line, nothing on stdout, the file unchanged."""
    _, out = exported
    lines = out.read_bytes().splitlines()
    lines[2] = line
    content = b"\n".join(lines) + b"\n"
    out.write_bytes(content)
    code, text, err = run_main(capsys, "ledger", command, "--db", str(out))
    assert (code, text) == (1, "")
    assert err.startswith(f"agent-adapter: error: {out} {what}")
    assert err.count("\n") == 1
    assert out.read_bytes() == content


def test_a_line_that_is_not_an_event_is_audited_as_malformed(
    exported: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A well-formed line whose event does not fit its type: the audit reads it flagged
    and reports it as malformed, besides the altered seq (no traceback, in a fresh
    process); verify names its seq as altered."""
    _, out = exported
    lines = out.read_bytes().splitlines()
    lines[1] = changed_line(lines[1], "digest", 5)
    out.write_bytes(b"\n".join(lines) + b"\n")
    done = subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", "ledger", "audit", "--db", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (1, "")
    assert "seq 2 does not match its hash (altered)" in done.stdout
    assert "seq 2 (call.validated) is malformed: digest was read as its default" in done.stdout
    assert run_main(capsys, "ledger", "verify", "--db", str(out))[:2] == (
        1,
        f"chain: broken at seq 2: seq 2 does not match its hash (altered)\n{NOTE}\n",
    )


def test_an_sqlite_ledger_is_told_by_content_not_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An SQLite ledger named like an export is still read as SQLite (its head checked)."""
    db = tmp_path / "looks-exported.jsonl"
    asyncio.run(write_ledger(db))
    assert run_main(capsys, "ledger", "verify", "--db", str(db)) == (
        0,
        "chain: intact (15 events verified)\n",
        "",
    )


async def test_export_pages_through_a_long_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """More events than one read page (2,048): every record is exported once, in order,
    and the export verifies."""
    db = tmp_path / "long.db"
    events = [
        CallRequested(ts=1.0 + i, run_id="r", call_id=f"c{i}", tool="t", args={"i": i})
        for i in range(5_000)
    ]
    async with SQLiteLedger(db) as ledger:
        await ledger.append_many(events)
    lines = await asyncio.to_thread(export, capsys, db, tmp_path / "long.jsonl")
    assert [parse_export_line(line).seq for line in lines] == list(range(1, 5_001))
    verify = await asyncio.to_thread(
        run_main, capsys, "ledger", "verify", "--db", str(tmp_path / "long.jsonl")
    )
    assert verify == (0, f"chain: intact (5000 events verified)\n{NOTE}\n", "")


async def test_memory_ledger_records_export_like_its_events() -> None:
    """MemoryLedger.read_records gives the stored records: their export lines are the
    event_json of the events read back (the known-event format is unchanged)."""
    ledger = MemoryLedger()
    for record in golden_records():
        await ledger.append(decode_event(record.payload))
    lines = [export_line(r).decode() async for r in ledger.read_records()]
    assert lines == [event_json(e) async for e in ledger.read()]


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(args=JSON_VALUES, result=JSON_VALUES, ts=st.floats(allow_nan=False, allow_infinity=False))
def test_an_export_line_gives_back_the_stored_bytes(args: Any, result: Any, ts: float) -> None:
    """Property: for any JSON values in an event, the record read back from its export
    line has exactly the stored payload, seq, prev and hash (what the exact check needs)."""
    first = make_record(CallRequested(ts=ts, run_id="r", call_id="é", args=args), 1, "")
    second = make_record(CallSucceeded(ts=ts, run_id="r", result=result), 2, first.hash)
    back = [parse_export_line(export_line(r)) for r in (first, second)]
    assert [(r.seq, r.prev, r.hash, r.payload) for r in back] == [
        (r.seq, r.prev, r.hash, r.payload) for r in (first, second)
    ]
