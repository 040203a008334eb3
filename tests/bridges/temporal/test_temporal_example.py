"""examples/temporal runs: the demo end to end (worker, workflow, starter, reviewer) on
the session's dev server, and the reviewer's refusals as one-line errors."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from _docs import blocks as docs_blocks
from temporal_support import require

require()

from temporal_app import TIMEOUT_S  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="session")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "temporal"


async def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=EXAMPLE,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_demo_runs_end_to_end(temporal_env: Any, tmp_path: Path) -> None:
    """``demo.py`` (what ``make demo-temporal`` runs, here on the session's server):
    the refund is approved by Update, made once, and the ledger audits clean."""
    address = temporal_env.client.service_client.config.target_host
    code, out, err = await _run("demo.py", "--address", address, "--dir", str(tmp_path))
    steps = [line for line in out.splitlines() if line[:2] in {f"{n}." for n in range(1, 9)}]
    digest = "a2deed7ceedec0250486129a298797b25faa21034131af7152f45717f575300b"
    shown = [
        {
            "args": {"amount_cents": 500, "order_id": "A1"},
            "call_id": "refund-1",
            "digest": digest,
            "tool": "refund",
        }
    ]
    assert (code, "Traceback" in err) == (0, False), err
    assert [s.split(" ", 1)[0] for s in steps] == [f"{n}." for n in range(1, 9)]
    assert steps[3] == f"4. the reviewer sees the pending call: {json.dumps(shown, sort_keys=True)}"
    assert steps[4] == "5. approved refund-1 as alice (an Update, checked against the digest)"
    assert steps[5] == (
        '6. the workflow\'s result: {"order": {"amount_cents": 500, "order_id": "A1"}, '
        '"refund": "refunded 500 on A1"}'
    )
    assert steps[6] == "7. refunds made: ['refund A1 500']"
    assert (tmp_path / "refunds.log").read_text() == "refund A1 500\n"
    assert "problems: none" in out.splitlines()


async def test_the_reviewer_refuses_what_cannot_be_recorded(
    temporal_env: Any, tmp_path: Path
) -> None:
    """An answer for a call that is not pending, or for a workflow that does not exist, is
    one line on stderr and exit 1 (no traceback, nothing recorded); a denial then ends
    the workflow with approval-denied and no refund."""
    address = temporal_env.client.service_client.config.target_host
    queue, workflow_id = f"q-{uuid.uuid4().hex[:8]}", f"wf-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "REFUNDS_FILE": str(tmp_path / "refunds.log")}
    common = ("--address", address)
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        "worker.py",
        *common,
        "--ledger",
        str(tmp_path / "ledger.db"),
        "--task-queue",
        queue,
        cwd=EXAMPLE,
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert worker.stdout is not None
        assert await asyncio.wait_for(worker.stdout.readline(), TIMEOUT_S) == b"worker ready\n"
        started = await _run("starter.py", workflow_id, *common, "--task-queue", queue, env=env)
        listed = await _run("reviewer.py", workflow_id, "list", "--wait", *common, env=env)
        wrong = await _run(
            "reviewer.py", workflow_id, "approve", "refund-9", "--reviewer", "eve", *common
        )
        missing = await _run(
            "reviewer.py", "no-such-workflow", "approve", "refund-1", "--reviewer", "eve", *common
        )
        denied = await _run(
            "reviewer.py", workflow_id, "deny", "refund-1", "--reviewer", "bob", *common
        )
        result = await temporal_env.client.get_workflow_handle(workflow_id).result()
    finally:
        worker.terminate()
        await asyncio.wait_for(worker.wait(), TIMEOUT_S)
    assert (started[0], started[1], listed[0], json.loads(listed[1])[0]["call_id"]) == (
        0,
        f"started {workflow_id}\n",
        0,
        "refund-1",
    )
    assert wrong == (
        1,
        "",
        "reviewer: not recorded: call 'refund-9' is not waiting for approval\n",
    ), wrong[2]
    assert (missing[0], missing[1], len(missing[2].splitlines()), "Traceback" in missing[2]) == (
        1,
        "",
        1,
        False,
    )
    assert missing[2].startswith("reviewer: cannot read no-such-workflow: ")
    assert (denied, result["refund"]["kind"], (tmp_path / "refunds.log").exists()) == (
        (0, "denied refund-1 as bob\n", ""),
        "approval-denied",
        False,
    )


@pytest.mark.parametrize("source", ["worker.py", "workflow.py"])
async def test_the_readme_blocks_are_the_examples_code(source: str) -> None:
    """The README's Temporal blocks are verbatim parts of the example the tests run."""
    blocks = [body for _, body in docs_blocks("python")]
    # (Marked as parts, not "# example:": those are whole programs that other tests run.)
    found = [b for b in blocks if b.startswith(f"# part of examples/temporal/{source}\n")]
    assert len(found) == 1
    body = found[0].split("\n", 1)[1]
    code = (EXAMPLE / source).read_text()
    # The worker's block is indented one level in main(): compared dedented.
    dedented = "\n".join(
        line[4:] if line.startswith("    ") else line for line in code.splitlines()
    )
    assert body in code or body in dedented + "\n"


async def test_a_command_that_cannot_reach_temporal_says_so_in_one_line() -> None:
    """No server at the address: one line on stderr and exit 1, no traceback."""
    with socket.socket() as probe:  # a port nothing listens on (bound, then released)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = await _run("reviewer.py", "wf", "list", "--address", f"127.0.0.1:{port}")
    assert (code, out, len(err.splitlines())) == (1, "", 1)
    assert err.startswith(f"reviewer: cannot reach Temporal at 127.0.0.1:{port}: ")
