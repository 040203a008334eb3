"""SQLiteLedger on damaged files: a changed byte in the main file, a damaged index. Files
changed as a faulty disk or copy would change them."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import struct
from pathlib import Path

import pytest

from agent_adapter.cli import main
from agent_adapter.errors import LedgerError
from agent_adapter.ledger import (
    CallRequested,
    Event,
    MemoryLedger,
    SQLiteLedger,
    Verification,
)


def requested(call_id: str, run_id: str = "r1") -> CallRequested:
    """A ``call.requested`` event."""
    return CallRequested(ts=1.0, run_id=run_id, call_id=call_id, tool="t", args={"n": call_id})


async def fill(path: Path, n: int, start: int = 0, **kwargs: object) -> list[Event]:
    """Append ``n`` events (call ids from ``start``) to the ledger at ``path`` and close it."""
    async with SQLiteLedger(path, **kwargs) as ledger:  # type: ignore[arg-type]
        return await ledger.append_many([requested(f"c{i}") for i in range(start, start + n)])


async def read_all(ledger: SQLiteLedger, **kwargs: object) -> list[Event]:
    """Every event ``read(**kwargs)`` yields."""
    return [event async for event in ledger.read(**kwargs)]  # type: ignore[arg-type]


# -- the main file: one changed byte ----------------------------------------------------


def varint(data: bytes | bytearray, at: int) -> tuple[int, int]:
    """SQLite's varint at ``at``: (its value, the offset after it)."""
    value = 0
    for i in range(9):
        byte = data[at + i]
        if i == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    raise AssertionError("unreachable")


def serial_size(serial: int) -> int:
    """The bytes a value of this SQLite serial type takes in a record's body."""
    if serial >= 12:
        return (serial - 12 - (serial & 1)) // 2
    return (0, 1, 2, 3, 4, 6, 8, 8, 0, 0)[serial]


