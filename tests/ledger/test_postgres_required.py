"""Without PostgreSQL the Postgres tests skip with their reason; in CI they fail instead.

Runs one Postgres contract test in a child pytest with no binaries to be found
(``PG_BIN`` naming an empty directory, no ``AGENT_ADAPTER_TEST_POSTGRES_DSN``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AGENT_ADAPTER_TEST_POSTGRES_DSN", "AGENT_ADAPTER_REQUIRE_POSTGRES")
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            str(TESTS / "ledger" / "test_ledger_contract.py::test_satisfies_protocol[postgres]"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS.parent,
        env={**clean, "PG_BIN": str(tmp_path), **env},
        check=False,
    )


def test_without_postgres_the_tests_skip_with_the_reason(tmp_path: Path) -> None:
    """No initdb/pg_ctl: skipped (exit 0), and the summary says why."""
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout
    assert "1 skipped" in done.stdout
    assert "PostgreSQL is unavailable: no initdb/pg_ctl found" in done.stdout


def test_with_postgres_required_the_skip_is_a_failure(tmp_path: Path) -> None:
    """AGENT_ADAPTER_REQUIRE_POSTGRES=1 (.ci/run): the same run fails, saying why."""
    done = _run(tmp_path, AGENT_ADAPTER_REQUIRE_POSTGRES="1")
    assert done.returncode == 1, done.stdout
    assert "AGENT_ADAPTER_REQUIRE_POSTGRES=1 but PostgreSQL is unavailable" in done.stdout
