"""The package is typed for its users: mypy --strict passes on it and on the README's examples,
checked from outside the checkout as a user's code is, and the check fails on a type error.

These run in `make test`. mypy keeps its cache in the checkout's .mypy_cache (ignored by
git): the first run analyses the standard library and the dependencies (tens of seconds),
later runs only what changed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _docs import blocks as docs_blocks

REPO = Path(__file__).resolve().parent.parent
# One cache per way of finding the package: as the checkout's source files, or installed
# (from another directory). Shared, each would make the other re-analyse everything.
PACKAGE_CACHE = REPO / ".mypy_cache"
USER_CACHE = REPO / ".mypy_cache" / "as-installed"
# Generous: a cold cache on a loaded machine takes minutes, and a slow run is not an error.
TIMEOUT_S = 1200

NOT_INSTALLED_HINT = (
    "agent_adapter is not visible to type checkers outside the checkout: reinstall it with "
    "`make .venv/.installed` (an editable install in compat mode, see the Makefile)"
)


def _mypy(*args: str, cwd: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """``mypy --strict`` as a user runs it; success prints nothing (no summary line)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--no-color-output",
            "--cache-dir",
            str(cache),
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def _readme_examples() -> dict[str, str]:
    """Every ``# example: TAG`` block of the README (the ones tests run), by tag."""
    blocks = [body for _, body in docs_blocks("python")]
    found = {}
    for block in blocks:
        first, _, _ = block.partition("\n")
        if first.startswith("# example: "):
            found[first.removeprefix("# example: ")] = block
    return found


def _check_as_user(tmp_path: Path, sources: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Type-check ``sources`` (module name -> code) in a directory outside the checkout, so
    that ``import agent_adapter`` resolves to the installed package, as for a user."""
    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # no config of the checkout or the user
    for module, code in sources.items():
        (tmp_path / f"{module}.py").write_text(code)
    return _mypy(
        "--config-file", "mypy.ini", *(f"{m}.py" for m in sources), cwd=tmp_path, cache=USER_CACHE
    )


def test_the_package_passes_mypy_strict() -> None:
    """`mypy --strict agent_adapter` reports nothing, with the project's mypy settings."""
    done = _mypy("agent_adapter", cwd=REPO, cache=PACKAGE_CACHE)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done.stdout


def test_readme_examples_pass_mypy_strict_outside_the_checkout(tmp_path: Path) -> None:
    """Each tagged README example type-checks strictly against the installed package, and the
    lazily loaded SQLiteLedger is seen as its class, not as ``object``."""
    examples = _readme_examples()
    assert {"engine", "durable", "openai-agents"} <= set(examples)
    sources = {f"example_{tag.replace('-', '_')}": code for tag, code in examples.items()}
    sources["probe"] = (
        "from agent_adapter.ledger import SQLiteLedger\nreveal_type(SQLiteLedger('x.db'))\n"
    )
    done = _check_as_user(tmp_path, sources)
    expected = 'probe.py:2: note: Revealed type is "agent_adapter.ledger._sqlite.SQLiteLedger"\n'
    hint = NOT_INSTALLED_HINT if "[import-" in done.stdout else done.stdout
    assert (done.returncode, done.stdout, done.stderr) == (0, expected, ""), hint


def test_the_check_fails_on_a_type_error(tmp_path: Path) -> None:
    """An example that passes a path where a ledger belongs fails the check, naming the line."""
    bad = "from agent_adapter import Executor\n\nexecutor = Executor(ledger='x.db')\n"
    done = _check_as_user(tmp_path, {"example_bad": bad})
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        'example_bad.py:3: error: Argument "ledger" to "Executor" has incompatible type "str"; '
        'expected "Ledger | None"  [arg-type]\n',
        "",
    )
