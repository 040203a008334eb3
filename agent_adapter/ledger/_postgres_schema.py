"""The Postgres ledger's schema, its checks at open, and asyncpg's errors as ``LedgerError``.

Everything here works on a connection and a schema name, never on a ledger object: the
tables one ledger keeps in its schema, what opening checks before anything is written
(a UTF-8 database, a schema that holds this ledger and nothing else, a version this one
can extend), creating a new ledger, and the one place where the driver's exceptions
become ``LedgerError`` naming the database (user, host, port, database and schema,
never the password).

Tables (every statement names the schema: nothing depends on ``search_path``, so a
pooler in transaction mode cannot point a statement at another schema):

- ``meta(name, value)``: format, schema_version, keyed.
- ``events(seq, type, run_id, call_id, tool, ts, payload, prev, hash)``: seq is an
  explicit bigint primary key (no sequence: a rolled-back transaction would burn values
  and leave gaps), payload the encoded event's bytes as hashed.
- ``head(id = 1, seq, hash, mac)``: the one row each append transaction locks
  ``FOR UPDATE`` and moves, so commit order is seq order, and ``verify()`` can tell
  events deleted from the end (the MAC is ``_head_mac``, as the SQLite head's).
- ``effect_claims(key, seq, holder, horizon)``: the last claim of each effect key,
  written in the transaction that appends the ``effect.claimed`` event.
"""

from __future__ import annotations

import asyncio
import errno
import re
import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import LedgerError

if TYPE_CHECKING:
    import asyncpg

__all__ = [
    "SCHEMA_VERSION",
    "connection_lost",
    "describe_dsn",
    "server_refused",
    "split_dsn",
    "translate",
]

#: The schema version this version writes; a schema with a higher one is refused.
SCHEMA_VERSION = 1
FORMAT = "agent-adapter-ledger"
_TABLES = frozenset({"meta", "events", "head", "effect_claims"})
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_schema_name(schema: str) -> str:
    """``schema`` if it is a plain identifier (it is quoted in every statement); ValueError."""
    if not isinstance(schema, str) or not _IDENT.fullmatch(schema):
        raise ValueError(
            f"schema {schema!r}: expected a plain name (letters, digits, _; at most 63)"
        )
    return schema


def split_dsn(dsn: str) -> tuple[str, str | None]:
    """(the DSN without its ``schema`` query parameter, that parameter or None).

    The parameter is ours, not libpq's: asyncpg would send it to the server as a setting.
    """
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for name, value in query if name == "schema"]
    if not schemas:
        return dsn, None
    rest = [(name, value) for name, value in query if name != "schema"]
    return urlunsplit(parts._replace(query=urlencode(rest))), schemas[-1]


def describe_dsn(dsn: str, schema: str) -> str:
    """The database as messages name it: the DSN without its password, and the schema."""
    try:
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            user, _, host = netloc.rpartition("@")
            user = user.partition(":")[0]
            netloc = f"{user}@{host}"
        query = [(n, v) for n, v in parse_qsl(parts.query) if n not in ("password", "schema")]
        shown = urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))
    except ValueError:
        shown = "postgresql://(unparsable DSN)"
    return f"{shown} (schema {schema})"


def q(schema: str) -> str:
    """The schema, quoted for SQL (its name was checked by ``check_schema_name``)."""
    return f'"{schema}"'


def schema_sql(schema: str) -> list[str]:
    """The statements that create a ledger's tables in ``schema``."""
    s = q(schema)
    return [
        f"CREATE SCHEMA IF NOT EXISTS {s}",
        f"CREATE TABLE {s}.meta (name text PRIMARY KEY, value text NOT NULL)",
        f"CREATE TABLE {s}.events ("
        " seq bigint PRIMARY KEY,"
        " type text NOT NULL,"
        " run_id text NOT NULL,"
        " call_id text NOT NULL,"
        " tool text NOT NULL,"
        " ts double precision NOT NULL,"
        " payload bytea NOT NULL,"
        " prev text NOT NULL,"
        " hash text NOT NULL)",
        f"CREATE INDEX events_run_id ON {s}.events (run_id, seq)",
        f"CREATE INDEX events_call_id ON {s}.events (call_id, seq)",
        f"CREATE TABLE {s}.head ("
        " id integer PRIMARY KEY CHECK (id = 1),"
        " seq bigint NOT NULL,"
        " hash text NOT NULL,"
        " mac text NOT NULL)",
        f"CREATE TABLE {s}.effect_claims ("
        " key text PRIMARY KEY,"
        " seq bigint NOT NULL,"
        " holder text NOT NULL,"
        " horizon bigint NOT NULL)",
    ]


