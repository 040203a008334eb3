"""The project's documentation pages, read by the tests that run what they show."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"


def pages() -> list[Path]:
    """README.md, every page under docs/ and the benchmarks' README (what a newcomer reads)."""
    return [README, *sorted(DOCS.rglob("*.md")), REPO / "benchmarks" / "README.md"]


def page(name: str) -> str:
    """The text of one page: ``"README.md"`` or a path under docs/ (``"bridges/mcp.md"``)."""
    return (README if name == "README.md" else DOCS / name).read_text()


def blocks(language: str = "python") -> list[tuple[Path, str]]:
    """Every fenced ``language`` block of every page, with the page it is on."""
    found = []
    for path in pages():
        for body in re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.S):
            found.append((path, body))
    return found


def example(tag: str, language: str = "python") -> str:
    """The one ``language`` block of all the pages that starts with ``# example: tag``."""
    found = [body for _, body in blocks(language) if body.startswith(f"# example: {tag}\n")]
    assert len(found) == 1, f"the docs have {len(found)} {language} examples tagged {tag!r}"
    return found[0]


def run_example(
    tag: str, *, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The Python example tagged ``tag``, run in a fresh interpreter (``python -c``), its
    output captured as text (``env``: the whole environment, default this one's)."""
    return subprocess.run(
        [sys.executable, "-c", example(tag)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
