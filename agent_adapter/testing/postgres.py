"""A throwaway PostgreSQL cluster: initdb, pg_ctl, a free port; for tests and for trying.

``python -m agent_adapter.testing.postgres`` starts one, prints its DSN (the first line of
its output) and runs until Ctrl-C or SIGTERM, then stops the server and removes its data::

    $ python -m agent_adapter.testing.postgres
    postgresql://aa:aa-test-secret@127.0.0.1:41234/postgres
    a throwaway PostgreSQL, data in /tmp/agent-adapter-pg-x1y2; Ctrl-C stops it and removes it

It needs PostgreSQL's server binaries installed (``initdb`` and ``pg_ctl``: the
``postgresql`` package of most systems), nothing else: no service, no configuration.

``Cluster.start()`` runs the system's ``initdb`` into a fresh temporary directory and
``pg_ctl start`` on a free loopback port, with the unix socket in that directory, so
that runs on one machine never share a server. As root it runs both as the ``postgres``
user (initdb refuses root). ``stop()`` runs ``pg_ctl stop -m immediate`` and removes the
directory. ``binaries()`` finds the binaries (``$PG_BIN``, ``pg_config --bindir``,
``/usr/lib/postgresql/*/bin``), or None (``$PG_BIN``, when set, is the
only one looked at).

pg_ctl leaves the server running on its own: a process killed with SIGKILL (a CI
timeout) never reaches ``stop()``. So each cluster has a watchdog: when the process that
started it ends, however it ends, the server is stopped and the directory removed.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from ._watchdog import Watchdog

__all__ = ["Cluster", "binaries", "main"]

_PREFIX = "agent-adapter-pg-"

#: The superuser initdb creates, and its password (asked over TCP, on loopback only).
SUPERUSER = "aa"
PASSWORD = "aa-test-secret"


def binaries() -> Path | None:
    """The directory holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    candidates: list[str] = []
    if os.environ.get("PG_BIN"):
        # An explicit choice: only that directory (so a run can also do without).
        candidates.append(os.environ["PG_BIN"])
        path = Path(candidates[0])
        return path if (path / "initdb").exists() and (path / "pg_ctl").exists() else None
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=30
            )
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    candidates.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
    for where in candidates:
        path = Path(where)
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Cluster:
    """One running throwaway cluster; ``dsn`` connects to its ``postgres`` database."""

    def __init__(self, bindir: Path, root: Path, port: int) -> None:
        self.bindir = bindir
        self.root = root
        self.port = port
        self.data = root / "data"
        self.log = root / "server.log"
        self._watchdog: Watchdog | None = None

    @property
    def dsn(self) -> str:
        """The loopback DSN of the cluster's ``postgres`` database."""
        return f"postgresql://{SUPERUSER}:{PASSWORD}@127.0.0.1:{self.port}/postgres"

    def _command(self, *args: str) -> list[str]:
        command = [str(a) for a in args]
        if os.geteuid() == 0:
            # initdb refuses to run as root; the server must not run as root either.
            command = ["runuser", "-u", "postgres", "--", *command]
        return command

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._command(*args), capture_output=True, text=True, timeout=timeout)

    def _watch(self) -> Watchdog:
        """A watchdog that stops the server (if one runs) and removes the directory once
        this process is gone."""
        stop = self._command(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"
        )
        return Watchdog(
            command=stop, needs=self.data / "postmaster.pid", remove=self.root, prefix=_PREFIX
        )

    @classmethod
    def start(cls, bindir: Path, *, extra: tuple[str, ...] = ()) -> Cluster:
        """initdb and start a cluster on a free loopback port; RuntimeError if it fails."""
        root = Path(tempfile.mkdtemp(prefix=_PREFIX))
        user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        if user is not None:
            os.chown(root, user.pw_uid, user.pw_gid)
        root.chmod(0o700)
        # Watched from before initdb: a kill while the server starts leaves nothing either.
        watchdog = cls(bindir, root, 0)._watch()
        try:
            return cls._start(bindir, root, watchdog, extra)
        except BaseException:
            # The watchdog first: pg_ctl may have given up on a server that goes on
            # starting, and only the watchdog stops it (it needs the directory for that).
            watchdog.close()
            shutil.rmtree(root, ignore_errors=True)
            raise

    @classmethod
    def _start(
        cls, bindir: Path, root: Path, watchdog: Watchdog, extra: tuple[str, ...]
    ) -> Cluster:
        user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        last = ""
        for _ in range(5):  # a port taken between the probe and the bind: another one
            cluster = cls(bindir, root, _free_port())
            if not cluster.data.exists():
                pwfile = root / "pwfile"
                pwfile.write_text(PASSWORD + "\n")
                if user is not None:
                    os.chown(pwfile, user.pw_uid, user.pw_gid)
                done = cluster._run(
                    str(bindir / "initdb"),
                    "-D",
                    str(cluster.data),
                    "-U",
                    SUPERUSER,
                    f"--pwfile={pwfile}",
                    # Passwords over TCP (so a wrong one is refused), none on the socket.
                    "--auth-host=scram-sha-256",
                    "--auth-local=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                )
                if done.returncode != 0:
                    raise RuntimeError(f"initdb failed: {done.stderr.strip() or done.stdout}")
            options = " ".join(
                (
                    f"-p {cluster.port}",
                    f"-k {root}",
                    "-c listen_addresses=127.0.0.1",
                    "-c max_connections=300",
                    "-c shared_buffers=128MB",
                    *extra,
                )
            )
            done = cluster._run(
                str(bindir / "pg_ctl"),
                "-D",
                str(cluster.data),
                "-l",
                str(cluster.log),
                "-o",
                options,
                "-w",
                "-t",
                "120",
                "start",
            )
            if done.returncode == 0:
                cluster._watchdog = watchdog
                return cluster
            last = done.stderr.strip() or done.stdout.strip()
            if cluster.log.exists():
                last += " " + cluster.log.read_text()[-2000:]
        raise RuntimeError(f"pg_ctl start failed: {last}")

    def stop(self) -> None:
        """Stop the server at once and remove its directory (idempotent)."""
        if self.data.exists():
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.close()  # it finds nothing left to stop, and ends

    def restart(self) -> None:
        """Stop and start the server on the same port (a database that went away)."""
        self.stop_server()
        self.start_server()

    def stop_server(self) -> None:
        """Stop the server, keeping its data."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def start_server(self) -> None:
        """Start the stopped server again on its port."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        done = self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options + " -c max_connections=300",
            "-w",
            "-t",
            "120",
            "start",
        )
        if done.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log}")