async def inspect(conn: asyncpg.Connection, schema: str, where: str) -> dict[str, str] | None:
    """The ledger's meta in ``schema``; None when the schema is missing or holds no table.

    LedgerError, nothing changed, when the database is not UTF-8 (a key or an id could
    then have two spellings), the schema holds tables that are not a ledger's (another
    application's: never written into), or a ledger of a newer schema version.
    """
    encoding = await conn.fetchval(
        "SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = current_database()"
    )
    if encoding != "UTF8":
        raise LedgerError(
            f"ledger {where}: the database's encoding is {encoding}, not UTF8; a ledger "
            "needs UTF8 (create the database with ENCODING 'UTF8')"
        )
    tables = {
        row[0]
        for row in await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
    }
    if not tables:
        return None
    if "meta" not in tables:
        raise LedgerError(
            f"ledger {where}: the schema holds tables that are not a ledger's "
            f"({', '.join(sorted(tables)[:5])}); pick another schema (?schema=NAME)"
        )
    try:
        rows = await conn.fetch(f"SELECT name, value FROM {q(schema)}.meta")
    except Exception as exc:
        raise LedgerError(
            f"ledger {where}: the schema holds a table 'meta' that is not a ledger's ({exc}); "
            "pick another schema (?schema=NAME)"
        ) from None
    meta = {str(name): str(value) for name, value in rows}
    if meta.get("format") != FORMAT:
        raise LedgerError(
            f"ledger {where}: the schema holds tables that are not a ledger's "
            f"({', '.join(sorted(tables)[:5])}); pick another schema (?schema=NAME)"
        )
    try:
        version = int(meta.get("schema_version", ""))
    except ValueError:
        raise LedgerError(
            f"ledger {where}: its schema_version {meta.get('schema_version')!r} is unreadable"
        ) from None
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"ledger {where} was written by a newer version of agent-adapter (schema "
            f"version {version}; this one reads {SCHEMA_VERSION}): upgrade agent-adapter"
        )
    missing = _TABLES - tables
    if missing:
        raise LedgerError(
            f"ledger {where}: its table(s) {', '.join(sorted(missing))} are missing "
            "(dropped by hand?); it is not opened"
        )
    return meta


# SQLSTATE classes and codes that say something a person can act on.
_CONNECTION = "08"
_LOCK_TIMEOUT = "55P03"
_CANCELED = "57014"
_SHUTDOWN = ("57P01", "57P02", "57P03")
_RETRYABLE = ("40001", "40P01")


def connection_lost(exc: BaseException) -> bool:
    """True when ``exc`` says the connection is gone (or never came): retry on a new one.

    The server going away (shut down, restarted, the backend terminated), the socket
    closed, or asyncpg's own "connection is closed". Not a statement the server refused.
    """
    import asyncpg

    if isinstance(exc, OSError | asyncpg.InterfaceError | asyncpg.ConnectionDoesNotExistError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", "") or ""
        return state.startswith(_CONNECTION) or state in _SHUTDOWN
    return isinstance(exc, ConnectionError)


def server_refused(exc: BaseException) -> bool:
    """True when the server answered ``exc`` (it refused a statement) over a connection
    that is still usable; False for a lost, closed or confused connection, a timeout."""
    import asyncpg

    return isinstance(exc, asyncpg.PostgresError) and not connection_lost(exc)


def retryable(exc: BaseException) -> bool:
    """A transaction the server rolled back on purpose (a deadlock, a serialization
    failure): nothing of it committed, so running it again is safe."""
    return getattr(exc, "sqlstate", None) in _RETRYABLE


#: A connect that cannot reach the host at all: no route, no such local address.
_UNREACHABLE = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL})


def translate(where: str, doing: str, exc: BaseException, wait_s: float) -> LedgerError:
    """The one place where the driver's exceptions become ``LedgerError`` naming the database."""
    import asyncpg

    state = getattr(exc, "sqlstate", None) or ""
    detail = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, asyncpg.InvalidPasswordError):
        message = f"ledger {where}: {doing}: the server refused the password ({detail})"
    elif isinstance(exc, asyncpg.InvalidAuthorizationSpecificationError):
        message = f"ledger {where}: {doing}: the server refused the login ({detail})"
    elif isinstance(exc, asyncpg.InvalidCatalogNameError):
        message = f"ledger {where}: {doing}: {detail}"
    elif state == _LOCK_TIMEOUT:
        message = (
            f"ledger {where}: {doing}: another writer held the ledger's head for more than "
            f"{wait_s:g} s"
        )
    elif state == _CANCELED:
        message = f"ledger {where}: {doing}: the server cancelled the statement ({detail})"
    elif isinstance(exc, ValueError):
        message = f"ledger {where}: {doing}: the DSN is not valid ({detail})"
    elif isinstance(exc, TimeoutError | asyncio.TimeoutError):
        message = f"ledger {where}: {doing}: the server did not answer within {wait_s:g} s"
    elif isinstance(exc, ConnectionRefusedError):
        message = f"ledger {where}: {doing}: cannot connect: connection refused (is it running?)"
    elif isinstance(exc, socket.gaierror):
        # Never connected, so nothing was "lost": the name in the DSN has no address.
        message = (
            f"ledger {where}: {doing}: cannot connect: the host name does not resolve "
            f"({exc.strerror or detail})"
        )
    elif isinstance(exc, OSError) and exc.errno in _UNREACHABLE:
        message = (
            f"ledger {where}: {doing}: cannot connect: {exc.strerror or detail} (is the "
            "host reachable from here?)"
        )
    elif connection_lost(exc):
        message = f"ledger {where}: {doing}: the connection to the server was lost ({detail})"
    elif isinstance(exc, OSError):
        message = f"ledger {where}: {doing}: cannot connect: {exc.strerror or detail}"
    else:
        message = f"ledger {where}: {doing} failed: {detail}"
    error = LedgerError(message)
    error.__cause__ = exc
    return error


def head_row(row: Any) -> tuple[int, str, str]:
    """(seq, hash, mac) of the head row as read."""
    return int(row[0]), str(row[1]), str(row[2])
