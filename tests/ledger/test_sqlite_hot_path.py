"""The SQLite writer's statements per commit: only what the commit needs (issue 16, item 1).

While no other connection commits, the writer knows the table's tail (its own last
commit) and does not read and check it again; once another connection commits, it does,
and the chain continues from the other writer's last event.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from agent_adapter.ledger import CallRequested, CallStarted, SQLiteLedger, Verification
from agent_adapter.ledger._batches import Batch as _Batch
from agent_adapter.ledger._chain import make_record
from agent_adapter.ledger._chaining import chain_batch


def event(i: int) -> CallRequested:
    """A small event of call ``c{i}``."""
    return CallRequested(ts=float(i), run_id="r", call_id=f"c{i}", tool="t")


def kinds(statements: list[str]) -> list[str]:
    """Each traced statement by its kind: the tail read, the head update, or its text."""
    out = []
    for sql in statements:
        if sql.startswith("SELECT (SELECT value FROM meta WHERE name = 'head_seq')"):
            out.append("read tail")
        elif sql.startswith("INSERT INTO events"):
            out.append("insert")
        elif sql.startswith("UPDATE meta SET value = CASE name"):
            out.append("update head")
        else:
            out.append(sql)
    return out


async def test_the_tail_is_read_again_only_after_another_connection_committed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        await ledger.append(event(1))  # the first commit reads the tail
        traced: list[str] = []
        writer = ledger._writer
        assert writer is not None and writer.conn is not None
        # Statements run in the writer thread; the list is read once the appends returned.
        writer.conn.set_trace_callback(traced.append)
        await ledger.append(event(2))
        await ledger.append(event(3))
        mine = list(traced)
        traced.clear()
        async with SQLiteLedger(path) as other:
            foreign = await other.append(event(4))
        fourth = await ledger.append(event(5))
        after_other = list(traced)
        writer.conn.set_trace_callback(None)
        assert (fourth.seq, fourth.prev) == (5, foreign.hash)
        assert await ledger.verify() == Verification(ok=True, checked=5)
    one = ["BEGIN IMMEDIATE", "PRAGMA data_version", "insert", "update head", "COMMIT"]
    assert kinds(mine) == one + one
    assert kinds(after_other) == [
        "BEGIN IMMEDIATE",
        "PRAGMA data_version",
        "read tail",
        "insert",
        "update head",
        "COMMIT",
    ]


async def test_concurrent_appenders_still_share_commits(tmp_path: Path) -> None:
    """16 appenders in one loop iteration: one transaction for all of them."""
    path = tmp_path / "l.db"
    async with SQLiteLedger(path) as ledger:
        await ledger.append(event(0))
        writer = ledger._writer
        assert writer is not None and writer.conn is not None
        traced: list[str] = []
        writer.conn.set_trace_callback(traced.append)
        stored = await asyncio.gather(*(ledger.append(event(i)) for i in range(1, 17)))
        writer.conn.set_trace_callback(None)
    assert [e.seq for e in stored] == list(range(2, 18))
    assert kinds(traced) == ["BEGIN IMMEDIATE", "PRAGMA data_version"] + ["insert"] * 16 + [
        "update head",
        "COMMIT",
    ]


def test_a_group_commit_chains_the_rows_make_record_would() -> None:
    """The writer's inlined chaining stores what ``make_record`` makes, with or without a key."""
    for key in (None, b"k" * 32):
        mine = [event(i) for i in range(5)] + [CallStarted(ts=9.0, run_id="r", call_id="c9")]
        theirs = [event(i) for i in range(5)] + [CallStarted(ts=9.0, run_id="r", call_id="c9")]
        mine[2].seq, mine[2].prev, mine[2].hash = 7, "x", "y"  # re-appended: reset first
        done = chain_batch(_Batch(mine, None), 3, "a" * 64, key, "l.db", [], None)  # type: ignore[arg-type]
        expected, prev = [], "a" * 64
        for seq, e in enumerate(theirs, start=4):
            record = make_record(e, seq, prev, key)
            expected.append(msgspec.structs.astuple(record))
            prev = record.hash
        assert done == (expected, 9, prev)
        assert [(e.seq, e.prev, e.hash) for e in mine] == [(e.seq, e.prev, e.hash) for e in theirs]