def root_page(path: Path, name: str) -> tuple[int, int]:
    """The root page of the table or index ``name``, and the page size."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,))
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    return int(root[0]), int(page_size)


def leaf_cells(data: bytes | bytearray, page: int, page_size: int) -> list[int]:
    """File offsets of the cells of a leaf page, in key order."""
    base = (page - 1) * page_size
    header = base + (100 if page == 1 else 0)
    assert data[header] in (0x0A, 0x0D), "a leaf page (the ledger is small)"
    count = struct.unpack(">H", data[header + 3 : header + 5])[0]
    pointers = data[header + 8 : header + 8 + 2 * count]
    return [base + struct.unpack(">H", pointers[2 * k : 2 * k + 2])[0] for k in range(count)]


COLUMNS = ("seq", "type", "run_id", "call_id", "tool", "ts", "payload", "prev", "hash")


def event_cell(path: Path, seq: int) -> tuple[int, int, dict[str, tuple[int, int]]]:
    """Where the row of ``seq`` is in the file: (its cell's offset, the offset after it,
    per column (the offset of the last byte of its serial type, of its value))."""
    data = path.read_bytes()
    root, page_size = root_page(path, "events")
    for cell in leaf_cells(data, root, page_size):
        size, at = varint(data, cell)
        rowid, record = varint(data, at)
        if rowid != seq:
            continue
        header_size, types_at = varint(data, record)
        value_at = record + header_size
        columns = {}
        for name in COLUMNS:
            serial, after = varint(data, types_at)
            columns[name] = (after - 1, value_at)
            value_at += serial_size(serial)
            types_at = after
        return cell, record + size, columns
    raise AssertionError(f"seq {seq} not found")


def change_byte(path: Path, offset: int, xor: int) -> None:
    """XOR one byte of the file at ``offset``."""
    with path.open("r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ xor]))


@pytest.mark.parametrize(
    ("column", "reason"),
    [
        *[
            (name, "seq 3: its indexed columns do not match its payload (altered)")
            for name in ("type", "run_id", "call_id", "tool", "ts")
        ],
        ("payload", "seq 3 is damaged: its payload is TEXT, not BLOB"),
        ("prev", "seq 3 is damaged: its prev is BLOB, not TEXT"),
        ("hash", "seq 3 is damaged: its hash is BLOB, not TEXT"),
    ],
)
async def test_a_changed_type_byte_is_named(tmp_path: Path, column: str, reason: str) -> None:
    """One bit of a column's type in seq 3's record (TEXT <-> BLOB, REAL -> INTEGER, the
    value's bytes unchanged): verify() names seq 3; read() hands back the intact events,
    or refuses with a LedgerError naming seq 3 when the chain fields are damaged."""
    path = tmp_path / "l.db"
    events = await fill(path, 5)
    type_byte, _ = event_cell(path, 3)[2][column]
    change_byte(path, type_byte, 0x01)
    async with SQLiteLedger(path, readonly=True) as ledger:
        verification = await ledger.verify()
        try:
            read: object = await read_all(ledger)
        except LedgerError as exc:
            read = str(exc)
    assert verification == Verification(ok=False, checked=2, first_bad_seq=3, reason=reason)
    if column in ("payload", "prev", "hash"):
        assert read == f"ledger {path}: {reason}; see ledger verify"
    else:
        assert read == events


@pytest.mark.parametrize("column", ["run_id", "hash"])
async def test_text_that_is_not_utf8_is_named(tmp_path: Path, column: str) -> None:
    """A changed byte that leaves TEXT SQLite cannot hand back as UTF-8: verify() names the
    seq (the scan stops there); a read that needs the column names it too."""
    path = tmp_path / "l.db"
    events = await fill(path, 5)
    _, value = event_cell(path, 3)[2][column]
    change_byte(path, value, 0x80)  # an ASCII byte becomes a lone continuation byte
    async with SQLiteLedger(path, readonly=True) as ledger:
        verification = await ledger.verify()
        try:
            read: object = await read_all(ledger)
        except LedgerError as exc:
            read = str(exc)
    assert (verification.ok, verification.checked, verification.first_bad_seq) == (False, 2, 3)
    assert verification.reason.startswith(
        f"seq 3 cannot be read: the file is damaged (Could not decode to UTF-8 column '{column}'"
    )
    if column == "hash":
        assert isinstance(read, str)
        assert read.startswith(
            f"ledger {path}: seq 3 cannot be read: the file is damaged (Could not decode to "
            "UTF-8 column 'hash'"
        )
    else:
        assert read == events


async def test_any_changed_byte_of_a_record_is_named_never_a_type_error(tmp_path: Path) -> None:
    """Every byte of seq 3's cell, changed in two ways in turn: verify() is not ok and names
    seq 3 or earlier (or raises LedgerError for a page SQLite calls corrupt), and read()
    returns events or raises LedgerError: never another exception."""
    path, pristine = tmp_path / "l.db", tmp_path / "pristine.db"
    await fill(pristine, 5)
    original = pristine.read_bytes()
    start, end, _ = event_cell(pristine, 3)
    outcomes: dict[str, int] = {}
    for offset in range(start, end):
        for xor in (0x01, 0xA5):
            data = bytearray(original)
            data[offset] ^= xor
            path.write_bytes(data)
            async with SQLiteLedger(path, readonly=True) as ledger:
                try:
                    verification = await ledger.verify()
                except LedgerError:
                    outcomes["verify: LedgerError"] = outcomes.get("verify: LedgerError", 0) + 1
                else:
                    assert not verification.ok, (offset, xor, verification)
                    assert verification.first_bad_seq in (1, 2, 3), (offset, xor, verification)
                    outcomes["verify: not ok"] = outcomes.get("verify: not ok", 0) + 1
                try:
                    await read_all(ledger)
                except LedgerError:
                    pass
    assert sum(outcomes.values()) == 2 * (end - start)
    assert outcomes["verify: not ok"] > outcomes.get("verify: LedgerError", 0)


async def test_memory_ledger_records_of_the_wrong_kinds_are_named() -> None:
    """Records tampered to the wrong kinds (bytes hash, str payload, str seq) are named by
    verify(), never a TypeError."""
    results = []
    for field, value in (("hash", b"x"), ("payload", "{}"), ("prev", 7), ("seq", "2")):
        ledger = MemoryLedger()
        await ledger.append_many([requested(f"c{i}") for i in range(3)])
        setattr(ledger.records[1], field, value)
        results.append(await ledger.verify())
    assert results == [
        Verification(
            ok=False,
            checked=1,
            first_bad_seq=2,
            reason="seq 2 is damaged: its hash is BLOB, not TEXT",
        ),
        Verification(
            ok=False,
            checked=1,
            first_bad_seq=2,
            reason="seq 2 is damaged: its payload is TEXT, not BLOB",
        ),
        Verification(
            ok=False,
            checked=1,
            first_bad_seq=2,
            reason="seq 2 is damaged: its prev is INTEGER, not TEXT",
        ),
        Verification(
            ok=False,
            checked=1,
            first_bad_seq=2,
            reason="seq 2 is damaged: its seq is TEXT, not INTEGER",
        ),
    ]


# -- the indexes: verify(deep=True), and reads by run or call ---------------------------


async def fill_runs(path: Path) -> list[Event]:
    """Ten events of two runs, alternating (run-a: seq 1, 3, ..; run-b: 2, 4, ..), calls c0-c9."""
    async with SQLiteLedger(path) as ledger:
        return await ledger.append_many(
            [requested(f"c{i}", run_id="run-b" if i % 2 else "run-a") for i in range(10)]
        )


def change_index_entry(path: Path, index: str, old: bytes, new: bytes) -> None:
    """Rewrite the key of the last entry (in key order) of ``index`` whose key is ``old`` to
    ``new`` (as long): one damaged sector of the index, the table intact."""
    data = bytearray(path.read_bytes())
    root, page_size = root_page(path, index)
    found = None
    for cell in leaf_cells(data, root, page_size):
        _, record = varint(data, cell)  # the key's size
        header_size, types_at = varint(data, record)
        serial, _ = varint(data, types_at)
        value = record + header_size
        if bytes(data[value : value + serial_size(serial)]) == old:
            found = value
    assert found is not None
    data[found : found + len(new)] = new
    path.write_bytes(data)


async def test_a_damaged_run_index_is_found_by_deep_verify_and_never_mixes_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The last run-a entry of the run_id index says run-b: verify() cannot see it (every
    record is intact), verify(deep=True) names the first seq the index misses, and a read
    by run-b returns run-b's events only, in seq order, and logs what it left out."""
    path = tmp_path / "l.db"
    events = await fill_runs(path)
    change_index_entry(path, "events_run_id", b"run-a", b"run-b")
    async with SQLiteLedger(path, readonly=True) as ledger:
        shallow = await ledger.verify()
        deep = await ledger.verify(deep=True)
        with caplog.at_level(logging.WARNING, logger="agent_adapter.ledger"):
            run_b = await read_all(ledger, run_id="run-b")
        run_a = await read_all(ledger, run_id="run-a")
    assert shallow == Verification(ok=True, checked=10)
    assert (deep.ok, deep.checked, deep.first_bad_seq) == (False, 1, 2)
    assert deep.reason.startswith(
        "the file is damaged (PRAGMA integrity_check: row 2 missing from index events_run_id"
    )
    assert deep.reason.endswith("): reads by run or call may miss events or return another's")
    assert run_b == events[1::2]
    assert caplog.messages == [
        f"ledger {path}: a read by run 'run-b' / call None met seq 9, which is not one of its "
        "events (a damaged index?); it was left out: see agent-adapter ledger verify --deep"
    ]
    # What no cheap check can give back: the entry that moved is missing from run-a.
    assert run_a == events[0:8:2]


async def test_a_damaged_call_index_never_answers_for_another_call(tmp_path: Path) -> None:
    """The call_id index entry of c3 says c4: a read by call c4 returns c4's event only."""
    path = tmp_path / "l.db"
    events = await fill_runs(path)
    change_index_entry(path, "events_call_id", b"c3", b"c4")
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert await read_all(ledger, call_id="c4") == [events[4]]
        assert await read_all(ledger, run_id="run-a", call_id="c4") == [events[4]]
        deep = await ledger.verify(deep=True)
    assert (deep.ok, deep.first_bad_seq) == (False, 4)


def test_ledger_verify_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger verify` exits 0 on a ledger whose index is damaged; `--deep` exits 1 and
    names the seq, with verify(deep=True)'s reason."""
    path = tmp_path / "l.db"
    asyncio.run(fill_runs(path))
    assert main(["--no-color", "ledger", "verify", "--db", str(path), "--deep"]) == 0
    change_index_entry(path, "events_run_id", b"run-a", b"run-b")

    async def deep() -> Verification:
        async with SQLiteLedger(path, readonly=True) as ledger:
            return await ledger.verify(deep=True)

    reason = asyncio.run(deep()).reason
    capsys.readouterr()
    codes = [
        main(["--no-color", "ledger", "verify", "--db", str(path)]),
        main(["--no-color", "ledger", "verify", "--db", str(path), "--deep"]),
    ]
    assert (codes, capsys.readouterr().out) == (
        [0, 1],
        f"chain: intact (10 events verified)\nchain: broken at seq 2: {reason}\n",
    )
