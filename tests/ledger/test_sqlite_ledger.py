"""SQLiteLedger on a real file: schema, refusing foreign files, tampering, keys, locks."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from agent_adapter.errors import LedgerError
from agent_adapter.ledger import (
    CallRequested,
    Event,
    Problem,
    SQLiteLedger,
    Verification,
    _sqlite,
    replay,
)
from agent_adapter.ledger._head import head_mac as _head_mac
from agent_adapter.ledger._sqlite import _READ_PAGE, SCHEMA_VERSION
from agent_adapter.ledger._sqlite_mark import _encode, mark_path
from agent_adapter.ledger._sqlite_threads import _ReadOnlyReader

KEY = b"k" * 32
# The reason of a keyed chain none of whose hashes verifies under the key given.
WRONG_KEY = "no event's hash verifies under this key: wrong key, or the ledger was altered"
NO_KEY = (
    "the ledger has no key (it is marked as written without one) and no event's hash "
    "verifies under this key: check it without the key (if it was written with this key, "
    "it was altered)"
)


def requested(call_id: str, run_id: str = "r1") -> CallRequested:
    """A ``call.requested`` event."""
    return CallRequested(ts=1.0, run_id=run_id, call_id=call_id, tool="t", args={"n": call_id})


async def fill(path: Path, n: int, **kwargs: object) -> list[Event]:
    """Append ``n`` events to a new ledger at ``path`` and close it."""
    async with SQLiteLedger(path, **kwargs) as ledger:  # type: ignore[arg-type]
        return await ledger.append_many([requested(f"c{i}") for i in range(n)])


async def read_all(ledger: SQLiteLedger, **kwargs: object) -> list[Event]:
    """Every event ``read(**kwargs)`` yields."""
    return [event async for event in ledger.read(**kwargs)]  # type: ignore[arg-type]


def file_bytes(path: Path) -> bytes:
    """The file's bytes (a plain function: blocking reads stay out of coroutines)."""
    return path.read_bytes()


