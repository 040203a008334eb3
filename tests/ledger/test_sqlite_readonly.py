"""SQLiteLedger(readonly=True) on real files: no writes, no lock waits, no files created."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from _other_process import LockHolder, crash_after_appending, take_over

from agent_adapter.errors import LedgerError
from agent_adapter.ledger import CallRequested, Event, SQLiteLedger, Verification
from agent_adapter.ledger._sqlite import _Changed, _checked, _connect_snapshot

KEY = b"k" * 32
#: Every wait on a child is bounded: a broken test fails instead of hanging.
TIMEOUT_S = 60.0


def requested(call_id: str) -> CallRequested:
    """A ``call.requested`` event."""
    return CallRequested(ts=1.0, run_id="r1", call_id=call_id, tool="t", args={"n": call_id})


async def fill(path: Path, n: int, **kwargs: object) -> list[Event]:
    """Append ``n`` events to a new ledger at ``path`` and close it."""
    async with SQLiteLedger(path, **kwargs) as ledger:  # type: ignore[arg-type]
        return await ledger.append_many([requested(f"c{i}") for i in range(n)])


async def read_all(ledger: SQLiteLedger) -> list[Event]:
    """Every event ``read()`` yields."""
    return [event async for event in ledger.read()]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file in ``directory`` and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def execute(path: Path, sql: str) -> None:
    """Run one statement with the plain sqlite3 module and commit it."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql)
    conn.close()


async def test_reads_and_verifies_and_refuses_appends(tmp_path: Path) -> None:
    """A read-only ledger reads and verifies every event, refuses appends, changes nothing."""
    path = tmp_path / "l.db"
    events = await fill(path, 3)
    before = snapshot(tmp_path)
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert await read_all(ledger) == events
        assert await ledger.verify() == Verification(ok=True, checked=3)
        with pytest.raises(LedgerError) as one:
            await ledger.append(requested("x"))
        with pytest.raises(LedgerError) as many:
            await ledger.append_many([requested("y")])
    assert (str(one.value), str(many.value)) == (
        f"ledger {path} is open read-only",
        f"ledger {path} is open read-only",
    )
    assert snapshot(tmp_path) == before


async def test_appends_are_refused_before_anything_is_opened(tmp_path: Path) -> None:
    """An append as the first use of a read-only ledger is refused, and nothing is created."""
    path = tmp_path / "l.db"
    ledger = SQLiteLedger(path, readonly=True)
    with pytest.raises(LedgerError) as caught:
        await ledger.append(requested("x"))
    await ledger.close()
    assert str(caught.value) == f"ledger {path} is open read-only"
    assert snapshot(tmp_path) == {}


async def test_missing_file_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    """Opening a missing file read-only raises LedgerError naming it; no file appears."""
    path = tmp_path / "missing.db"
    ledger = SQLiteLedger(path, readonly=True)
    with pytest.raises(LedgerError) as caught:
        await read_all(ledger)
    await ledger.close()
    assert str(caught.value) == f"ledger {path}: no such file (a read-only ledger is never created)"
    assert snapshot(tmp_path) == {}


async def test_empty_database_is_not_made_a_ledger(tmp_path: Path) -> None:
    """A zero-byte file opened read-only is refused, not turned into a ledger."""
    path = tmp_path / "l.db"
    path.write_bytes(b"")
    with pytest.raises(LedgerError) as caught:
        await SQLiteLedger(path, readonly=True).open()
    assert str(caught.value) == (
        f"ledger {path} is an empty database, not a ledger yet (a read-only ledger is never "
        "created)"
    )
    assert snapshot(tmp_path) == {"l.db": b""}


async def test_keyed_ledger_verifies_with_its_key_only(tmp_path: Path) -> None:
    """Read-only learns that a file is keyed: verify needs the key, and checks with it."""
    path = tmp_path / "l.db"
    await fill(path, 2, key=KEY)
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert (ledger.keyed, await ledger.verify()) == (
            True,
            Verification(
                ok=False,
                checked=0,
                reason=f"ledger {path} is keyed (HMAC): its chain cannot be checked without "
                "the key",
            ),
        )
    async with SQLiteLedger(path, readonly=True, key=KEY) as ledger:
        assert await ledger.verify() == Verification(ok=True, checked=2)


