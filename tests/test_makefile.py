"""What ``make demo`` and ``make test`` would run (``make -n``: nothing is installed): the demo
installs only its own extras, the tests every extra, neither through setuptools' transitional
compat editable mode; and the packages are mapped so an editable install is a plain .pth."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ALL = {
    "dev",
    "openai-agents",
    "otel",
    "web",
    "mcp",
    "postgres",
    "bench",
    "temporal",
    "langgraph",
    "pydantic-ai",
}


def planned(target: str, venv: Path, *settings: str) -> list[str]:
    """The commands ``make TARGET`` would run for a fresh ``venv`` (and ``settings``)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    done = subprocess.run(
        [make, "-n", "--no-print-directory", "-C", str(REPO), target, f"VENV={venv}", *settings],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def installed_extras(commands: list[str]) -> list[set[str]]:
    """The extras of each ``pip install -e '.[...]'`` among ``commands``."""
    found = []
    for line in commands:
        if " pip install " in line and " -e " in line:
            extras = line.split("'.[", 1)[1].split("]'", 1)[0]
            found.append(set(extras.split(",")))
    return found


def test_make_demo_installs_only_what_the_demo_needs(tmp_path: Path) -> None:
    """A fresh clone's ``make demo``: the SDK the demo runs on and the inbox it points to,
    none of the dev tools or other bridges; then the demo."""
    commands = planned("demo", tmp_path / "venv")
    assert installed_extras(commands) == [{"openai-agents", "web"}]
    assert commands[-1] == f"{tmp_path / 'venv'}/bin/agent-adapter demo"


def test_make_test_installs_every_extra(tmp_path: Path) -> None:
    """``make test`` installs every extra pyproject.toml declares (the tests need them all):
    the main environment all but Temporal's agent plugin, whose pin of the SDK needs an
    environment of its own (``.venv-agents``)."""
    agents = tmp_path / "agents"
    commands = planned("test", tmp_path / "venv", f"AGENTS_VENV={agents}")
    declared = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    assert installed_extras(commands) == [ALL, {"temporal-openai-agents"}]
    assert declared == ALL | {"temporal-openai-agents"}
    assert f"{tmp_path / 'venv'}/bin/python -m pytest -q" in commands


@pytest.mark.parametrize("target", ["demo", "test"])
def test_no_install_uses_the_compat_editable_mode(tmp_path: Path, target: str) -> None:
    """setuptools prints a 'compat editable mode is transitional' banner for it; the packages'
    explicit mapping to the checkout's root gives the same plain .pth entry without it."""
    commands = planned(target, tmp_path / "venv", f"AGENTS_VENV={tmp_path / 'agents'}")
    assert not [line for line in commands if "editable_mode" in line]
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"": "."}
