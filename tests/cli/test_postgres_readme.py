"""The README's PostgreSQL example runs as written, against the session's server."""

from __future__ import annotations

import os
import subprocess
import sys

from test_readme import _example


def test_postgres_example_refunds_once_across_two_replicas(
    postgres_dsn: str, pg_schema: str
) -> None:
    """Two replicas on one schema: the first refunds, the second is refused; the chain
    verifies."""
    done = subprocess.run(
        [sys.executable, "-c", _example("postgres")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "AGENT_ADAPTER_DSN": f"{postgres_dsn}?schema={pg_schema}"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "refunding A1",
        "refunded 500 on A1",
        "replica-2: refused, run replica-1 did it",
        "True",
    ]
