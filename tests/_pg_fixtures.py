"""PostgreSQL for the tests: one throwaway cluster per session, one schema per test.

``postgres_dsn`` (session) is ``$AGENT_ADAPTER_TEST_POSTGRES_DSN`` when set, else the DSN
of a cluster this session starts with the system's initdb and pg_ctl
(``agent_adapter.testing.postgres``) and stops at its end, whether the tests passed or
not. Without PostgreSQL binaries (or asyncpg) the tests that need it skip with the
reason; with
``AGENT_ADAPTER_REQUIRE_POSTGRES=1`` (``.ci/run`` sets it) that skip is a failure.
``pg_schema`` is a fresh schema name per test, so tests never see each other's ledger.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator

import pytest

from agent_adapter.testing.postgres import Cluster, binaries

DSN_ENV = "AGENT_ADAPTER_TEST_POSTGRES_DSN"
REQUIRE_ENV = "AGENT_ADAPTER_REQUIRE_POSTGRES"
_counter = itertools.count(1)


def _unavailable(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but PostgreSQL is unavailable: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL is unavailable: {reason} (see README, 'Running the Postgres tests')")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster | None]:
    """The session's throwaway cluster (None when ``$AGENT_ADAPTER_TEST_POSTGRES_DSN`` is used)."""
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        _unavailable("asyncpg is not installed (pip install 'agent-adapter[postgres]')")
    if os.environ.get(DSN_ENV):
        yield None
        return
    bindir = binaries()
    if bindir is None:
        _unavailable("no initdb/pg_ctl found (set PG_BIN, or install PostgreSQL)")
    assert bindir is not None
    try:
        cluster = Cluster.start(bindir)
    except (RuntimeError, OSError) as exc:
        _unavailable(f"the throwaway cluster did not start: {exc}")
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres_dsn(pg_cluster: Cluster | None) -> str:
    """A DSN of a PostgreSQL database the tests may create schemas in."""
    if pg_cluster is None:
        return os.environ[DSN_ENV]
    return pg_cluster.dsn


@pytest.fixture
def pg_schema() -> str:
    """A schema name no other test (or test run on this server) uses."""
    return f"t{next(_counter)}_{uuid.uuid4().hex[:10]}"


def fresh_schema() -> str:
    """Another unique schema name, for a test that needs several ledgers."""
    return f"t{next(_counter)}_{uuid.uuid4().hex[:10]}"
