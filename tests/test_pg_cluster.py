"""The throwaway cluster of the Postgres tests leaves no server behind, however its
starter ends: a test run killed with SIGKILL (a CI timeout) never reaches ``stop()``,
and pg_ctl's server outlives it unless the cluster's watchdog stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _pg_cluster import Cluster, binaries
from _pg_fixtures import _unavailable

TESTS = Path(__file__).resolve().parent
# Far above the seconds a stop takes: only a watchdog that never acts reaches it.
DEADLINE_S = 120

STARTER = f"""
import sys, time
sys.path.insert(0, {str(TESTS)!r})
from _pg_cluster import Cluster, binaries
cluster = Cluster.start(binaries())
pid = (cluster.data / "postmaster.pid").read_text().split()[0]
print(cluster.root, pid, flush=True)
time.sleep(3600)
"""


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def gone(root: Path, pid: int) -> bool:
    """Wait (up to DEADLINE_S) until ``root`` is removed and ``pid`` has ended."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if not root.exists() and not running(pid):
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
        assert root.exists() and running(pid)
    finally:
        os.killpg(starter.pid, signal.SIGKILL)
        starter.wait()
        if starter.stdout is not None:
            starter.stdout.close()
    assert gone(root, pid), f"the server {pid} in {root} outlived its starter"


def test_stop_stops_the_server_and_its_watchdog(bindir: Path) -> None:
    cluster = Cluster.start(bindir)
    pid = int((cluster.data / "postmaster.pid").read_text().split()[0])
    watchdog = cluster._watchdog
    assert watchdog is not None and watchdog.poll() is None
    cluster.stop()
    assert not cluster.root.exists() and not running(pid)
    assert watchdog.returncode == 0