_PROG = "python -m agent_adapter.testing.postgres"


def main(argv: Sequence[str] | None = None) -> int:
    """Start a throwaway cluster, print its DSN, wait for Ctrl-C or SIGTERM, then stop it
    and remove its data; the exit status (0, or 1 with one line on stderr)."""
    if list(argv if argv is not None else sys.argv[1:]):
        print(f"usage: {_PROG}  (no arguments)", file=sys.stderr)
        return 2
    bindir = binaries()
    if bindir is None:
        print(
            f"{_PROG}: error: PostgreSQL's server binaries (initdb, pg_ctl) are not "
            "installed: install the postgresql package, or set PG_BIN to their directory",
            file=sys.stderr,
        )
        return 1
    asked = threading.Event()

    def stop_asked(signum: int, frame: object) -> None:
        asked.set()

    # Set before the start: a ^C while initdb runs stops the cluster as soon as it is up.
    previous = {s: signal.signal(s, stop_asked) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            cluster = Cluster.start(bindir)
        except RuntimeError as exc:
            text = " ".join(str(exc).split())
            print(f"{_PROG}: error: {text}", file=sys.stderr)
            return 1
        try:
            print(cluster.dsn, flush=True)
            print(
                f"a throwaway PostgreSQL, data in {cluster.root}; Ctrl-C stops it and removes it",
                flush=True,
            )
            while not asked.wait(3600):
                pass
        finally:
            cluster.stop()
        print("stopped", flush=True)
        return 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
