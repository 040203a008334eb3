"""``agent-adapter`` run as another user: nobody, when the tests run as root.

Root may write any file, so only another user can show that reading a ledger needs no
write access. That user must reach an interpreter and the code under test, and a
checkout may live where only its owner can enter (a mode-700 temporary directory,
``/root``): then neither the checkout's virtual environment nor its sources are
reachable. So the other user runs from a copy of what the command needs, in a directory
every user can enter: the ``agent_adapter`` package this test process imported (the
sources under test, wherever they live) and the files of its dependencies, on
``PYTHONPATH`` of an interpreter started with ``-S`` (no site-packages, so nothing else
is imported in their place). The interpreter itself is not copied: this one, or another
Python of the same version the user can run; when there is none, the tests skip, saying
why. Nothing outside the copy changes permissions.
"""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import agent_adapter

__all__ = ["NOBODY", "OtherUser", "other_user", "read_only_ledger"]

#: Every wait on the child is bounded: a broken test fails instead of hanging.
TIMEOUT_S = 60.0
#: The user the commands run as when the tests run as root.
NOBODY = 65534
#: Imports every part of agent_adapter the commands use; prints the Python version and
#: where agent_adapter came from.
_PROBE = (
    "import sys, agent_adapter.cli, agent_adapter.engine, agent_adapter.ledger; "
    "print('%d.%d' % sys.version_info[:2]); print(agent_adapter.__file__)"
)
_VERSION = "{}.{}".format(*sys.version_info[:2])


class OtherUser:
    """Runs ``agent-adapter ARGV`` as the other user (see the module docstring)."""

    def __init__(
        self, prefix: list[str], env: dict[str, str], workdir: Path, drop: dict[str, Any]
    ) -> None:
        self._prefix = prefix
        self._env = env
        self._drop = drop
        #: A directory the other user can enter; fixtures put the ledgers it reads here.
        self.workdir = workdir

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """``agent-adapter ARGV`` in a fresh process as the other user, from ``/``."""
        done = subprocess.run(
            [*self._prefix, "-m", "agent_adapter.cli", *argv],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=self._env,
            cwd="/",
            **self._drop,
        )
        # setpriv reports a failed exec itself (status 126/127): the command did not run,
        # and no test may pass on what it printed instead.
        if done.stderr.startswith("setpriv:"):
            raise AssertionError(f"the command did not start as the other user: {done.stderr}")
        return done


def other_user() -> Iterator[OtherUser]:
    """An ``OtherUser`` for a session; skips (saying why) when none can run the command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(NO_COLOR="1", HOME="/nonexistent")
    if os.geteuid() != 0:
        # Not root: this user's own permissions already hold, and it reaches its venv.
        with tempfile.TemporaryDirectory(prefix="agent-adapter-user-") as workdir:
            yield OtherUser([sys.executable], {**env, **_pythonpath()}, Path(workdir), {})
        return
    top = Path(tempfile.mkdtemp(prefix="agent-adapter-nobody-"))
    try:
        site = top / "site"
        _copy_environment(site)
        workdir = top / "work"
        workdir.mkdir()
        _open_to_everyone(top)
        env.update(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
        tried = []
        setpriv, drop = _as_nobody()
        for python in _interpreters():
            prefix = [*setpriv, python, "-S"]
            problem = _probe(prefix, env, drop, site)
            if problem is None:
                yield OtherUser(prefix, env, workdir, drop)
                return
            tried.append(f"{python}: {problem}")
        pytest.skip(
            f"user nobody cannot run agent-adapter from a copy in {top} (a Python {_VERSION} "
            f"it can execute is needed; tried {'; '.join(tried) or 'none found'})"
        )
    finally:
        shutil.rmtree(top)


def _pythonpath() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {} if path is None else {"PYTHONPATH": path}


def _as_nobody() -> tuple[list[str], dict[str, Any]]:
    """A command prefix, or subprocess arguments, that run a command as user nobody."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return [], {"user": NOBODY, "group": NOBODY, "extra_groups": []}
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"], {}


def _interpreters() -> list[str]:
    """This interpreter (behind the venv's symlinks), then system ones of its version."""
    found = [os.path.realpath(sys.executable)]
    base = getattr(sys, "_base_executable", None)
    if base:
        found.append(os.path.realpath(base))
    for name in (f"python{_VERSION}", "python3"):
        system = shutil.which(name, path="/usr/local/bin:/usr/bin:/bin")
        if system is not None:
            found.append(os.path.realpath(system))
    return list(dict.fromkeys(found))


def _probe(prefix: list[str], env: dict[str, str], drop: dict[str, Any], site: Path) -> str | None:
    """Why ``prefix`` cannot run the copy in ``site`` as nobody (one line), or None."""
    try:
        done = subprocess.run(
            [*prefix, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
            cwd="/",
            **drop,
        )
    except OSError as exc:
        return str(exc)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return lines[-1]
    version, _, imported = done.stdout.strip().partition("\n")
    if version != _VERSION:
        return f"it is Python {version}, the compiled dependencies need {_VERSION}"
    if not Path(imported).is_relative_to(site):
        # Not the sources under test: the output of any command would prove nothing.
        return f"it imports agent_adapter from {imported}, not from the copy"
    return None


def _copy_environment(site: Path) -> None:
    """The imported ``agent_adapter`` package and its dependencies' files under ``site``,
    compiled: the other user cannot write bytecode there, and would compile every module
    again in each command."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(Path(agent_adapter.__file__).parent, site / "agent_adapter", ignore=ignore)
    for dist in _dependencies():
        root = Path(str(dist.locate_file("")))
        for file in dist.files or ():
            if ".." in file.parts or "__pycache__" in file.parts:
                continue  # scripts outside site-packages; bytecode is compiled below
            source = root / file
            if source.is_file():
                target = site / file
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    compileall.compile_dir(site, quiet=1, workers=1)


def _dependencies() -> list[Distribution]:
    """agent-adapter's requirements without extras, and theirs, transitively."""
    seen: dict[str, Distribution] = {}
    todo = list(distribution("agent-adapter").requires or ())
    while todo:
        requirement = Requirement(todo.pop())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        try:
            seen[name] = dist = distribution(requirement.name)
        except PackageNotFoundError:
            continue  # an optional dependency of a dependency, not installed here
        todo.extend(dist.requires or ())
    return list(seen.values())


def _open_to_everyone(top: Path) -> None:
    # Copies keep their source's mode, directories get this process's umask: both may
    # shut the other user out of what it must read.
    for directory, _, files in os.walk(top):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            os.chmod(path, os.stat(path).st_mode | 0o444)


def read_only_ledger(user: OtherUser, source: Path) -> Iterator[Path]:
    """``source`` copied to a chmod 0444 file in a chmod 0555 directory the other user
    can reach, with its -mark (a copy without it says so at open); removed afterwards."""
    top = Path(tempfile.mkdtemp(prefix="ro-", dir=user.workdir))
    top.chmod(0o755)
    directory = top / "ro"
    directory.mkdir()
    path = directory / "ledger.db"
    path.write_bytes(source.read_bytes())
    path.chmod(0o444)
    mark = Path(f"{source}-mark")
    if mark.exists():
        copied = Path(f"{path}-mark")
        copied.write_bytes(mark.read_bytes())
        copied.chmod(0o444)
    directory.chmod(0o555)
    try:
        yield path
    finally:
        directory.chmod(0o755)
        shutil.rmtree(top)