def query(path: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    """Run one statement with the plain sqlite3 module (autocommit) and return its rows."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


# -- schema ---------------------------------------------------------------------------


async def test_schema_tables_indexes_and_meta(tmp_path: Path) -> None:
    """A new file gets the events table, its run_id and (call_id, run_id) indexes and a
    versioned meta."""
    path = tmp_path / "l.db"
    [event] = await fill(path, 1)
    columns = [row[1] for row in query(path, "PRAGMA table_info(events)")]
    assert columns == ["seq", "type", "run_id", "call_id", "tool", "ts", "payload", "prev", "hash"]
    indexes = {
        row[0]: row[1]
        for row in query(
            path, "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        )
    }
    assert indexes == {
        "events_run_id": "CREATE INDEX events_run_id ON events (run_id)",
        "events_call_run": "CREATE INDEX events_call_run ON events (call_id, run_id)",
    }
    meta = dict(query(path, "SELECT name, value FROM meta"))
    assert meta == {
        "format": "agent-adapter-ledger",
        "schema_version": str(SCHEMA_VERSION),
        "keyed": "0",
        "head_seq": "1",
        "head_hash": event.hash,
        "head_mac": _head_mac(1, event.hash, None),
    }
    assert query(path, "PRAGMA journal_mode") == [("wal",)]


def index_names(path: Path) -> set[object]:
    """The names of the events table's indexes in the file at ``path``."""
    return {row[0] for row in query(path, "SELECT name FROM sqlite_master WHERE type = 'index'")}


def read_plan(path: Path, where: str, *params: object) -> str:
    """How SQLite runs the ledger's page query with ``where`` (EXPLAIN QUERY PLAN)."""
    sql = f"SELECT seq, prev, hash, payload FROM events WHERE {where} ORDER BY seq LIMIT ?"
    return " ".join(str(row[-1]) for row in query(path, f"EXPLAIN QUERY PLAN {sql}", *params))


async def test_a_file_from_before_the_call_run_index_gets_it_from_its_first_writer(
    tmp_path: Path,
) -> None:
    """A ledger made before events_call_run (its call index was call_id alone) reads the
    same through that index read-only, and is left unchanged; the first writer to open it
    replaces the index, and a read by run and call then seeks both ids (call ids repeat
    across runs: through call_id alone it scanned every run's c1)."""
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        events = await ledger.append_many(
            [requested(f"c{i % 3}", run_id=f"run-{i // 3}") for i in range(9)]
        )
    query(path, "CREATE INDEX events_call_id ON events (call_id)")
    query(path, "DROP INDEX events_call_run")
    query(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    before = file_bytes(path)
    where = "seq > ? AND run_id = ? AND call_id = ?"
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert await read_all(ledger, run_id="run-1", call_id="c1") == [events[4]]
        assert await read_all(ledger, call_id="c2") == events[2::3]
    assert file_bytes(path) == before
    assert "events_call_run" not in read_plan(path, where, 0, "run-1", "c1", 10)
    async with SQLiteLedger(path) as ledger:
        await ledger.open()
    assert index_names(path) == {"sqlite_autoindex_meta_1", "events_run_id", "events_call_run"}
    assert "events_call_run (call_id=? AND run_id=? AND rowid>?)" in read_plan(
        path, where, 0, "run-1", "c1", 10
    )
    async with SQLiteLedger(path) as ledger:
        assert await read_all(ledger, run_id="run-2", call_id="c0") == [events[6]]
        assert await read_all(ledger, call_id="c2") == events[2::3]
        assert await ledger.verify(deep=True) == Verification(ok=True, checked=9)


async def test_a_file_from_before_the_call_run_index_opens_with_any_busy_timeout(
    tmp_path: Path,
) -> None:
    """The migration restores the connection's busy timeout as it was, whatever it was
    made from (an infinite one too)."""
    path = tmp_path / "l.db"
    await fill(path, 3)
    query(path, "CREATE INDEX events_call_id ON events (call_id)")
    query(path, "DROP INDEX events_call_run")
    async with SQLiteLedger(path, busy_timeout_s=float("inf")) as ledger:
        assert len(await read_all(ledger, call_id="c1")) == 1
    assert index_names(path) == {"sqlite_autoindex_meta_1", "events_run_id", "events_call_run"}


async def test_columns_mirror_the_event_and_payload_is_the_encoding(tmp_path: Path) -> None:
    """Each row's columns are the event's ids, type, ts and chain fields."""
    path = tmp_path / "l.db"
    [event] = await fill(path, 1)
    rows = query(path, "SELECT seq, type, run_id, call_id, tool, ts, prev, hash FROM events")
    assert rows == [(1, "call.requested", "r1", "c0", "t", 1.0, "", event.hash)]


async def test_reopen_continues_the_chain(tmp_path: Path) -> None:
    """A reopened file keeps its events, and new appends continue seq and chain."""
    path = tmp_path / "l.db"
    first = await fill(path, 3)
    async with SQLiteLedger(path) as ledger:
        more = await ledger.append(requested("c3"))
        assert (more.seq, more.prev) == (4, first[-1].hash)
        assert await read_all(ledger) == [*first, more]
        assert await ledger.verify() == Verification(ok=True, checked=4)


async def test_empty_file_becomes_a_ledger(tmp_path: Path) -> None:
    """A zero-byte file is an empty database, so it becomes a ledger."""
    path = tmp_path / "l.db"
    path.write_bytes(b"")
    await fill(path, 2)
    assert query(path, "SELECT count(*) FROM events") == [(2,)]


async def test_normal_synchronous_is_an_explicit_choice(tmp_path: Path) -> None:
    """synchronous defaults to FULL, NORMAL is accepted, anything else is refused."""
    assert SQLiteLedger(tmp_path / "a.db").synchronous == "FULL"
    path = tmp_path / "n.db"
    events = await fill(path, 2, synchronous="NORMAL")
    async with SQLiteLedger(path) as ledger:
        assert await read_all(ledger) == events
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteLedger(tmp_path / "x.db", synchronous="OFF")


async def test_reads_span_pages(tmp_path: Path) -> None:
    """Reads longer than one page come back complete and in order, filters included."""
    path = tmp_path / "l.db"
    n = _READ_PAGE * 2 + 7
    async with SQLiteLedger(path) as ledger:
        events = await ledger.append_many(
            [requested(f"c{i}", run_id=f"r{i % 2}") for i in range(n)]
        )
        assert await read_all(ledger) == events
        assert await read_all(ledger, run_id="r1") == events[1::2]
        assert await read_all(ledger, after=n - 3) == events[-3:]


def hold_call_seqs(monkeypatch: pytest.MonkeyPatch, page: int, held: int) -> None:
    """Pages of ``page`` events, and ``held`` seqs held at a time, for reads by call id."""
    monkeypatch.setattr(_sqlite, "_READ_PAGE", page)
    monkeypatch.setattr(_sqlite, "_CALL_SEQS_HELD", held)


async def read_with_a_late_append(ledger: SQLiteLedger, run_id: str) -> tuple[list[Event], Event]:
    """A read of call c1 during which, after its first event, another c1 is appended:
    what the read gave, and the late event."""
    reader = ledger.read(call_id="c1")
    seen = [await anext(reader)]
    late = await ledger.append(requested("c1", run_id=run_id))
    seen += [event async for event in reader]
    return seen, late


@pytest.mark.parametrize("page", [4, 5, _READ_PAGE])
async def test_a_read_by_call_alone_spans_runs_and_pages_in_seq_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    """A call id in every run (a workflow's c1), read without a run: every one of its
    events, in seq order, across pages and past the seqs the read holds at a time (the
    call index lists them run by run, so the runs are named to sort against seq), and
    what was appended while the read was under way."""
    hold_call_seqs(monkeypatch, page, 2 * page)
    path = tmp_path / "l.db"
    n = 4 * page + 3
    async with SQLiteLedger(path) as ledger:
        events = await ledger.append_many(
            [requested(f"c{i % 2}", run_id=f"run-{n - i:05d}") for i in range(2 * n)]
        )
        ones = events[1::2]
        assert await read_all(ledger, call_id="c1") == ones
        assert await read_all(ledger, call_id="c1", after=ones[2].seq) == ones[3:]
        seen, late = await read_with_a_late_append(ledger, "run-00000")
    assert seen == [*ones, late]


async def test_a_read_by_call_alone_gives_a_page_the_reader_runs_again_in_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only reader runs a page again when the file changed under it (a writer
    arrived): run twice, each page gives the same events, and none is skipped."""
    hold_call_seqs(monkeypatch, 4, 8)
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        events = await ledger.append_many(
            [requested(f"c{i % 2}", run_id=f"run-{99 - i:02d}") for i in range(40)]
        )
    once = _ReadOnlyReader.call

    def twice(self: _ReadOnlyReader, fn: Callable[[sqlite3.Connection], object]) -> object:
        once(self, fn)
        return once(self, fn)

    monkeypatch.setattr(_ReadOnlyReader, "call", twice)
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert await read_all(ledger, call_id="c1") == events[1::2]


@pytest.mark.parametrize(("page", "held", "n"), [(4, 8, 7), (4, 6, 9), (3, 4, 10)])
async def test_a_read_by_call_alone_includes_what_was_committed_during_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: int, held: int, n: int
) -> None:
    """An event of the call committed after the read's first page is read, whether the
    seqs held ran out on a short page or not."""
    hold_call_seqs(monkeypatch, page, held)
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        events = await ledger.append_many([requested("c1", run_id=f"run-{i}") for i in range(n)])
        seen, late = await read_with_a_late_append(ledger, "run-late")
    assert seen == [*events, late]


async def test_a_read_by_call_alone_keeps_to_the_variables_sqlite_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite before 3.32 allows 999 variables in a statement: pages of a read by call
    id alone never bind more than the connection allows."""
    path = tmp_path / "l.db"
    connect = SQLiteLedger._connect_reader

    def limited(self: SQLiteLedger) -> sqlite3.Connection:
        conn = connect(self)
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        return conn

    monkeypatch.setattr(SQLiteLedger, "_connect_reader", limited)
    async with SQLiteLedger(path) as ledger:
        events = await ledger.append_many([requested("c1", run_id=f"r{i}") for i in range(1500)])
        assert await read_all(ledger, call_id="c1") == events


async def test_stopping_a_read_early_leaves_the_ledger_usable(tmp_path: Path) -> None:
    """Breaking out of a multi-page read does not disturb later reads or appends."""
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        events = await ledger.append_many([requested(f"c{i}") for i in range(_READ_PAGE + 5)])
        reader = ledger.read()
        first = [await anext(reader) for _ in range(3)]
        await reader.aclose()
        assert first == events[:3]
        late = await ledger.append(requested("late"))
        assert await read_all(ledger, after=_READ_PAGE + 5) == [late]


async def test_close_commits_what_is_queued(tmp_path: Path) -> None:
    """Appends waiting for their commit when close() starts are committed, not dropped."""
    path = tmp_path / "l.db"
    ledger = SQLiteLedger(path)
    await ledger.open()
    results = await asyncio.gather(
        *(ledger.append(requested(f"c{i}")) for i in range(20)), ledger.close()
    )
    assert sorted(e.seq for e in results[:20]) == list(range(1, 21))
    assert query(path, "SELECT count(*) FROM events") == [(20,)]


async def test_append_after_close_is_refused(tmp_path: Path) -> None:
    """A closed ledger refuses appends with LedgerError naming the file."""
    ledger = SQLiteLedger(tmp_path / "l.db")
    await ledger.append(requested("c0"))
    await ledger.close()
    with pytest.raises(LedgerError, match=r"l\.db is closed"):
        await ledger.append(requested("c1"))


def test_memory_paths_are_refused() -> None:
    """':memory:' is not a file: MemoryLedger is the store for that."""
    with pytest.raises(ValueError, match="MemoryLedger"):
        SQLiteLedger(":memory:")


# -- foreign, newer and corrupt files -------------------------------------------------


async def assert_refused(path: Path, match: str) -> None:
    """Opening ``path`` raises LedgerError naming it, and leaves its bytes unchanged."""
    before = file_bytes(path)
    ledger = SQLiteLedger(path)
    with pytest.raises(LedgerError, match=match) as caught:
        await ledger.open()
    assert str(path) in str(caught.value)
    with pytest.raises(LedgerError, match=match):
        await ledger.append(requested("c0"))  # lazily opened: refused the same way
    await ledger.close()
    assert file_bytes(path) == before


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    """A ledger written by a newer schema version is refused and left as it was."""
    path = tmp_path / "l.db"
    await fill(path, 2)
    query(path, "UPDATE meta SET value = ? WHERE name = 'schema_version'", SCHEMA_VERSION + 1)
    query(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    await assert_refused(path, f"newer version .*schema {SCHEMA_VERSION + 1}")


async def test_sqlite_file_with_other_tables_is_refused(tmp_path: Path) -> None:
    """An SQLite database that is not a ledger is refused; no table is added to it."""
    path = tmp_path / "app.db"
    query(path, "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    await assert_refused(path, "not an agent-adapter ledger .*users")
    assert query(path, "SELECT name FROM sqlite_master") == [("users",)]


async def test_non_sqlite_file_is_refused(tmp_path: Path) -> None:
    """A file that is not SQLite at all is refused and left unchanged."""
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a ledger\n" * 20)
    await assert_refused(path, "not an SQLite database")


async def test_corrupt_file_is_refused(tmp_path: Path) -> None:
    """A file with an SQLite header and garbage after it is refused as corrupt."""
    path = tmp_path / "l.db"
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)
    await assert_refused(path, "corrupt")


async def test_undecodable_payload_is_read_flagged_and_named_by_verify(tmp_path: Path) -> None:
    """A payload that is no longer an event is read as a flagged placeholder at its seq (one
    bad record never makes the ledger unreadable), and verify() names that seq."""
    path = tmp_path / "l.db"
    await fill(path, 3)
    query(path, "UPDATE events SET payload = ? WHERE seq = 2", b"\xff not json")
    async with SQLiteLedger(path) as ledger:
        events = await read_all(ledger)
        verification = await ledger.verify()
    assert [(e.seq, type(e).__name__, bool(e.malformed)) for e in events] == [
        (1, "CallRequested", False),
        (2, "UnknownEvent", True),
        (3, "CallRequested", False),
    ]
    assert "not JSON" in events[1].malformed
    assert (verification.ok, verification.first_bad_seq) == (False, 2)


# -- tampering ------------------------------------------------------------------------


async def test_changed_payload_byte_is_named(tmp_path: Path) -> None:
    """Changing one byte of a stored payload makes verify() name that seq."""
    path = tmp_path / "l.db"
    await fill(path, 5)
    [(payload,)] = query(path, "SELECT payload FROM events WHERE seq = 3")
    assert isinstance(payload, bytes)
    tampered = payload.replace(b'"c2"', b'"c9"', 1)
    assert len(tampered) == len(payload) and tampered != payload
    query(path, "UPDATE events SET payload = ? WHERE seq = 3", tampered)
    async with SQLiteLedger(path) as ledger:
        verification = await ledger.verify()
        assert verification == Verification(
            ok=False,
            checked=2,
            first_bad_seq=3,
            reason="seq 3 does not match its hash (altered)",
        )
        audit = replay([e async for e in ledger.read()], verification)
        # The chain problem comes first (the calls have no outcomes: "incomplete").
        assert audit.problems()[0] == Problem(
            kind="broken-chain", message=verification.reason, seq=3
        )


async def test_deleted_row_is_named(tmp_path: Path) -> None:
    """Deleting a stored row makes verify() name the missing seq."""
    path = tmp_path / "l.db"
    await fill(path, 5)
    query(path, "DELETE FROM events WHERE seq = 4")
    async with SQLiteLedger(path) as ledger:
        assert await ledger.verify() == Verification(
            ok=False, checked=3, first_bad_seq=4, reason="seq 4 is missing (found 5)"
        )


async def test_rechained_rows_without_the_key_are_caught(tmp_path: Path) -> None:
    """With a key, someone who edits a payload and recomputes plain hashes is caught."""
    from agent_adapter.ledger import chain_hash

    path = tmp_path / "l.db"
    await fill(path, 2, key=KEY)
    rows = query(path, "SELECT seq, payload FROM events ORDER BY seq")
    prev = ""
    for seq, payload in rows:
        assert isinstance(seq, int) and isinstance(payload, bytes)
        digest = chain_hash(seq, prev, payload.replace(b"c", b"x"))
        query(
            path,
            "UPDATE events SET payload = ?, prev = ?, hash = ? WHERE seq = ?",
            payload.replace(b"c", b"x"),
            prev,
            digest,
            seq,
        )
        prev = digest
    async with SQLiteLedger(path, key=KEY) as ledger:
        result = await ledger.verify()
    # No hash verifies under the key: the key-holder knows the key, so it was altered.
    assert result == Verification(ok=False, checked=0, reason=WRONG_KEY)


# -- the head -------------------------------------------------------------------------


def rechain(path: Path, key: bytes | None = None) -> str:
    """Recompute every row's prev and hash (plain SHA-256 without ``key``); the last hash."""
    from agent_adapter.ledger import chain_hash

    prev = ""
    for seq, payload in query(path, "SELECT seq, payload FROM events ORDER BY seq"):
        assert isinstance(seq, int) and isinstance(payload, bytes)
        digest = chain_hash(seq, prev, payload, key)
        query(path, "UPDATE events SET prev = ?, hash = ? WHERE seq = ?", prev, digest, seq)
        prev = digest
    return prev


def set_head(path: Path, seq: int, hash_: str, mac: str) -> None:
    """Overwrite the head's three meta rows, as someone editing the file would."""
    for name, value in (("head_seq", str(seq)), ("head_hash", hash_), ("head_mac", mac)):
        query(path, "UPDATE meta SET value = ? WHERE name = ?", value, name)


def set_mark(path: Path, seq: int, hash_: str) -> None:
    """Overwrite the (unkeyed) mark file beside the ledger, as someone editing it would."""
    Path(mark_path(str(path))).write_bytes(_encode(seq, hash_, None))


@pytest.mark.parametrize("deleted", [1, 3, 5])
@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
async def test_deleted_tail_is_named(tmp_path: Path, deleted: int, readonly: bool) -> None:
    """Deleting the last rows (all of them too) makes verify() name the first deleted seq."""
    path = tmp_path / "l.db"
    await fill(path, 5)
    query(path, "DELETE FROM events WHERE seq > ?", 5 - deleted)
    left = 5 - deleted
    async with SQLiteLedger(path, readonly=readonly) as ledger:
        assert await ledger.verify() == Verification(
            ok=False,
            checked=left,
            first_bad_seq=left + 1,
            reason=f"the ledger ends at seq {left} but its head says 5: events were deleted "
            "from the end",
        )


async def test_append_after_a_deleted_tail_is_refused(tmp_path: Path) -> None:
    """A writer does not append past a head that is ahead: that would erase the evidence."""
    path = tmp_path / "l.db"
    await fill(path, 5)
    query(path, "DELETE FROM events WHERE seq > 3")
    async with SQLiteLedger(path) as ledger:
        with pytest.raises(LedgerError) as caught:
            await ledger.append(requested("c9"))
        assert (await ledger.verify()).first_bad_seq == 4
    assert str(caught.value) == (
        f"ledger {path}: the ledger ends at seq 3 but its head says 5: events were deleted "
        "from the end (or replaced); appends are refused so that the evidence stays (see "
        "ledger verify)"
    )
    assert query(path, "SELECT count(*) FROM events") == [(3,)]


async def test_replaced_last_record_is_named(tmp_path: Path) -> None:
    """An unkeyed tail rewritten and re-chained (head untouched) no longer matches the head."""
    path = tmp_path / "l.db"
    await fill(path, 3)
    query(
        path,
        "UPDATE events SET payload = CAST(replace(payload, 'c2', 'c9') AS BLOB), call_id = 'c9'"
        " WHERE seq = 3",
    )
    rechain(path)
    async with SQLiteLedger(path) as ledger:
        assert await ledger.verify() == Verification(
            ok=False,
            checked=2,
            first_bad_seq=3,
            reason="seq 3 is not the record its head names (replaced)",
        )


async def test_deleted_tail_and_forged_head_need_the_key(tmp_path: Path) -> None:
    """With a key, a truncation is caught whether the head is left alone or forged without it."""
    from agent_adapter.ledger import chain_hash

    path = tmp_path / "l.db"
    events = await fill(path, 5, key=KEY)
    query(path, "DELETE FROM events WHERE seq > 3")
    async with SQLiteLedger(path, key=KEY, readonly=True) as ledger:
        left_alone = await ledger.verify()
    # Rewritten to name seq 3: plain SHA-256 over what the MAC covers, and an HMAC with
    # another key, are both refused.
    forged = []
    for key in (None, b"not the key"):
        set_head(path, 3, events[2].hash, chain_hash(3, events[2].hash, b"head keyed=1", key))
        async with SQLiteLedger(path, key=KEY, readonly=True) as ledger:
            forged.append(await ledger.verify())
    assert left_alone == Verification(
        ok=False,
        checked=3,
        first_bad_seq=4,
        reason="the ledger ends at seq 3 but its head says 5: events were deleted from the end",
    )
    assert forged == 2 * [
        Verification(
            ok=False,
            checked=3,
            first_bad_seq=4,
            reason="the head (it says seq 3) does not match its MAC: it was altered, or "
            "written without the key",
        )
    ]


async def test_keyed_flag_flipped_and_rechained_is_caught_with_the_key(tmp_path: Path) -> None:
    """Flag set to 0, rows and head re-chained with SHA-256: only the key-holder can tell."""
    path = tmp_path / "l.db"
    await fill(path, 5, key=KEY)
    query(path, "DELETE FROM events WHERE seq > 3")
    query(path, "UPDATE meta SET value = '0' WHERE name = 'keyed'")
    last = rechain(path)
    set_head(path, 3, last, _head_mac(3, last, None))
    set_mark(path, 3, last)  # the mark beside the file too, or it would name seq 5
    async with SQLiteLedger(path, readonly=True) as ledger:
        without_key = await ledger.verify()
    async with SQLiteLedger(path, key=KEY, readonly=True) as ledger:
        with_key = await ledger.verify()
    writer = SQLiteLedger(path, key=KEY)
    with pytest.raises(LedgerError) as caught:
        await writer.verify()
    await writer.close()
    # The limit of an unkeyed check: a deliberate rewrite (head and mark too) verifies.
    assert without_key == Verification(ok=True, checked=3)
    # Marked unkeyed, so the key is not called wrong; its holder is told what that means.
    assert with_key == Verification(ok=False, checked=0, reason=NO_KEY)
    assert str(caught.value) == (
        f"ledger {path} was written without a key; a key cannot be added to an existing chain"
    )


async def test_keyed_flag_flipped_alone_is_caught(tmp_path: Path) -> None:
    """Flag set to 0 over a keyed chain: the key-holder names the flag, the others fail seq 1."""
    path = tmp_path / "l.db"
    await fill(path, 3, key=KEY)
    query(path, "UPDATE meta SET value = '0' WHERE name = 'keyed'")
    results = []
    for key in (KEY, None):
        async with SQLiteLedger(path, key=key, readonly=True) as ledger:
            results.append(await ledger.verify())
    writer = SQLiteLedger(path, key=KEY)
    with pytest.raises(LedgerError) as caught:
        await writer.open()
    await writer.close()
    assert results == [
        Verification(
            ok=False,
            checked=0,
            first_bad_seq=1,
            reason=f"ledger {path} is marked unkeyed, but it was written with this key: its "
            "'keyed' flag was altered",
        ),
        Verification(
            ok=False, checked=0, first_bad_seq=1, reason="seq 1 does not match its hash (altered)"
        ),
    ]
    assert str(caught.value) == (
        f"ledger {path} is marked unkeyed, but it was written with this key: its 'keyed' flag "
        "was altered"
    )


@pytest.mark.parametrize("key", [None, KEY], ids=["unkeyed", "keyed"])
async def test_ledger_from_before_heads_verifies_and_gets_one(
    tmp_path: Path, key: bytes | None
) -> None:
    """A file without head rows verifies (the reason says so) and its next append adds one."""
    path = tmp_path / "l.db"
    await fill(path, 3, key=key)
    query(path, "DELETE FROM meta WHERE name LIKE 'head_%'")
    async with SQLiteLedger(path, key=key, readonly=True) as ledger:
        before = await ledger.verify()
    async with SQLiteLedger(path, key=key) as ledger:
        await ledger.append(requested("c3"))
        after = await ledger.verify()
    assert (before, after) == (
        Verification(
            ok=True,
            checked=3,
            reason="no head recorded (the ledger was written before heads were kept): "
            "deletions from its end cannot be detected until an append records one",
        ),
        Verification(ok=True, checked=4),
    )


async def test_partly_deleted_head_is_named(tmp_path: Path) -> None:
    """A head with a row missing is not taken for a ledger from before heads."""
    path = tmp_path / "l.db"
    await fill(path, 2)
    query(path, "DELETE FROM meta WHERE name = 'head_mac'")
    async with SQLiteLedger(path, readonly=True) as ledger:
        assert await ledger.verify() == Verification(
            ok=False,
            checked=2,
            first_bad_seq=3,
            reason="the head is incomplete (part of it was deleted)",
        )


# -- keys -----------------------------------------------------------------------------


async def test_keyed_file_records_that_it_is_keyed_never_the_key(tmp_path: Path) -> None:
    """A keyed ledger says so in meta and the key's bytes appear nowhere in the file."""
    path = tmp_path / "l.db"
    await fill(path, 3, key=KEY)
    assert dict(query(path, "SELECT name, value FROM meta"))["keyed"] == "1"
    query(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    assert KEY not in file_bytes(path)


async def test_keyed_file_without_the_key(tmp_path: Path) -> None:
    """Without the key: reads work, verify() says it cannot check, appends are refused."""
    path = tmp_path / "l.db"
    events = await fill(path, 3, key=KEY)
    async with SQLiteLedger(path) as ledger:
        assert ledger.keyed
        assert await read_all(ledger) == events
        assert await ledger.verify() == Verification(
            ok=False,
            checked=0,
            reason=f"ledger {path} is keyed (HMAC): its chain cannot be checked without the key",
        )
        with pytest.raises(LedgerError, match=r"keyed .*needs its key"):
            await ledger.append(requested("c3"))
    assert query(path, "SELECT count(*) FROM events") == [(3,)]


async def test_wrong_key_cannot_append(tmp_path: Path) -> None:
    """A wrong key is caught against the last record: the append fails, the chain stays."""
    path = tmp_path / "l.db"
    await fill(path, 3, key=KEY)
    async with SQLiteLedger(path, key=b"not the key") as ledger:
        with pytest.raises(LedgerError, match=r"key does not match the last record .*seq 3"):
            await ledger.append(requested("c3"))
        result = await ledger.verify()
        assert result == Verification(ok=False, checked=0, reason=WRONG_KEY)
    async with SQLiteLedger(path, key=KEY) as ledger:
        assert await ledger.verify() == Verification(ok=True, checked=3)


async def test_empty_keyed_ledger_with_a_wrong_key_says_wrong_key(tmp_path: Path) -> None:
    """A keyed ledger with no events yet: its head does not verify under a wrong key."""
    path = tmp_path / "empty.db"
    async with SQLiteLedger(path, key=KEY) as ledger:
        await ledger.verify()
    async with SQLiteLedger(path, key=b"not the key", readonly=True) as ledger:
        result = await ledger.verify()
    assert result == Verification(
        ok=False,
        checked=0,
        reason="the head does not verify under this key: wrong key, or the ledger was altered",
    )


async def test_key_cannot_be_added_to_an_unkeyed_chain(tmp_path: Path) -> None:
    """Opening an unkeyed ledger that has events with a key is refused."""
    path = tmp_path / "l.db"
    await fill(path, 1)
    ledger = SQLiteLedger(path, key=KEY)
    with pytest.raises(LedgerError, match="written without a key"):
        await ledger.open()
    await ledger.close()
    assert dict(query(path, "SELECT name, value FROM meta"))["keyed"] == "0"


# -- locks ----------------------------------------------------------------------------


async def test_append_waits_for_another_writer(tmp_path: Path) -> None:
    """An append waits while another connection holds the write lock, then commits."""
    path = tmp_path / "l.db"
    await fill(path, 1)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        async with SQLiteLedger(path) as ledger:
            other.execute("BEGIN IMMEDIATE")
            task = asyncio.ensure_future(ledger.append(requested("c1")))
            done, _ = await asyncio.wait({task}, timeout=0.2)
            assert done == set()  # it cannot commit while the lock is held
            other.execute("COMMIT")
            event = await asyncio.wait_for(task, timeout=30)
            assert event.seq == 2
    finally:
        other.close()


async def test_lock_held_too_long_is_a_clear_error(tmp_path: Path) -> None:
    """Past its bounded wait an append raises LedgerError naming the file, never 'locked'."""
    path = tmp_path / "l.db"
    await fill(path, 1)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        async with SQLiteLedger(path, busy_timeout_s=0.05) as ledger:
            await ledger.verify()  # opened before the lock is taken
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(LedgerError) as caught:
                await ledger.append(requested("c1"))
            message = str(caught.value)
            assert message == (
                f"ledger {path}: appending: another connection held the write lock for "
                "more than 0.05 s"
            )
            assert "database is locked" not in message
            other.execute("COMMIT")
            event = await ledger.append(requested("c2"))
            assert event.seq == 2
            assert await ledger.verify() == Verification(ok=True, checked=2)
    finally:
        other.close()


async def test_a_read_across_close_fails_instead_of_hanging(tmp_path: Path) -> None:
    """A read still running when the ledger closes ends with LedgerError, never a hang."""
    path = tmp_path / "l.db"
    ledger = SQLiteLedger(path)
    await ledger.append_many([requested(f"c{i}") for i in range(_READ_PAGE * 2 + 5)])
    reader = ledger.read()
    seen = [await anext(reader)]
    await ledger.close()
    with pytest.raises(LedgerError, match=r"l\.db is closed"):
        async for event in reader:
            seen.append(event)
    # The pages fetched before the close are delivered; the next one is refused.
    assert len(seen) == _READ_PAGE * 2
    with pytest.raises(LedgerError, match="closed"):
        await read_all(ledger)


async def test_changed_index_column_is_named(tmp_path: Path) -> None:
    """Changing an indexed column (so that filtered reads would hide a row) is named too."""
    path = tmp_path / "l.db"
    await fill(path, 4)
    query(path, "UPDATE events SET run_id = 'elsewhere' WHERE seq = 3")
    async with SQLiteLedger(path) as ledger:
        assert await ledger.verify() == Verification(
            ok=False,
            checked=2,
            first_bad_seq=3,
            reason="seq 3: its indexed columns do not match its payload (altered)",
        )


async def test_events_of_a_newer_version_verify(tmp_path: Path) -> None:
    """A row of a type this version does not know reads as UnknownEvent and verifies."""
    from agent_adapter.ledger import UnknownEvent, chain_hash

    path = tmp_path / "l.db"
    [first] = await fill(path, 1)
    payload = b'{"type":"call.teleported","ts":2.0,"run_id":"r1","call_id":"c9","to":"mars"}'
    query(
        path,
        "INSERT INTO events VALUES (2, 'call.teleported', 'r1', 'c9', '', 2.0, ?, ?, ?)",
        payload,
        first.hash,
        chain_hash(2, first.hash, payload),
    )
    async with SQLiteLedger(path) as ledger:
        # Inserted beside the ledger, as a writer from before heads would: the head trails.
        assert await ledger.verify() == Verification(
            ok=True,
            checked=2,
            reason="the head names seq 1 but the ledger ends at seq 2: the events after "
            "seq 1 were appended without updating it, so deleting them would go undetected",
        )
        [_, newer] = await read_all(ledger)
        assert isinstance(newer, UnknownEvent)
        assert (newer.original_type, newer.data) == ("call.teleported", {"to": "mars"})
