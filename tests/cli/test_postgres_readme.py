"""The README's PostgreSQL example runs as written, against the session's server."""

from __future__ import annotations

import os

from _docs import run_example


def test_postgres_example_refunds_once_across_two_replicas(
    postgres_dsn: str, pg_schema: str
) -> None:
    """Two replicas on one schema: the first refunds, the second is refused; the chain
    verifies."""
    done = run_example(
        "postgres", env={**os.environ, "AGENT_ADAPTER_DSN": f"{postgres_dsn}?schema={pg_schema}"}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "refunding A1",
        "refunded 500 on A1",
        "replica-2: refused, run replica-1 did it",
        "True",
    ]


def test_postgres_example_without_a_server_says_so_in_one_line() -> None:
    """No DSN: the example names the variable and the command that prints one; a DSN whose
    host does not resolve: one line saying so (not a traceback, not "connection lost")."""
    runs = {}
    for dsn in ("", "postgresql://app@db.invalid:5432/pay?schema=refunds"):
        runs[dsn] = run_example(
            "postgres", timeout=120, env={**os.environ, "AGENT_ADAPTER_DSN": dsn}
        )
    unset, unresolved = runs.values()
    assert (unset.returncode, unset.stdout, unset.stderr) == (
        1,
        "",
        "set AGENT_ADAPTER_DSN (python -m agent_adapter.testing.postgres prints one)\n",
    )
    assert (unresolved.returncode, unresolved.stdout) == (1, "")
    assert unresolved.stderr.startswith(
        "error: ledger postgresql://app@db.invalid:5432/pay (schema refunds): opening: cannot "
        "connect: the host name does not resolve ("
    )
    assert len(unresolved.stderr.splitlines()) == 1
