"""A PostgreSQL ledger that cannot connect says why in one line: a host name that does not
resolve, or a host that cannot be reached, is "cannot connect", never "connection lost"."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("asyncpg")

from agent_adapter.ledger._postgres_schema import translate

WHERE = "postgresql://app@db.internal:5432/pay (schema refunds)"


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        (
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            "cannot connect: the host name does not resolve (Name or service not known)",
        ),
        (
            socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),
            "cannot connect: the host name does not resolve (Temporary failure in name resolution)",
        ),
        (
            OSError(errno.ENETUNREACH, "Network is unreachable"),
            "cannot connect: Network is unreachable (is the host reachable from here?)",
        ),
        (
            OSError(errno.EHOSTUNREACH, "No route to host"),
            "cannot connect: No route to host (is the host reachable from here?)",
        ),
    ],
    ids=["no-such-name", "no-resolver", "net-unreachable", "no-route"],
)
def test_a_connect_that_never_reached_a_server_is_not_a_lost_connection(
    exc: OSError, said: str
) -> None:
    """The driver's error for a name with no address or a host with no route reads as what
    it is, and keeps the driver's error as its cause."""
    error = translate(WHERE, "opening", exc, 30.0)
    assert str(error) == f"ledger {WHERE}: opening: {said}"
    assert error.__cause__ is exc


def test_the_cli_on_a_name_that_does_not_resolve_prints_one_line() -> None:
    """`.invalid` never resolves (RFC 2606): one line, exit 1, no traceback."""
    dsn = "postgresql://app@db.invalid:5432/pay?schema=refunds"
    done = subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", "ledger", "show", "--db", dsn],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(
        "agent-adapter: error: ledger postgresql://app@db.invalid:5432/pay (schema refunds): "
        "opening: cannot connect: the host name does not resolve ("
    )
    assert len(done.stderr.splitlines()) == 1
