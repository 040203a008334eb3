"""The README's deferred-approval service runs as written: the service waits, a reviewer in
another process answers with the CLI, the service resumes and the refund runs once."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from _docs import example

from agent_adapter.ledger import SQLiteLedger, replay

#: Every wait on a child is bounded: a broken test fails instead of hanging.
TIMEOUT_S = 60.0


def block(language: str, tag: str) -> str:
    """The README's one ``language`` block that starts with ``# example: tag``."""
    return example(tag, language)


def environment() -> dict[str, str]:
    """This interpreter's scripts (``agent-adapter``) first on PATH; output unbuffered."""
    bin_dir = os.path.dirname(sys.executable)
    return {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONUNBUFFERED": "1",
        "NO_COLOR": "1",
    }


async def serve_and_review(tmp_path: Path, reviewer_script: str) -> tuple[str, str]:
    """Run the service, then ``reviewer_script`` (bash, ``$REQUEST_ID`` set to the id the
    service printed) in its own process; (the reviewer's last two lines, the service's rest)."""
    env = environment()
    service = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        block("python", "deferred-service"),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert service.stdout is not None and service.stderr is not None
        first = (await asyncio.wait_for(service.stdout.readline(), TIMEOUT_S)).decode()
        match = re.fullmatch(
            r"waiting: agent-adapter approvals approve ([0-9a-f]{32}) --db refunds.db\n", first
        )
        assert match is not None, first
        request_id = match.group(1)

        reviewer = await asyncio.create_subprocess_exec(
            "bash",
            "-euc",
            reviewer_script,
            cwd=tmp_path,
            env={**env, "REQUEST_ID": request_id},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        said, complaints = await asyncio.wait_for(reviewer.communicate(), TIMEOUT_S)
        assert (reviewer.returncode, complaints.decode()) == (0, "")
        listed, decided = said.decode().splitlines()[-2:]
        assert listed.startswith(request_id) and "ticket-4711  call_1  refund" in listed

        rest, errors = await asyncio.wait_for(service.communicate(), TIMEOUT_S)
        assert (service.returncode, errors.decode()) == (0, "")
        return decided.replace(request_id, "REQUEST_ID"), rest.decode()
    finally:
        if service.returncode is None:
            service.kill()
            await service.wait()


async def test_the_deferred_service_waits_for_the_cli_reviewer_and_resumes(
    tmp_path: Path,
) -> None:
    """The service prints the reviewer's command and waits; the reviewer block (run by bash in
    its own process) lists and approves the request; the service resumes, the refund runs once
    under alice's approval and the audit finds no problem."""
    approved, rest = await serve_and_review(tmp_path, block("bash", "reviewer"))
    assert approved == "approved request REQUEST_ID (refund, run ticket-4711) as alice"
    assert rest == "Refunded order A1.\n"

    async with SQLiteLedger(tmp_path / "refunds.db", readonly=True) as ledger:
        events = [event async for event in ledger.read()]
        verification = await ledger.verify()
    assert [(e.type, e.call_id) for e in events] == [
        ("approval.pending", "call_1"),
        ("approval.answered", "call_1"),
        ("approval.consumed", "call_1"),
        ("call.requested", "call_1"),
        ("call.validated", "call_1"),
        ("approval.requested", "call_1"),
        ("approval.granted", "call_1"),
        ("effect.claimed", "call_1"),
        ("call.started", "call_1"),
        ("call.succeeded", "call_1"),
    ]
    audit = replay(events, verification)
    [record] = audit.calls.values()
    assert [(a.reviewer, a.source) for a in record.approvals] == [("alice", "context")]
    assert (record.run_id, record.tool, record.outcome) == (
        "ticket-4711",
        "refund",
        "call.succeeded",
    )
    assert audit.problems() == []


async def test_after_a_denial_the_service_says_the_order_was_not_refunded(tmp_path: Path) -> None:
    """The reviewer denies instead: the scripted model's answer reads the refusal the tool
    returned, so the service prints that A1 was not refunded and why (never a fixed success),
    and the ledger shows the denial and no body."""
    script = block("bash", "reviewer").replace(
        'approvals approve "$REQUEST_ID" --db refunds.db --reviewer alice --reason "order checked"',
        'approvals deny "$REQUEST_ID" --db refunds.db --reviewer alice --reason "already refunded"',
    )
    denied, rest = await serve_and_review(tmp_path, script)
    assert denied == "denied request REQUEST_ID (refund, run ticket-4711) as alice"
    assert rest == "Order A1 was not refunded: refund was not approved: already refunded.\n"
    async with SQLiteLedger(tmp_path / "refunds.db", readonly=True) as ledger:
        events = [event async for event in ledger.read()]
    assert [e.type for e in events][-2:] == ["approval.denied", "call.denied"]
    assert "call.started" not in [e.type for e in events]
