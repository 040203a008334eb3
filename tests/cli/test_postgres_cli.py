"""The ``agent-adapter`` command against a Postgres ledger: ``--db postgresql://...``.

Each command runs in a fresh process, as an operator runs it, on a schema that replicas
(here: this test) wrote: show, tail (following by LISTEN), verify, audit, export,
approvals, effects; and the one-line errors of a wrong schema or option.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from agent_adapter import CallbackApproval, Decision, DeferredApproval, Executor, Registry
from agent_adapter.errors import ApprovalPending, ToolTimeout
from agent_adapter.ledger import PostgresLedger, parse_export_line, replay

TIMEOUT_S = 60.0


def _registry() -> Registry:
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
        """Ship an order (never finishes in time: its key is left ambiguous)."""
        await asyncio.Event().wait()
        return "shipped"

    return reg


async def _build(dsn: str, schema: str) -> str:
    """Three calls, an ambiguous effect and an open deferred request; its request id."""
    approve = CallbackApproval(lambda r: Decision(approved=True, reviewer="alice", reason="ok"))
    ledger = PostgresLedger(dsn, schema=schema)
    async with await Executor.open(_registry(), ledger=ledger, approval=approve) as ex:
        await ex.call("lookup", {"order_id": "A1"}, run_id="r1", call_id="c1")
        await ex.call("refund", {"order_id": "A1", "amount_cents": 500}, run_id="r1", call_id="c2")
        with pytest.raises(ToolTimeout):
            await ex.call("ship", {"order_id": "A1"}, run_id="r1", call_id="c3")
    ledger = PostgresLedger(dsn, schema=schema)
    deferred = DeferredApproval(ledger)
    async with await Executor.open(_registry(), ledger=ledger, approval=deferred) as ex:
        with pytest.raises(ApprovalPending) as pending:
            await ex.call(
                "refund", {"order_id": "B2", "amount_cents": 700}, run_id="r2", call_id="c4"
            )
    return pending.value.request_id


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``agent-adapter ARGV`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "NO_COLOR": "1"},
    )


async def _events(dsn: str, schema: str) -> list[Any]:
    async with PostgresLedger(dsn, schema=schema, readonly=True) as ledger:
        return [e async for e in ledger.read()]


async def test_every_ledger_command_reads_a_postgres_ledger(
    postgres_dsn: str, pg_schema: str
) -> None:
    """show, verify, audit and export on ``--db postgresql://...?schema=NAME`` (and with
    ``--schema NAME``): the same answers as the store gives."""
    await _build(postgres_dsn, pg_schema)
    events = await _events(postgres_dsn, pg_schema)
    db = f"{postgres_dsn}?schema={pg_schema}"

    shown = await asyncio.to_thread(cli, "ledger", "show", "--db", db, "--json")
    assert shown.returncode == 0, shown.stderr
    assert [event["seq"] for event in json.loads(shown.stdout)] == [e.seq for e in events]

    verified = await asyncio.to_thread(
        cli, "ledger", "verify", "--db", postgres_dsn, "--schema", pg_schema, "--json"
    )
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout) == {
        "ok": True,
        "checked": len(events),
        "first_bad_seq": None,
        "reason": "",
    }

    audited = await asyncio.to_thread(cli, "ledger", "audit", "--db", db, "--json")
    report = json.loads(audited.stdout)
    problems = replay(events).problems()
    assert audited.returncode == (1 if problems else 0), audited.stderr
    assert [c["call_id"] for c in report["calls"]] == ["c1", "c2", "c3", "c4"]

    exported = await asyncio.to_thread(cli, "ledger", "export", "--db", db)
    assert exported.returncode == 0, exported.stderr
    records = [parse_export_line(line.encode()) for line in exported.stdout.splitlines()]
    assert [(r.seq, r.hash) for r in records] == [(e.seq, e.hash) for e in events]


async def test_approvals_and_effects_commands_on_a_postgres_ledger(
    postgres_dsn: str, pg_schema: str
) -> None:
    """The open request is listed and approved from the command line; the ambiguous key
    is listed and resolved; both decisions land in the ledger the replicas share."""
    request_id = await _build(postgres_dsn, pg_schema)
    db = f"{postgres_dsn}?schema={pg_schema}"
    listed = await asyncio.to_thread(cli, "approvals", "list", "--db", db, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [request["request_id"] for request in json.loads(listed.stdout)] == [request_id]
    approved = await asyncio.to_thread(
        cli, "approvals", "approve", request_id, "--db", db, "--reviewer", "bob"
    )
    assert approved.returncode == 0, approved.stderr
    after = await asyncio.to_thread(cli, "approvals", "list", "--db", db, "--json")
    assert (after.returncode, after.stdout) == (0, "[]\n")

    effects = await asyncio.to_thread(cli, "effects", "list", "--db", db, "--json")
    assert effects.returncode == 0, effects.stderr
    [listed_key] = json.loads(effects.stdout)
    # The claim's holder: this process's executor (its id is random), and its lease.
    holder = {k: listed_key.pop(k) for k in ("holder", "pid", "host", "lease_until")}
    assert listed_key == {"key": "ship:A1", "status": "ambiguous", "run_id": "r1", "call_id": "c3"}
    assert (holder["pid"], len(holder["holder"]), holder["lease_until"] > 0) == (
        os.getpid(),
        12,
        True,
    )
    resolved = await asyncio.to_thread(
        cli,
        "effects",
        "resolve",
        "ship:A1",
        "--failed",
        "--db",
        db,
        "--reviewer",
        "bob",
        "--reason",
        "not sent",
    )
    assert resolved.returncode == 0, resolved.stderr
    events = await _events(postgres_dsn, pg_schema)
    assert [(e.type, getattr(e, "reviewer", None)) for e in events[-2:]] == [
        ("approval.answered", "bob"),
        ("effect.resolved", "bob"),
    ]


async def test_tail_follows_a_postgres_ledger_by_listen(postgres_dsn: str, pg_schema: str) -> None:
    """`ledger tail` with a 10-minute poll interval prints a new event as soon as it is
    committed: it is woken by NOTIFY, not by its poll."""
    await _build(postgres_dsn, pg_schema)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agent_adapter.cli",
        "ledger",
        "tail",
        "--db",
        f"{postgres_dsn}?schema={pg_schema}",
        "-n",
        "1",
        "--interval",
        "600",
        "--jsonl",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "NO_COLOR": "1"},
    )

    async def line() -> dict[str, Any]:
        assert proc.stdout is not None
        raw = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT_S)
        assert raw.endswith(b"\n"), raw
        found: dict[str, Any] = json.loads(raw)
        return found

    try:
        last = await line()
        async with PostgresLedger(postgres_dsn, schema=pg_schema) as ledger:
            # tail has printed, so it has read the ledger; its LISTEN may still be on its
            # way, and then the head it reads after LISTEN covers this append.
            from agent_adapter.ledger import CallRequested

            added = await ledger.append(CallRequested(run_id="r9", call_id="c9", tool="lookup"))
        followed = await line()
        assert (followed["seq"], followed["call_id"]) == (added.seq, "c9")
        assert added.seq == last["seq"] + 1
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), TIMEOUT_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def test_a_wrong_schema_or_option_is_one_line(postgres_dsn: str, pg_schema: str) -> None:
    """A schema with no ledger is reported (never created), as is --schema on a file or
    two different schemas; each a one-line error, exit 1."""
    missing = await asyncio.to_thread(
        cli, "ledger", "show", "--db", postgres_dsn, "--schema", pg_schema
    )
    assert missing.returncode == 1
    assert missing.stderr.count("\n") == 1
    assert "no ledger in this schema (a reading command never creates one)" in missing.stderr
    assert "aa-test-secret" not in missing.stderr  # the DSN is named without its password
    approve = await asyncio.to_thread(
        cli, "approvals", "approve", "x", "--db", postgres_dsn, "--schema", pg_schema
    )
    assert approve.returncode == 1 and "no ledger in this schema" in approve.stderr
    on_file = await asyncio.to_thread(cli, "ledger", "show", "--db", "x.db", "--schema", "s")
    assert on_file.returncode == 1
    assert "--schema is for a postgresql:// --db" in on_file.stderr
    both = await asyncio.to_thread(
        cli, "ledger", "show", "--db", f"{postgres_dsn}?schema=a", "--schema", "b"
    )
    assert both.returncode == 1 and "differ" in both.stderr
