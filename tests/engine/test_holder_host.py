"""A claim's holder on "this host" is one the reader's pids can speak for.

A dead holder is told at once, without waiting out its lease, only on its own host: no
such pid, or another process's. A hostname is not a host: containers with the host's
network (or pods with ``hostNetwork``) share one while each has its own pid namespace,
where the holder's pid means nothing. Replica A here records the host of a process in
another pid namespace (a real one: ``unshare``) and a pid that is not running in ours;
replica B, in this process, must see A's claim as in flight while its lease runs, never
as abandoned: "its process is gone ... resolve it" would invite running the refund
twice while A's body runs. Before, a claim recorded the bare hostname, B's matched, and
B called A's live claim ambiguous.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from agent_adapter import Executor, Registry
from agent_adapter.engine import host_identity
from agent_adapter.engine._state import EffectState
from agent_adapter.errors import EffectInFlight
from agent_adapter.ledger import AMBIGUOUS, IN_FLIGHT, SQLiteLedger

_PRINT_IDENTITY = "from agent_adapter.engine import host_identity; print(host_identity())"


def _identity_in_a_new_pid_namespace() -> str:
    """``host_identity()`` as a process in a pid namespace of its own reports it."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) here: cannot start a process in another pid namespace")
    tried = []
    for flags in (["--pid", "--fork"], ["--user", "--map-root-user", "--pid", "--fork"]):
        done = subprocess.run(
            [unshare, *flags, sys.executable, "-c", _PRINT_IDENTITY],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode == 0:
            return done.stdout.strip()
        tried.append(done.stderr.strip())
    pytest.skip(f"cannot start a process in another pid namespace here: {tried}")


def _dead_pid() -> int:
    """A pid whose process has ended (and been reaped) in this namespace."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def test_the_identity_tells_pid_namespaces_of_one_hostname_apart() -> None:
    other = _identity_in_a_new_pid_namespace()
    ours = host_identity()
    assert ours.startswith(socket.gethostname() + " [boot ")
    assert other.startswith(socket.gethostname() + " [boot ")  # the same name...
    assert other != ours  # ...another host, as far as its pids go


def test_a_bare_hostname_of_an_older_claim_is_left_to_its_lease() -> None:
    """A claim an older version wrote names the bare hostname: its pid is not taken for
    one of ours, whatever it is; its live lease says in flight."""
    claim = EffectState(
        status="claimed",
        run_id="r",
        call_id="c",
        digest="d",
        holder="old",
        pid=_dead_pid(),
        host=socket.gethostname(),
        lease_until=time.time() + 60,
    )
    assert claim.status_at(time.time(), 1.0, host_identity()) == IN_FLIGHT
    # The same claim under this host's identity: its process is gone, at once.
    mine = msgspec.structs.replace(claim, host=host_identity())
    assert mine.status_at(time.time(), 1.0, host_identity()) == AMBIGUOUS


async def test_a_live_claim_from_another_pid_namespace_is_in_flight(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    other_host = _identity_in_a_new_pid_namespace()
    ran: list[str] = []
    running, gate = asyncio.Event(), asyncio.Event()
    registry = Registry()

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> str:
        ran.append(order_id)
        running.set()
        await gate.wait()
        return f"refunded {order_id}"

    a = await Executor.open(registry, ledger=SQLiteLedger(db))
    # A's claims as a replica in another pid namespace writes them: its host, and a pid
    # that is not running here.
    a._pipe.host, a._pipe.pid, a._pipe.pid_start = other_host, _dead_pid(), 0
    a_call = asyncio.create_task(a.call("refund", {"order_id": "o1"}, run_id="ra", call_id="ca"))
    await asyncio.wait_for(running.wait(), 60)  # A's claim and call.started are durable
    try:
        async with await Executor.open(registry, ledger=SQLiteLedger(db)) as b:
            await b.ledger.catch_up()  # type: ignore[attr-defined]
            assert b.state.effects["refund:o1"].host == other_host
            with pytest.raises(EffectInFlight) as refused:
                await b.call("refund", {"order_id": "o1"}, run_id="rb", call_id="cb")
            assert "no longer running" not in str(refused.value)
            assert "resolve" not in str(refused.value)
            assert b.effect_status("refund:o1") == IN_FLIGHT
    finally:
        gate.set()
        assert await a_call == "refunded o1"
        await a.close()
    assert ran == ["o1"]
