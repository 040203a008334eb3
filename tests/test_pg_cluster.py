"""The throwaway cluster of the Postgres tests leaves no server behind, however its
starter ends: a test run killed with SIGKILL (a CI timeout) never reaches ``stop()``,
and pg_ctl's server outlives it unless the cluster's watchdog stops it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from _pg_fixtures import _unavailable
from _watchdog import running, start_time

from agent_adapter.testing.postgres import Cluster, binaries

# Far above the seconds a stop takes: only a watchdog that never acts reaches it.
DEADLINE_S = 120

STARTER = """
import time
from agent_adapter.testing.postgres import Cluster, binaries
cluster = Cluster.start(binaries())
pid = (cluster.data / "postmaster.pid").read_text().split()[0]
print(cluster.root, pid, flush=True)
time.sleep(3600)
"""


def gone(root: Path, pid: int, started: str | None) -> bool:
    """Wait (up to DEADLINE_S) until ``root`` is removed and the process ``pid`` that
    started at ``started`` has ended (a pid used again by another process is not it)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if not root.exists() and (not running(pid) or start_time(pid) != started):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def bindir() -> Path:
    found = binaries()
    if found is None:
        _unavailable("no initdb/pg_ctl found (set PG_BIN, or install PostgreSQL)")
    assert found is not None
    return found


def test_a_cluster_whose_starter_is_killed_is_stopped_and_removed(bindir: Path) -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert starter.stdout is not None
        line = starter.stdout.readline()
        assert line, "the starter printed nothing (its cluster did not start)"
        root_text, pid_text = line.split()
        root, pid = Path(root_text), int(pid_text)
        started = start_time(pid)
        assert root.exists() and running(pid)
    finally:
        # The starter alone, as a CI timeout kills a run (pg_ctl's server is in a
        # session of its own anyway).
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        if starter.stdout is not None:
            starter.stdout.close()
    stopped = gone(root, pid, started)
    if not stopped:  # what a failing run would leave behind
        Cluster(bindir, root, 0).stop()
    assert stopped, f"the server {pid} in {root} outlived its starter"


def test_stop_stops_the_server_and_its_watchdog(bindir: Path) -> None:
    cluster = Cluster.start(bindir)
    pid = int((cluster.data / "postmaster.pid").read_text().split()[0])
    assert cluster._watchdog is not None
    watchdog = cluster._watchdog.pid
    assert watchdog is not None and running(watchdog)
    cluster.stop()
    assert not cluster.root.exists() and not running(pid)
    assert cluster._watchdog is None and not running(watchdog)


def test_a_start_that_fails_after_the_server_came_up_stops_it(
    bindir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pg_ctl may give up (its wait timed out) on a server that goes on starting: the
    failed start stops that server too and removes the directory."""
    made: list[Path] = []
    mkdtemp = tempfile.mkdtemp

    def recorded(**kwargs: str) -> str:
        made.append(Path(mkdtemp(**kwargs)))
        return str(made[-1])

    run = Cluster._run

    def gives_up(self: Cluster, *args: str, timeout: float = 120) -> object:
        done = run(self, *args, timeout=timeout)
        if args[-1] == "start":
            done.returncode = 1  # as if its wait had timed out
        return done

    monkeypatch.setattr(tempfile, "mkdtemp", recorded)
    monkeypatch.setattr(Cluster, "_run", gives_up)
    with pytest.raises(RuntimeError, match="pg_ctl start failed"):
        Cluster.start(bindir)
    [root] = made
    left = servers_of(root)
    for pid in left:  # what a failing run would leave behind
        os.kill(pid, signal.SIGKILL)
    assert left == [] and not root.exists()


def servers_of(root: Path) -> list[int]:
    """The live processes whose command line names ``root`` (a server of that cluster)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and running(int(entry.name)):
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if f"{root}/data".encode() in command:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_command_prints_a_dsn_that_connects_and_a_signal_removes_the_cluster(
    bindir: Path, stop: signal.Signals
) -> None:
    """`python -m agent_adapter.testing.postgres`: the first line is a DSN a PostgresLedger
    opens and writes to, the second names the data directory; Ctrl-C (SIGINT) or SIGTERM
    stops the server and removes the directory, and the command exits 0 saying so."""
    pytest.importorskip("asyncpg")
    from agent_adapter.ledger import CallRequested, PostgresLedger

    command = subprocess.Popen(
        [sys.executable, "-m", "agent_adapter.testing.postgres"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PG_BIN": str(bindir)},
    )
    try:
        assert command.stdout is not None
        dsn = command.stdout.readline().strip()
        about = command.stdout.readline().strip()
        assert dsn.startswith("postgresql://") and "@127.0.0.1:" in dsn, (dsn, about)
        root = Path(about.split("data in ", 1)[1].split(";", 1)[0])
        assert root.name.startswith("agent-adapter-pg-") and root.is_dir()
        pid = int((root / "data" / "postmaster.pid").read_text().split()[0])
        started = start_time(pid)

        async def write_and_verify() -> tuple[int, bool]:
            async with PostgresLedger(dsn + "?schema=tried") as ledger:
                await ledger.append(CallRequested(run_id="r1", call_id="c1", tool="t", args={}))
                return (await ledger.verify()).checked, True

        assert asyncio.run(write_and_verify()) == (1, True)
    finally:
        command.send_signal(stop)
        out, err = command.communicate(timeout=DEADLINE_S)
    assert (command.returncode, out, err) == (0, "stopped\n", "")
    assert not root.exists() and (not running(pid) or start_time(pid) != started)


def test_the_command_without_postgresql_says_what_to_install() -> None:
    """No initdb/pg_ctl where PG_BIN points: one line naming what is missing, exit 1."""
    done = subprocess.run(
        [sys.executable, "-m", "agent_adapter.testing.postgres"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        env={**os.environ, "PG_BIN": "/nonexistent"},
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "python -m agent_adapter.testing.postgres: error: PostgreSQL's server binaries "
        "(initdb, pg_ctl) are not installed: install the postgresql package, or set PG_BIN "
        "to their directory\n"
    )
