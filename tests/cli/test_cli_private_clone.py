"""The other-user tests of test_cli.py from a checkout only its owner can enter (issue 17).

A clone in a mode-700 directory (``mktemp -d``, or under ``/root``) has its virtual
environment and its sources where user nobody cannot reach them; the tests that run
``agent-adapter`` as nobody must still run there (or skip, saying why), never fail
because the command could not start. Recreating that costs a copy of the checkout and
an empty virtual environment inside the private directory whose only packages are this
environment's, by path, behind the clone's own sources: the tests then run with the
interpreter path (``sys.executable``), the sources and the packages of a clone in a
private directory, which is all issue 17 was about, without installing anything (what
``make test`` in a fresh clone does besides).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The tests of test_cli.py that run agent-adapter as another user (nobody, under root).
OTHER_USER_TESTS = (
    "test_reading_commands_work_on_a_read_only_file_in_a_read_only_directory",
    "test_a_user_without_write_access_cannot_decide",
    "test_read_only_directory_reads_what_a_crashed_writer_left_in_its_wal",
    "test_read_only_directory_refuses_a_wal_it_cannot_read",
)
#: How the other-user fixture's skip reason begins (see _other_user.other_user).
SKIP_REASON = "user nobody cannot run agent-adapter from a copy in "
TIMEOUT_S = 300.0


def checkout_files() -> list[str]:
    """The files a clone of this checkout holds, as they are on disk (uncommitted edits
    included: they are what is under test); skips outside a git work tree."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: cannot list the checkout's files")
    listed = subprocess.run(
        [git, "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    if listed.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout: {listed.stderr.decode().strip()}")
    return [os.fsdecode(name) for name in listed.stdout.split(b"\0") if name]


def copy_checkout(clone: Path) -> None:
    """This checkout's files copied to ``clone`` (those deleted on disk left out)."""
    for name in checkout_files():
        source = ROOT / name
        if source.is_file():
            target = clone / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def make_venv(clone: Path) -> Path:
    """``clone/.venv`` with no packages of its own: a .pth puts the clone first, then
    this environment's site-packages, on its path. Returns its interpreter."""
    venv = clone / ".venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    ).stdout.strip()
    # Plain path lines: the .pth files in this environment's site-packages (its editable
    # install of this checkout among them) are not run, so agent_adapter is the clone's.
    here = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(purelib) / "checkout.pth").write_text("\n".join([str(clone), *here]) + "\n")
    return python


def test_other_user_tests_pass_in_a_clone_in_a_private_directory() -> None:
    """In a clone under a mode-700 directory, with its own interpreter path and sources,
    every other-user test of test_cli.py passes, or skips saying why nobody cannot run the
    command; none fails, none errors, none is missing."""
    private = Path(tempfile.mkdtemp(prefix="agent-adapter-private-"))
    try:
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        clone = private / "clone"
        copy_checkout(clone)
        python = make_venv(clone)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        imported = subprocess.run(
            [str(python), "-c", "import agent_adapter; print(agent_adapter.__file__)"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
            cwd=clone,
        )
        assert (imported.returncode, imported.stdout, imported.stderr) == (
            0,
            f"{clone / 'agent_adapter' / '__init__.py'}\n",
            "",
        )
        report = private / "report.xml"
        done = subprocess.run(
            [
                str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                f"--basetemp={private / 'tmp'}", f"--junitxml={report}",
                "-k", " or ".join(OTHER_USER_TESTS), "tests/cli/test_cli.py",
            ],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=env,
            cwd=clone,
        )  # fmt: skip
        outcomes = {}
        for case in ET.parse(report).iter("testcase"):
            children = list(case)
            kinds = {child.tag for child in children} - {"system-out", "system-err"}
            if kinds == {"skipped"}:
                message = next(c for c in children if c.tag == "skipped").get("message", "")
                outcomes[case.get("name")] = "skipped" if SKIP_REASON in message else message
            else:
                outcomes[case.get("name")] = ",".join(sorted(kinds)) or "passed"
    finally:
        shutil.rmtree(private)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert {name.partition("[")[0] for name in outcomes} == set(OTHER_USER_TESTS)
    assert set(outcomes.values()) in ({"passed"}, {"skipped"}), outcomes