async def test_reads_while_another_process_holds_the_write_lock(tmp_path: Path) -> None:
    """A lock held by another process is not waited for: reads and verify return at once."""
    path = tmp_path / "l.db"
    events = await fill(path, 3)
    holder = LockHolder(path)
    try:
        assert holder.wait_locked() == "locked"
        # A wait for the lock would raise after 0.2 s: the lock is held throughout.
        async with SQLiteLedger(path, readonly=True, busy_timeout_s=0.2) as ledger:
            assert await read_all(ledger) == events
            assert await ledger.verify() == Verification(ok=True, checked=3)
        # The lock was really held: a writing ledger waits it out and fails.
        writer = SQLiteLedger(path, busy_timeout_s=0.2)
        with pytest.raises(LedgerError) as caught:
            await writer.append(requested("blocked"))
        await writer.close()
    finally:
        assert holder.release() == 0
    assert str(caught.value) == (
        f"ledger {path}: opening: another connection held the write lock for more than 0.2 s"
    )


async def test_sees_what_a_writer_appends_after_it_opened(tmp_path: Path) -> None:
    """Opened while nobody writes, it reads what writers append later, open or closed."""
    path = tmp_path / "l.db"
    first = await fill(path, 2)
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert await read_all(ledger) == first
        async with SQLiteLedger(path) as writer:
            live = await writer.append(requested("live"))
            assert await read_all(ledger) == [*first, live]
        async with SQLiteLedger(path) as writer:
            closed = await writer.append(requested("closed"))
        assert await read_all(ledger) == [*first, live, closed]
        assert await ledger.verify() == Verification(ok=True, checked=4)


async def test_reads_what_a_crashed_writer_left_in_its_wal(tmp_path: Path) -> None:
    """Events committed only to the WAL (the writer never checkpointed) are read and verified."""
    path = tmp_path / "l.db"
    assert crash_after_appending(path, 3) == (0, "")
    assert sorted(snapshot(tmp_path)) == ["l.db", "l.db-mark", "l.db-shm", "l.db-wal"]
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert [e.call_id for e in await read_all(ledger)] == ["c0", "c1", "c2"]
        assert await ledger.verify() == Verification(ok=True, checked=3)


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
async def test_refused_newer_schema_leaves_no_sidecar_files(tmp_path: Path, readonly: bool) -> None:
    """A ledger of a newer schema is refused and nothing appears beside it (no -wal/-shm)."""
    path = tmp_path / "l.db"
    await fill(path, 1)
    execute(path, "UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    before = snapshot(tmp_path)
    with pytest.raises(LedgerError) as caught:
        await SQLiteLedger(path, readonly=readonly).open()
    assert str(caught.value) == (
        f"ledger {path} was written by a newer version of agent-adapter (schema 99; this "
        "version reads up to 1); it was left unchanged"
    )
    assert snapshot(tmp_path) == before
    assert list(before) == ["l.db", "l.db-mark"]


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
async def test_refused_corrupt_wal_ledger_leaves_no_sidecar_files(
    tmp_path: Path, readonly: bool
) -> None:
    """A WAL-mode ledger with overwritten pages is refused and nothing appears beside it."""
    path = tmp_path / "l.db"
    await fill(path, 200)
    with path.open("r+b") as fh:
        fh.seek(4096)
        fh.write(b"\xff" * 8192)
    before = snapshot(tmp_path)
    with pytest.raises(LedgerError) as caught:
        await SQLiteLedger(path, readonly=readonly).open()
    assert str(caught.value) == (
        f"ledger {path} is corrupt (reading its schema): database disk image is malformed"
    )
    assert snapshot(tmp_path) == before
    assert list(before) == ["l.db", "l.db-mark"]


async def test_a_snapshot_read_the_file_changed_under_is_not_trusted(tmp_path: Path) -> None:
    """A read through an immutable snapshot is discarded when a writer changed the file
    meanwhile (it could be torn), and kept when nobody did."""
    path = tmp_path / "l.db"
    await fill(path, 2)
    conn, signature = _connect_snapshot(str(path), 0.0)
    try:
        count = "SELECT count(*) FROM events"
        assert _checked(conn, signature, str(path), lambda c: c.execute(count).fetchone()) == (2,)

        def read_while_written(c: sqlite3.Connection) -> object:
            # Pages enough to grow the file: the change shows in its size, whatever the clock.
            execute(path, "INSERT INTO meta (name, value) VALUES ('touched', zeroblob(65536))")
            return c.execute(count).fetchone()

        with pytest.raises(_Changed):
            _checked(conn, signature, str(path), read_while_written)
    finally:
        conn.close()


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
async def test_opening_beside_a_live_ledger_keeps_its_locks(tmp_path: Path, readonly: bool) -> None:
    """Opening a second ledger on a file this process has open does not drop the first one's
    POSIX locks (closing any descriptor of the file would), so no other process can take it."""
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as first:
        [event] = await first.append_many([requested("c0")])
        async with SQLiteLedger(path, readonly=readonly) as second:
            assert await read_all(second) == [event]
        assert take_over(path) == "database is locked"
