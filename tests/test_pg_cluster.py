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
from _watchdog import running, start_time

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
