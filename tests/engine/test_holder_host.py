"""A claim's holder on "this host" is one the reader's pids can speak for.

A dead holder is told at once, without waiting out its lease, only on its own host: no
such pid, or another process's. A hostname is not a host: containers with the host's
network (or pods with ``hostNetwork``) share one while each has its own pid namespace,
where the holder's pid means nothing. Claims record ``host_identity()`` (the hostname,
the boot id and the pid namespace), and a claim of another identity is left to its
lease: never "its process is gone ... resolve it", which would invite running the
refund twice while the holder's body runs. Before, a claim recorded the bare hostname,
and a reader of the same name called another namespace's live claim ambiguous.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from _helpers import GatedRefund

from agent_adapter import Executor
from agent_adapter.engine import host_identity
from agent_adapter.engine._state import EffectState
from agent_adapter.errors import EffectInFlight
from agent_adapter.ledger import AMBIGUOUS, IN_FLIGHT, SQLiteLedger

_PRINT_IDENTITY = "from agent_adapter.engine import host_identity; print(host_identity())"
#: Another pid namespace's identity on a host of our name (what its replica records).
_OTHER = f"{socket.gethostname()} [boot 00000000, pid ns 1]"
_WRONG_START = 1  # our own pid with another start time: "gone" to a reader of our host


def _in_a_new_pid_namespace(*flags: str) -> str:
    """``host_identity()`` as a process in a new pid namespace reports it (``flags``:
    more of unshare's); skipped where this machine cannot make one."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1) here: cannot start a process in another pid namespace")
    for user in ([], ["--user", "--map-root-user"]):  # root, or an unprivileged user's
        command = [unshare, *user, "--pid", "--fork", *flags]
        if subprocess.run([*command, "true"], capture_output=True, check=False).returncode:
            continue
        done = subprocess.run(
            [*command, sys.executable, "-c", _PRINT_IDENTITY],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr  # Python itself must not fail in there
        return done.stdout.strip()
    pytest.skip("this machine refuses new pid namespaces (unshare --pid, also --user)")


def test_another_pid_namespace_of_one_hostname_is_another_host() -> None:
    ours = host_identity()
    assert ours.startswith(socket.gethostname() + " [boot ")
    assert ours.endswith(f", pid ns {os.stat('/proc/self/ns/pid').st_ino}]")
    other = _in_a_new_pid_namespace("--mount-proc")
    assert other.startswith(socket.gethostname() + " [boot ")  # the same name and boot...
    assert other.split(",")[0] == ours.split(",")[0]
    assert other != ours  # ...another host, as far as its pids go


def test_a_proc_of_another_pid_namespace_makes_an_identity_of_its_own() -> None:
    """Without ``--mount-proc`` the child's /proc lists the parent's pids: they cannot be
    told for its own, so its identity matches no other process's."""
    other = _in_a_new_pid_namespace()
    assert other.startswith(socket.gethostname() + " [process "), other
    assert other != host_identity()


def test_a_forked_child_computes_its_own_identity() -> None:
    """The identity is cached per process; a child forked after it (perhaps into another
    pid namespace: unshare, then fork) starts without it."""
    assert host_identity()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: say whether it still holds the parent's, and leave
        os.write(write, str(host_identity.cache_info().currsize).encode())
        os._exit(0)
    os.close(write)
    try:
        said = os.read(read, 16)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert said == b"0"
    assert host_identity.cache_info().currsize == 1  # the parent keeps its own


def test_a_claim_of_another_host_is_left_to_its_lease() -> None:
    """Our own pid with another start time is "gone" to a reader on the claim's host; a
    claim that names another host (another namespace's, or an older version's bare
    hostname) is in flight while its lease runs, whatever its pid looks like here."""
    mine = EffectState(
        status="claimed",
        run_id="r",
        call_id="c",
        digest="d",
        holder="h",
        pid=os.getpid(),
        pid_start=_WRONG_START,
        host=host_identity(),
        lease_until=time.time() + 60,
    )
    now = time.time()
    assert mine.status_at(now, 1.0, host_identity()) == AMBIGUOUS  # the fast path holds
    for host in (_OTHER, socket.gethostname()):
        other = msgspec.structs.replace(mine, host=host)
        assert other.status_at(now, 1.0, host_identity()) == IN_FLIGHT, host


async def test_a_live_claim_from_another_pid_namespace_is_refused_as_in_flight(
    tmp_path: Path,
) -> None:
    db = tmp_path / "shared.db"
    tool = GatedRefund()
    a = await Executor.open(tool.registry, ledger=SQLiteLedger(db))
    # A's claims as a replica in another pid namespace on a host of our name writes
    # them: its identity, and a pid that here is another process (ours, started later).
    a._pipe.host, a._pipe.pid_start = _OTHER, _WRONG_START
    a_call = asyncio.create_task(a.call("refund", {"order_id": "o1"}, run_id="ra", call_id="ca"))
    await asyncio.wait_for(tool.running.wait(), 60)  # A's claim and call.started are durable
    try:
        async with await Executor.open(tool.registry, ledger=SQLiteLedger(db)) as b:
            with pytest.raises(EffectInFlight) as refused:
                await b.call("refund", {"order_id": "o1"}, run_id="rb", call_id="cb")
            assert b.state.effects["refund:o1"].host == _OTHER
            assert "no longer running" not in str(refused.value)
            assert "resolve" not in str(refused.value)
            assert b.effect_status("refund:o1") == IN_FLIGHT
    finally:
        tool.gate.set()
        assert await a_call == "refunded o1"
        await a.close()
    assert tool.ran == ["o1"]
