"""PostgresLedger through PgBouncer: what works in session and in transaction pooling.

Each test starts a PgBouncer of its own (the system's ``pgbouncer``, as the ``postgres``
user when run as root) in front of the session's server, and stops it at the end. Without
a ``pgbouncer`` binary they skip with the reason (it is not part of this project: the
README's PgBouncer paragraph says what these tests found).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from agent_adapter.ledger import CallRequested, PostgresLedger, Verification


def _binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _bouncer(dsn: str, mode: str) -> Iterator[str]:
    binary = _binary()
    if binary is None:
        if os.environ.get("AGENT_ADAPTER_REQUIRE_POSTGRES") == "1":  # .ci/run installs it
            pytest.fail("AGENT_ADAPTER_REQUIRE_POSTGRES=1 but no pgbouncer binary", pytrace=False)
        pytest.skip("no pgbouncer binary (apt-get install pgbouncer)")
    server = urlsplit(dsn)
    root = Path(tempfile.mkdtemp(prefix="agent-adapter-pgbouncer-"))
    user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
    port = _free_port()
    (root / "users.txt").write_text(f'"{server.username}" ""\n')
    (root / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={server.hostname} port={server.port} user={server.username}"
        + (f" password={server.password}" if server.password else "")
        + "\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {root / 'users.txt'}\npool_mode = {mode}\n"
        "max_client_conn = 100\ndefault_pool_size = 20\n"
        f"logfile = {root / 'log'}\npidfile = {root / 'pid'}\n"
    )
    command = [binary, str(root / "pgbouncer.ini")]
    if user is not None:  # it refuses to run as root
        for path in (root, *root.iterdir()):
            os.chown(path, user.pw_uid, user.pw_gid)
        command = ["runuser", "-u", "postgres", "--", *command]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    log = root / "log"
                    raise RuntimeError(
                        "pgbouncer did not start: "
                        + (log.read_text()[-1000:] if log.exists() else f"exit {proc.returncode}")
                    ) from None
                time.sleep(0.05)
        yield f"postgresql://{server.username}@127.0.0.1:{port}{server.path}"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def session_bouncer(postgres_dsn: str) -> Iterator[str]:
    """A PgBouncer in session pooling in front of the session's server: its DSN."""
    yield from _bouncer(postgres_dsn, "session")


@pytest.fixture
def transaction_bouncer(postgres_dsn: str) -> Iterator[str]:
    """A PgBouncer in transaction pooling in front of the session's server: its DSN."""
    yield from _bouncer(postgres_dsn, "transaction")


async def _fleet(make: Callable[[], Awaitable[PostgresLedger]]) -> list[PostgresLedger]:
    """Three ledger objects on one schema, 8 tasks each appending 10 (and reading their
    own calls back); every append acknowledged once, the chain whole."""
    ledgers = [await make() for _ in range(3)]
    for ledger in ledgers:
        await ledger.open()

    async def one(ledger: PostgresLedger, run: str) -> None:
        for i in range(10):
            await ledger.append(
                CallRequested(ts=1.0, run_id=run, call_id=f"c{i}", tool="t", args={})
            )
            got = [e.call_id async for e in ledger.read(run_id=run, call_id=f"c{i}")]
            assert got == [f"c{i}"]

    await asyncio.gather(
        *(one(led, f"r{j}-{k}") for j, led in enumerate(ledgers) for k in range(8))
    )
    assert await ledgers[0].verify() == Verification(ok=True, checked=240)
    return ledgers


def _ends_no_session(ledger: PostgresLedger) -> bool:
    """Behind the bouncer the writer knows no server session of its own (the pid it is
    told is PgBouncer's): a lost call's would be the wrong one to end."""
    writer = ledger._writer
    assert writer is not None and writer._conn is not None and writer._backend is not None
    return writer._backend[1] is None and writer._session(writer._conn) is None


async def _woken(idle: PostgresLedger, other: PostgresLedger, run: str) -> bool:
    """Does a NOTIFY of ``other``'s commit reach ``idle``'s follower (within 3 s)?"""
    heard: list[str] = []
    idle.follow(lambda e: heard.append(e.run_id), 240)
    await asyncio.sleep(0.3)  # the LISTEN is set up (a hint either way; the test is below)
    await other.append(CallRequested(ts=1.0, run_id=run, call_id="n", tool="t", args={}))
    for _ in range(30):
        if heard:
            return True
        await asyncio.sleep(0.1)
    return False


async def test_session_pooling_works_as_a_direct_connection(
    session_bouncer: str, pg_schema: str
) -> None:
    """Session pooling: the ledger's own connections append, read, verify, and an idle
    follower is woken by another object's commit (LISTEN/NOTIFY)."""
    ledgers = await _fleet(lambda: _own(session_bouncer, pg_schema))
    try:
        assert all(_ends_no_session(ledger) for ledger in ledgers)
        assert await _woken(ledgers[0], ledgers[1], "late")
    finally:
        for ledger in ledgers:
            await ledger.close()


async def _own(dsn: str, schema: str) -> PostgresLedger:
    return PostgresLedger(dsn, schema=schema, timeout_s=10)


async def test_transaction_pooling_works_through_a_pool_without_prepared_statements(
    transaction_bouncer: str, pg_schema: str
) -> None:
    """Transaction pooling through ``pool=`` (``statement_cache_size=0``): appends, reads
    and verify work (each append is one transaction); an idle follower is not woken
    (LISTEN does not outlive a transaction) but hears everything at ``catch_up()``."""
    pools: list[asyncpg.Pool] = []

    async def pooled() -> PostgresLedger:
        pool = await asyncpg.create_pool(
            transaction_bouncer, min_size=0, max_size=4, statement_cache_size=0
        )
        assert pool is not None
        pools.append(pool)
        return PostgresLedger(transaction_bouncer, schema=pg_schema, pool=pool, timeout_s=10)

    try:
        ledgers = await _fleet(pooled)
        try:
            assert all(_ends_no_session(ledger) for ledger in ledgers)
            heard: list[str] = []
            ledgers[0].follow(lambda e: heard.append(e.call_id), 240)
            assert not await _woken(ledgers[2], ledgers[1], "late")
            await ledgers[0].catch_up()
            assert heard == ["n"]
        finally:
            for ledger in ledgers:
                await ledger.close()
    finally:
        for pool in pools:
            await pool.close()
