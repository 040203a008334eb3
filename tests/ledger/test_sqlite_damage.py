"""SQLiteLedger on damaged files: a WAL that recovery cuts short, a changed byte in the main
file, a damaged index. Real child processes killed with SIGKILL; files changed as a faulty
disk, copy or cleanup would change them."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import _ledger_worker as worker
import pytest
from _child import Child
from _other_process import TIMEOUT_S, crash_after_appending

from agent_adapter import Executor, Registry
from agent_adapter.cli import main
from agent_adapter.errors import LedgerError
from agent_adapter.ledger import (
    CallRequested,
    Event,
    MemoryLedger,
    SQLiteLedger,
    Verification,
    _sqlite,
)

KEY = b"k" * 32
LOST = (
    "acknowledged events were lost (its -wal damaged, cut short or removed after a crash, "
    "or a power cut with synchronous=NORMAL)"
)
REFUSED = "appends are refused so that the evidence stays (see ledger verify)"


@pytest.fixture(autouse=True)
def bodies() -> Iterator[list[tuple[str, str]]]:
    """The tool bodies that ran in this (the parent) process during the test."""
    worker.BODIES.clear()
    yield worker.BODIES
    worker.BODIES.clear()


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


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file in ``directory`` and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def remove(*paths: Path) -> None:
    """Delete files (as a cleanup after a crash would)."""
    for path in paths:
        path.unlink()


def mark_of(path: Path) -> Path:
    """The mark file beside the ledger at ``path``."""
    return Path(f"{path}-mark")


def mark_seq(path: Path) -> int:
    """The seq the mark names (``agent-adapter-mark 1 SEQ HASH MAC``)."""
    return int(mark_of(path).read_bytes().split()[2])


def cli_verify(path: Path, *flags: str) -> tuple[int, str, str]:
    """``agent-adapter ledger verify --db PATH`` in a fresh process."""
    argv = ["--no-color", "ledger", "verify", "--db", str(path), *flags]
    done = subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    return done.returncode, done.stdout, done.stderr


# -- the WAL: SIGKILL, then the -wal cut short or one byte changed ----------------------

WAL_HEADER, FRAME_HEADER = 32, 24


def wal_commits(path: Path) -> tuple[int, list[int]]:
    """The WAL's page size and the indexes of its commit frames, in its current generation
    (frames whose salts match the header's; frames after them are left from before the
    last checkpoint restarted the WAL)."""
    data = Path(f"{path}-wal").read_bytes()
    page_size = struct.unpack(">I", data[8:12])[0]
    salts = data[16:24]
    size = FRAME_HEADER + page_size
    commits = []
    for i in range((len(data) - WAL_HEADER) // size):
        frame = WAL_HEADER + i * size
        if data[frame + 8 : frame + 16] != salts:
            break
        if struct.unpack(">I", data[frame + 4 : frame + 8])[0]:  # db size: a commit frame
            commits.append(i)
    return page_size, commits


async def crash_while_appending(path: Path, *, acks: int = 300) -> list[int]:
    """A child appends from 8 tasks and is SIGKILLed after ``acks`` acknowledgements, again
    until the WAL holds at least 40 commits (a checkpoint may have just restarted it); the
    seqs acknowledged before the kills."""
    acked: list[int] = []
    for _ in range(10):
        child = await Child.start("append-stream", str(path), "8")
        try:
            for _ in range(acks):
                await child.expect("acked ")
            lines = (await kill_and_drain([child]))[0]
        finally:
            await child.close()
        acked += [int(line.split()[1]) for line in lines if line.startswith("acked ")]
        if len(wal_commits(path)[1]) >= 40:
            return acked
    raise AssertionError("the WAL never held 40 commits at a kill")


async def kill_and_drain(children: list[Child]) -> list[list[str]]:
    """SIGKILL every child at once, then read what each printed to the end.

    Killed first, drained after: a child's unread output can fill the pipe, and the
    asyncio transport reports the exit only once its pipe is read to the end.
    """
    for child in children:
        os.kill(child.proc.pid, signal.SIGKILL)
    printed = []
    for child in children:
        printed.append(child.lines + await child.rest())
        await child.wait()
    return printed


def damage_wal(path: Path, damage: str) -> None:
    """Cut the WAL after a commit half-way through it, or change one byte of the frame
    after that commit: WAL recovery keeps the frames before it and drops every later one
    (20 commits or more, all but the last acknowledged)."""
    page_size, commits = wal_commits(path)
    at = WAL_HEADER + (commits[len(commits) // 2] + 1) * (FRAME_HEADER + page_size)
    wal = Path(f"{path}-wal")
    if damage == "cut-short":
        os.truncate(wal, at)
        return
    with wal.open("r+b") as fh:
        fh.seek(at + FRAME_HEADER + 100)  # inside the page: the frame's checksum fails
        byte = fh.read(1)[0]
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte ^ 0xFF]))


@pytest.mark.parametrize("damage", ["cut-short", "byte-changed"])
async def test_a_wal_damaged_after_a_crash_loses_no_event_unnoticed(
    tmp_path: Path, damage: str, bodies: list[tuple[str, str]]
) -> None:
    """SIGKILL while appending, then the -wal damaged: verify() names the first lost seq
    (read-only and writable, and `ledger verify`), and neither a writer nor an executor
    appends past it, so the mark that is the evidence stays as it was."""
    path = tmp_path / "l.db"
    acked = await crash_while_appending(path)
    damage_wal(path, damage)
    async with SQLiteLedger(path, readonly=True) as ledger:
        left = len(await read_all(ledger))
        readonly = await ledger.verify()
    assert left < max(acked)  # acknowledged events were lost
    assert (readonly.ok, readonly.checked, readonly.first_bad_seq) == (False, left, left + 1)
    marked = mark_seq(path)
    mark_before = mark_of(path).read_bytes()
    lost = f"the ledger ends at seq {left} but its mark file {path}-mark says {marked}: {LOST}"
    assert max(acked) <= marked  # the mark covers every acknowledged event
    assert readonly == Verification(ok=False, checked=left, first_bad_seq=left + 1, reason=lost)
    assert cli_verify(path) == (1, f"chain: broken at seq {left + 1}: {lost}\n", "")

    async with SQLiteLedger(path) as ledger:
        assert await ledger.verify() == readonly
        with pytest.raises(LedgerError) as caught:
            await ledger.append(requested("after"))
        assert len(await read_all(ledger)) == left
    assert str(caught.value) == f"ledger {path}: {lost}; {REFUSED}"

    executor = await Executor.open(worker.build_registry(), ledger=SQLiteLedger(path))
    try:
        with pytest.raises(LedgerError) as refused:
            await executor.call("noop", {}, run_id="r9", call_id="c9")
    finally:
        await executor.close()
    assert str(refused.value) == f"ledger {path}: {lost}; {REFUSED}"
    assert bodies == []
    assert mark_of(path).read_bytes() == mark_before
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert len(await read_all(ledger)) == left


async def test_a_wal_removed_before_any_checkpoint_is_not_a_fresh_ledger(tmp_path: Path) -> None:
    """The -wal (and -shm) removed after a crash, every event still in it: the file is an
    empty database, and opening it (to write or to read) refuses rather than start a
    new, empty ledger over the loss; nothing is created or changed."""
    path = tmp_path / "l.db"
    assert crash_after_appending(path, 3) == (0, "")
    remove(Path(f"{path}-wal"), Path(f"{path}-shm"))
    before = snapshot(tmp_path)
    messages = []
    for readonly in (False, True):
        with pytest.raises(LedgerError) as caught:
            await SQLiteLedger(path, readonly=readonly).open()
        messages.append(str(caught.value))
    assert messages == 2 * [
        f"ledger {path} holds no events, but its mark file {path}-mark says it held 3: they "
        "were lost (its -wal removed or damaged after a crash?); nothing was created, so "
        "that the evidence stays"
    ]
    assert snapshot(tmp_path) == before


async def test_sigkill_without_damage_is_no_alarm(tmp_path: Path) -> None:
    """Killed while appending, six times over on one file (FULL and NORMAL): each restart
    appends (its writer does not refuse), the file verifies, and the mark is a lower
    bound that covers every acknowledged event."""
    path = tmp_path / "l.db"
    acked: list[int] = []
    for cycle in range(6):
        child = await Child.start("append-stream", str(path), "8", ("FULL", "NORMAL")[cycle % 2])
        try:
            for _ in range(60):
                await child.expect("acked ")
            lines = (await kill_and_drain([child]))[0]
        finally:
            await child.close()
        acked += [int(line.split()[1]) for line in lines if line.startswith("acked ")]
        async with SQLiteLedger(path, readonly=True) as ledger:
            stored = len(await read_all(ledger))
            assert await ledger.verify() == Verification(ok=True, checked=stored)
        assert max(acked) <= mark_seq(path) <= stored


async def test_two_processes_killed_while_appending_keep_the_mark_a_lower_bound(
    tmp_path: Path,
) -> None:
    """Two writers appending to one file, both SIGKILLed: the mark covers what each had
    acknowledged and names no more than the file holds (no false alarm)."""
    path = tmp_path / "l.db"
    await fill(path, 1)  # created first, so neither child races to create it
    children = [await Child.start("append-stream", str(path), "4") for _ in range(2)]
    acked: list[int] = []
    try:
        for child in children:
            for _ in range(150):
                await child.expect("acked ")
        for lines in await kill_and_drain(children):
            acked += [int(line.split()[1]) for line in lines if line.startswith("acked ")]
    finally:
        for child in children:
            await child.close()
    async with SQLiteLedger(path, readonly=True) as ledger:
        stored = len(await read_all(ledger))
        assert await ledger.verify() == Verification(ok=True, checked=stored)
    assert max(acked) <= mark_seq(path) <= stored


async def test_two_processes_appending_leave_the_mark_at_the_last_commit(tmp_path: Path) -> None:
    """Two writers racing on one file and closing: the mark names the last event (it only
    moves forward, so no writer's older mark overwrote a newer one)."""
    path = tmp_path / "l.db"
    await fill(path, 1)
    children = [await Child.start("append-n", str(path), tag, "300") for tag in ("x", "y")]
    try:
        for child in children:
            await child.expect("ready")
        for child in children:
            await child.send("go")
        for child in children:
            await child.expect("done")
            assert await child.wait() == 0
    finally:
        for child in children:
            await child.close()
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert await ledger.verify() == Verification(ok=True, checked=601)
    assert mark_seq(path) == 601


async def test_an_append_waits_for_another_holder_of_the_marks_lock(tmp_path: Path) -> None:
    """Another writer holding the mark's lock (between its commit and its mark's write):
    an append commits, but is acknowledged only once it has moved the mark after the
    other writer let go, never before and never by skipping the mark."""
    import fcntl

    path = tmp_path / "l.db"
    await fill(path, 1)
    async with SQLiteLedger(path, busy_timeout_s=60) as ledger:
        fd = os.open(mark_of(path), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # another open file: it excludes the writer's
            append = asyncio.ensure_future(ledger.append(requested("c1")))
            raw = sqlite3.connect(path)
            try:
                while raw.execute("SELECT count(*) FROM events").fetchone()[0] < 2:
                    assert not append.done()
                    await asyncio.sleep(0.01)
            finally:
                raw.close()
            # Committed; the mark still names seq 1, and the append is not acknowledged.
            await asyncio.sleep(0.05)
            assert not append.done()
            assert mark_seq(path) == 1
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        assert (await append).seq == 2
        assert mark_seq(path) == 2
        assert await ledger.verify() == Verification(ok=True, checked=2)


# -- the mark itself: behind, replaced, torn, garbage, missing ----------------------------


async def test_a_mark_behind_the_table_is_no_alarm(tmp_path: Path) -> None:
    """A mark older than the table (the process was killed between a commit and the mark's
    write) verifies, and the next append moves it to the new last seq."""
    path = tmp_path / "l.db"
    await fill(path, 3)
    behind = mark_of(path).read_bytes()
    await fill(path, 2, start=3)
    mark_of(path).write_bytes(behind)
    async with SQLiteLedger(path) as ledger:
        assert await ledger.verify() == Verification(ok=True, checked=5)
        await ledger.append(requested("c5"))
        assert await ledger.verify() == Verification(ok=True, checked=6)
    assert mark_seq(path) == 6


async def test_a_mark_naming_another_record_is_named(tmp_path: Path) -> None:
    """A sound mark whose seq holds another record (another ledger's mark, or the ledger
    rewritten from there on) names that seq."""
    path, other = tmp_path / "l.db", tmp_path / "other.db"
    await fill(path, 5)
    async with SQLiteLedger(other) as ledger:
        await ledger.append_many([requested(f"x{i}") for i in range(3)])
    mark_of(path).write_bytes(mark_of(other).read_bytes())
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert await ledger.verify() == Verification(
            ok=False,
            checked=2,
            first_bad_seq=3,
            reason=f"seq 3 is not the record its mark file {path}-mark names (replaced)",
        )


def torn(record: bytes) -> bytes:
    """The first 100 bytes of a mark (a write cut short)."""
    return record[:100]


def garbage(record: bytes) -> bytes:
    """A mark's size of bytes that are no mark."""
    return bytes(range(256))


def altered(record: bytes) -> bytes:
    """A well-formed mark whose seq was changed (5 -> 9): its MAC no longer fits."""
    return record.replace(b"mark 1 5 ", b"mark 1 9 ")


@pytest.mark.parametrize(
    ("change", "key", "problem"),
    [
        (torn, None, "is unreadable (torn or overwritten)"),
        (garbage, None, "is unreadable (torn or overwritten)"),
        (altered, None, "does not match its MAC: it was altered"),
        (altered, KEY, "does not match its MAC: it was altered, or written without the key"),
    ],
    ids=["torn", "garbage", "altered", "altered-keyed"],
)
async def test_a_damaged_mark_is_reported_and_kept(
    tmp_path: Path, change: object, key: bytes | None, problem: str
) -> None:
    """A torn, garbage or altered mark: verify() says so (read-only too), never raises; a
    writer still reads, refuses appends, and leaves the mark as it found it."""
    path = tmp_path / "l.db"
    events = await fill(path, 5, key=key)
    assert callable(change)
    damaged = change(mark_of(path).read_bytes())
    mark_of(path).write_bytes(damaged)
    reason = f"its mark file {path}-mark {problem}"
    expected = Verification(ok=False, checked=5, first_bad_seq=6, reason=reason)
    async with SQLiteLedger(path, key=key, readonly=True) as ledger:
        assert await ledger.verify() == expected
    async with SQLiteLedger(path, key=key) as ledger:
        assert await read_all(ledger) == events
        assert await ledger.verify() == expected
        with pytest.raises(LedgerError) as caught:
            await ledger.append(requested("c5"))
    assert str(caught.value) == f"ledger {path}: {reason}; {REFUSED}"
    assert mark_of(path).read_bytes() == damaged


def missing(path: Path, seq: int) -> str:
    """What a ledger of ``seq`` events opened without its mark file says (open, verify)."""
    return (
        f"its mark file {path}-mark was missing though the ledger holds {seq} event(s) "
        "(restored from a backup of the .db and -wal only, or written before marks were "
        "kept): events a damaged WAL lost before then cannot be detected; a backup must "
        "include the -mark file"
    )


async def test_read_only_never_creates_or_writes_the_mark(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a mark (a ledger from before marks, or copied alone), a read-only ledger
    reads and verifies, says what it cannot detect (one warning at open, the line in
    verify), and creates nothing; a writer creates the mark at the table's end."""
    path = tmp_path / "l.db"
    events = await fill(path, 3)
    mark_of(path).unlink()
    before = snapshot(tmp_path)
    with caplog.at_level(logging.WARNING, logger="agent_adapter.ledger"):
        async with SQLiteLedger(path, readonly=True) as ledger:
            assert await read_all(ledger) == events
            assert await ledger.verify() == Verification(
                ok=True, checked=3, reason=missing(path, 3)
            )
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("WARNING", f"ledger {path}: {missing(path, 3)}", None)
    ]
    assert snapshot(tmp_path) == before
    async with SQLiteLedger(path) as ledger:
        assert await ledger.verify() == Verification(ok=True, checked=3, reason=missing(path, 3))
    assert mark_seq(path) == 3


async def test_a_writer_without_its_mark_file_says_so_once_at_open_and_in_verify(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ledger restored from a backup of the .db and -wal only: the writer that opens it
    logs one warning (no traceback) and every verify of that ledger object says that
    earlier WAL losses cannot be detected; the new mark protects what follows, so the
    next open says nothing and verifies plainly. An empty new ledger says nothing."""
    path = tmp_path / "l.db"
    with caplog.at_level(logging.WARNING, logger="agent_adapter.ledger"):
        await fill(path, 3)
        assert caplog.records == []
        mark_of(path).unlink()
        async with SQLiteLedger(path) as ledger:
            first = await ledger.verify()
            await ledger.append(requested("c3"))
            second = await ledger.verify()
        assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
            ("WARNING", f"ledger {path}: {missing(path, 3)}", None)
        ]
        caplog.clear()
        async with SQLiteLedger(path) as ledger:
            again = await ledger.verify()
    assert first == Verification(ok=True, checked=3, reason=missing(path, 3))
    assert second == Verification(ok=True, checked=4, reason=missing(path, 3))
    assert again == Verification(ok=True, checked=4)
    assert caplog.records == []
    assert mark_seq(path) == 4


def test_ledger_verify_says_the_mark_file_is_missing(tmp_path: Path) -> None:
    """``agent-adapter ledger verify`` of a ledger copied without its -mark: exit 0, the
    line says what cannot be detected and what a backup must include; no traceback."""
    path = tmp_path / "l.db"
    asyncio.run(fill(path, 2))
    mark_of(path).unlink()
    code, out, err = cli_verify(path)
    assert (code, out) == (0, f"chain: intact (2 events verified; {missing(path, 2)})\n")
    assert "Traceback" not in err


async def test_a_keyed_ledger_keeps_a_keyed_mark(tmp_path: Path) -> None:
    """A keyed ledger's mark is an HMAC: it verifies with the key, through restarts."""
    path = tmp_path / "l.db"
    await fill(path, 2, key=KEY)
    await fill(path, 2, start=2, key=KEY)
    async with SQLiteLedger(path, key=KEY, readonly=True) as ledger:
        assert await ledger.verify() == Verification(ok=True, checked=4)
    assert mark_seq(path) == 4


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


def corrupt_a_middle_page(path: Path) -> int:
    """Overwrite the header of the events table's middle leaf page (SQLite: "malformed");
    returns the first seq on it."""
    data = bytearray(path.read_bytes())
    meta_root, page_size = root_page(path, "meta")
    leaves = [
        page
        for page in range(2, len(data) // page_size + 1)
        if data[(page - 1) * page_size] == 0x0D and page != meta_root
    ]
    page = leaves[len(leaves) // 2]
    _, at = varint(data, leaf_cells(data, page, page_size)[0])  # the first cell's size
    first, _ = varint(data, at)  # its rowid: the page's first seq
    data[(page - 1) * page_size + 1 : (page - 1) * page_size + 8] = b"\xff" * 7
    path.write_bytes(data)
    return first


async def test_a_corrupt_page_is_named_at_its_first_seq(tmp_path: Path) -> None:
    """A leaf page of the events table whose header was overwritten (SQLite: "malformed"):
    verify() names the first seq on it, and read() refuses with a LedgerError naming the
    last seq before it (the seq itself is on the page), instead of failing without one."""
    path = tmp_path / "l.db"
    await fill(path, 300)
    first = corrupt_a_middle_page(path)
    async with SQLiteLedger(path, readonly=True) as ledger:
        verification = await ledger.verify()
        with pytest.raises(LedgerError) as caught:
            await read_all(ledger)
    malformed = "cannot be read: the file is damaged (database disk image is malformed)"
    assert verification == Verification(
        ok=False, checked=first - 1, first_bad_seq=first, reason=f"seq {first} {malformed}"
    )
    assert str(caught.value) == (
        f"ledger {path}: a record after seq {first - 1} {malformed}; see ledger verify"
    )


async def test_a_file_from_before_the_call_index_with_a_corrupt_page_still_opens_to_append(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ledger made before events_call_run, with a corrupt page of events in the middle:
    the first writer cannot build the new index (the build reads every row). It opens as
    before, keeps the old index, says so in a warning, and appends; verify() still names
    the damaged page."""
    path = tmp_path / "l.db"
    await fill(path, 300)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE INDEX events_call_id ON events (call_id)")
    conn.execute("DROP INDEX events_call_run")
    conn.close()
    first = corrupt_a_middle_page(path)
    with caplog.at_level(logging.WARNING, logger="agent_adapter.ledger"):
        async with SQLiteLedger(path) as ledger:
            [appended] = await ledger.append_many([requested("c300")])
            verification = await ledger.verify()
    assert appended.seq == 301
    assert verification.first_bad_seq == first
    assert [m.split(" (")[0] for m in caplog.messages] == [
        f"ledger {path}: its call index could not be brought up to date"
    ]
    assert caplog.messages[0].endswith(
        "it was left as it was, and reads by run and call are slower: see agent-adapter "
        "ledger verify --deep"
    )
    names = {row[0] for row in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert {"events_call_id", "events_run_id"} <= names
    assert "events_call_run" not in names


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


def change_index_entry(
    path: Path, index: str, old: bytes, new: bytes, *, column: int = 0, first: bool = False
) -> None:
    """Rewrite ``column`` of the last (``first``: the first) entry in key order of
    ``index`` whose ``column`` is ``old`` to ``new`` (as long): one damaged sector of the
    index, the table intact."""
    data = bytearray(path.read_bytes())
    root, page_size = root_page(path, index)
    found = None
    for cell in leaf_cells(data, root, page_size):
        _, record = varint(data, cell)  # the key's size
        header_size, types_at = varint(data, record)
        value = record + header_size
        for _ in range(column):
            serial, types_at = varint(data, types_at)
            value += serial_size(serial)
        serial, _ = varint(data, types_at)
        if bytes(data[value : value + serial_size(serial)]) == old and not (first and found):
            found = value
    assert found is not None
    data[found : found + len(new)] = new
    path.write_bytes(data)


async def test_a_damaged_run_index_is_found_by_deep_verify_and_never_mixes_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The last run-a entry of the run_id index says run-b (every record intact): verify()
    finds that the index differs from the table and names the first seq it misses, as
    verify(deep=True) does, and a read by run-b returns run-b's events only, in seq order,
    and logs what it left out."""
    path = tmp_path / "l.db"
    events = await fill_runs(path)
    change_index_entry(path, "events_run_id", b"run-a", b"run-b")
    async with SQLiteLedger(path, readonly=True) as ledger:
        shallow = await ledger.verify()
        deep = await ledger.verify(deep=True)
        with caplog.at_level(logging.WARNING, logger="agent_adapter.ledger"):
            run_b = await read_all(ledger, run_id="run-b")
        run_a = await read_all(ledger, run_id="run-a")
    assert shallow == deep
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
    """The call index entry of c3 says c4: a read by call c4 returns c4's event only
    (the read by run and call is the next test's)."""
    path = tmp_path / "l.db"
    events = await fill_runs(path)
    change_index_entry(path, "events_call_run", b"c3", b"c4")
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert await read_all(ledger, call_id="c4") == [events[4]]
        deep = await ledger.verify(deep=True)
    assert (deep.ok, deep.first_bad_seq) == (False, 4)


async def test_a_damaged_call_index_never_answers_for_another_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The (call_id, run_id) index, which a read by run and call seeks both ids in: the
    entry of run-b's c1 (seq 2) says run-a. A read of run-a's c1 meets seq 2 there, leaves
    it out and logs it; deep verify names seq 2."""
    path = tmp_path / "l.db"
    await fill_runs(path)
    change_index_entry(path, "events_call_run", b"run-b", b"run-a", column=1, first=True)
    async with SQLiteLedger(path, readonly=True) as ledger:
        with caplog.at_level(logging.WARNING, logger="agent_adapter.ledger"):
            c1 = await read_all(ledger, run_id="run-a", call_id="c1")
        deep = await ledger.verify(deep=True)
    assert c1 == []
    assert caplog.messages == [
        f"ledger {path}: a read by run 'run-a' / call 'c1' met seq 2, which is not one of "
        "its events (a damaged index?); it was left out: see agent-adapter ledger verify --deep"
    ]
    assert (deep.ok, deep.first_bad_seq) == (False, 2)
    assert "missing from index events_call_run" in deep.reason


async def test_a_call_index_entry_past_the_end_never_hides_what_is_committed_during_a_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call index entry whose seq was changed to one past the end (3 -> 100): a read
    by call id alone loses seq 3, as any read through that index does, but the phantom
    never moves the read past what is committed while it runs."""
    monkeypatch.setattr(_sqlite, "_READ_PAGE", 2)
    monkeypatch.setattr(_sqlite, "_CALL_SEQS_HELD", 4)
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        events = await ledger.append_many([requested("c1", run_id=f"r{i}") for i in range(11)])
    change_index_entry(path, "events_call_run", b"\x03", b"\x64", column=2)
    async with SQLiteLedger(path) as ledger:
        seen: list[Event] = []
        async for event in ledger.read(call_id="c1"):
            seen.append(event)
            if event.seq == 9:  # the seqs held from here on are 10, 11 and the phantom
                late = await ledger.append_many(
                    [requested("c1", run_id=f"late{i}") for i in range(3)]
                )
    assert seen == [e for e in events if e.seq != 3] + late


async def echo_ledger(path: Path, ran: list[int]) -> Registry:
    """A registry with one ``echo`` tool that records each run in ``ran``; the ledger at
    ``path`` gets run-a's calls c0 and c1 (seq 1-4, 5-8), then run-b's and run-c's c0."""
    registry = Registry()

    @registry.tool
    async def echo(x: int) -> int:
        """Echo."""
        ran.append(x)
        return x

    async with Executor(registry, ledger=SQLiteLedger(path)) as first:
        for c in range(2):
            await first.call("echo", {"x": c}, run_id="run-a", call_id=f"c{c}")
        for run in ("run-b", "run-c"):
            await first.call("echo", {"x": 9}, run_id=run, call_id="c0")
    return registry


async def test_a_damaged_run_index_never_makes_a_finished_call_of_a_cold_run_run_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The run_id index entries of run-a's call c1 (its four events) say run-b, every
    record intact: verify() (not deep) is not ok at seq 5. An executor that remembers one
    run has run-a cold; c1 asked again recalls run-a, whose read by run comes back with
    fewer finished calls than the executor knew of: it reads the table instead, warns
    (the table holds more) and replays c1, whose body ran once."""
    path = tmp_path / "l.db"
    ran: list[int] = []
    registry = await echo_ledger(path, ran)
    for _ in range(4):
        change_index_entry(path, "events_run_id", b"run-a", b"run-b")
    async with SQLiteLedger(path, readonly=True) as ledger:
        found = await ledger.verify()
    assert (found.ok, found.first_bad_seq) == (False, 5)
    assert "missing from index events_run_id" in found.reason
    with caplog.at_level(logging.WARNING, logger="agent_adapter"):
        async with Executor(registry, ledger=SQLiteLedger(path), remember=1) as second:
            assert "run-a" in second.state.cold
            assert await second.call("echo", {"x": 1}, run_id="run-a", call_id="c1") == 1
            c1 = [
                e.type
                async for e in second.ledger.read()
                if (e.run_id, e.call_id) == ("run-a", "c1")
            ]
    assert ran == [0, 1, 9, 9]
    assert c1[-1] == "call.replayed" and c1.count("call.started") == 1
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        (
            "WARNING",
            "ledger: a read of run 'run-a' returned 1 finished call(s) where the ledger "
            "holds 2 (a damaged index?); read from the whole ledger instead: see "
            "agent-adapter ledger verify",
            None,
        )
    ]


async def test_a_call_another_replica_adds_to_a_cold_run_never_makes_up_for_a_hidden_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As above, but while run-a is cold here another replica finishes a new call c2 of
    it: the read by run then returns as many finished calls as run-a had when it went cold
    (c0 and c2; c1 hidden). Counted apart, c2 does not make up for c1: the recall reads
    the table and c1 is replayed, not run again. (Before, the counts matched, and c1 ran a
    second time with no warning.)"""
    path = tmp_path / "l.db"
    ran: list[int] = []
    registry = await echo_ledger(path, ran)
    for _ in range(4):
        change_index_entry(path, "events_run_id", b"run-a", b"run-b")
    with caplog.at_level(logging.WARNING, logger="agent_adapter"):
        async with Executor(registry, ledger=SQLiteLedger(path), remember=1) as second:
            assert "run-a" in second.state.cold
            async with Executor(registry, ledger=SQLiteLedger(path)) as third:
                assert await third.call("echo", {"x": 2}, run_id="run-a", call_id="c2") == 2
            # An unrelated call: `second` hears the other replica's events as it commits.
            assert await second.call("echo", {"x": 5}, run_id="run-d", call_id="c0") == 5
            assert "run-a" in second.state.cold
            assert await second.call("echo", {"x": 1}, run_id="run-a", call_id="c1") == 1
            c1 = [
                e.type
                async for e in second.ledger.read()
                if (e.run_id, e.call_id) == ("run-a", "c1")
            ]
    assert ran == [0, 1, 9, 9, 2, 5]
    assert c1[-1] == "call.replayed" and c1.count("call.started") == 1
    assert [r.getMessage() for r in caplog.records] == [
        "ledger: a read of run 'run-a' returned 2 finished call(s) where the ledger holds 3 "
        "(a damaged index?); read from the whole ledger instead: see agent-adapter ledger "
        "verify"
    ]


async def test_a_damaged_call_index_never_hides_a_finished_calls_outcome(
    tmp_path: Path,
) -> None:
    """The (call_id, run_id) index entry of run-a's c1 outcome (seq 8) says run-b: verify()
    is not ok at seq 8, and c1 asked again is replayed from the table (the read by run and
    call misses the outcome), not refused and not run again."""
    path = tmp_path / "l.db"
    ran: list[int] = []
    registry = await echo_ledger(path, ran)
    change_index_entry(path, "events_call_run", b"run-a", b"run-b", column=1)
    async with Executor(registry, ledger=SQLiteLedger(path)) as again:
        found = await again.ledger.verify()
        assert await again.call("echo", {"x": 1}, run_id="run-a", call_id="c1") == 1
    assert (found.ok, found.first_bad_seq) == (False, 8)
    assert "missing from index events_call_run" in found.reason
    assert ran == [0, 1, 9, 9]


def test_ledger_verify_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger verify` of a ledger whose index is damaged exits 1 and names the seq, with
    verify(deep=True)'s reason, as `--deep` does."""
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
        [1, 1],
        f"chain: broken at seq 2: {reason}\nchain: broken at seq 2: {reason}\n",
    )
