"""An executor never opens a damaged ledger without a word (issue 10, item 7): it warns
as it replays, and ``Executor.open(..., verify=True)`` refuses."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from agent_adapter import Executor, Registry
from agent_adapter.errors import LedgerError
from agent_adapter.ledger import CallStarted, MemoryLedger, SQLiteLedger


def registry() -> Registry:
    return Registry()


async def filled_memory(n: int = 5) -> MemoryLedger:
    ledger = MemoryLedger()
    await ledger.append_many([CallStarted(run_id="r", call_id=f"c{i}", tool="t") for i in range(n)])
    return ledger


async def filled_file(path: Path, n: int = 5) -> None:
    async with SQLiteLedger(path) as ledger:
        await ledger.append_many(
            [CallStarted(run_id="r", call_id=f"c{i}", tool="t") for i in range(n)]
        )


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_an_intact_ledger_opens_without_a_word(caplog: pytest.LogCaptureFixture) -> None:
    """No warning, and verify=True opens it."""
    ledger = await filled_memory()
    await Executor.open(registry(), ledger=ledger)
    await Executor.open(registry(), ledger=ledger, verify=True)
    assert warnings_of(caplog) == []


async def test_a_deleted_middle_record_warns_and_verify_refuses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A record deleted from the middle: a warning naming the missing seq; verify=True
    raises LedgerError and opens nothing."""
    ledger = await filled_memory()
    del ledger.records[2]
    executor = await Executor.open(registry(), ledger=ledger)
    assert executor._started
    [warning] = warnings_of(caplog)
    assert "seq 3 is missing" in warning and "verify=True" in warning
    with pytest.raises(LedgerError, match="not intact: seq 3 is missing"):
        await Executor.open(registry(), ledger=ledger, verify=True)


async def test_an_altered_record_warns_and_verify_refuses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A payload changed in place (its hash left as it was): its hash no longer matches
    its bytes, a warning naming the seq; verify=True refuses."""
    ledger = await filled_memory()
    record = ledger.records[1]
    record.payload = record.payload.replace(b'"c1"', b'"cX"')
    await Executor.open(registry(), ledger=ledger)
    [warning] = warnings_of(caplog)
    assert "seq 2 does not match its hash (altered)" in warning
    with pytest.raises(LedgerError, match="seq 2"):
        await Executor.open(registry(), ledger=ledger, verify=True)


async def test_a_keyed_chain_is_not_judged_without_its_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """HMAC hashes never match as plain SHA-256: no false alarm for an intact keyed
    ledger (the store's verify() checks it with the key)."""
    ledger = MemoryLedger(key=b"secret")
    await ledger.append_many([CallStarted(run_id="r", call_id=f"c{i}", tool="t") for i in range(3)])
    await Executor.open(registry(), ledger=ledger, verify=True)
    assert warnings_of(caplog) == []


async def test_a_relinked_record_warns(caplog: pytest.LogCaptureFixture) -> None:
    """A record replaced and given a hash of its own breaks the next link: a warning."""
    ledger = await filled_memory()
    ledger.records[1].hash = "0" * 64
    await Executor.open(registry(), ledger=ledger)
    [warning] = warnings_of(caplog)
    assert "seq 3 does not link" in warning


async def test_a_malformed_record_warns(caplog: pytest.LogCaptureFixture) -> None:
    """A record that does not fit its type is read flagged; the executor opens and warns,
    and verify=True refuses."""
    ledger = await filled_memory()
    record = ledger.records[0]
    record.payload = record.payload.replace(b'"tool":"t"', b'"tool":null')
    await Executor.open(registry(), ledger=ledger)
    [warning] = warnings_of(caplog)
    assert "1 malformed record(s), first seq 1" in warning
    with pytest.raises(LedgerError, match="malformed"):
        await Executor.open(registry(), ledger=ledger, verify=True)


async def test_a_sqlite_ledger_with_a_deleted_middle_row(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same on a file: a row deleted by hand warns; verify=True refuses and leaves
    the ledger closed (its threads stopped)."""
    path = tmp_path / "l.db"
    await filled_file(path)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM events WHERE seq = 3")
    conn.close()
    executor = await Executor.open(registry(), ledger=SQLiteLedger(path))
    await executor.close()
    assert any("seq 3 is missing" in w for w in warnings_of(caplog))
    ledger = SQLiteLedger(path)
    with pytest.raises(LedgerError, match="not intact"):
        await Executor.open(registry(), ledger=ledger, verify=True)
    with pytest.raises(LedgerError, match="closed"):
        await ledger.append(CallStarted(run_id="r", call_id="c9", tool="t"))
