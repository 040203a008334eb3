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
- ``append_events(...)`` (schema version 2; its body changed in version 3; version 4's
  takes one more argument, ``p_rechain``, and is created beside version 3's, which
  writers of versions 2 and 3 still running call): the function one append transaction
  is, so that a commit is one round trip (see ``append_function_sql``).

Indexes: ``events_run_id (run_id, seq)`` and ``events_call_run (call_id, run_id, seq)``
(schema version 2; version 1 had ``events_call_id (call_id, seq)``, which scanned every
run's rows of a call id when one call of one run was read). A writer that opens a
version 1 or 2 schema migrates it (``migrate``): the function (created, or replaced in
place: version 2's found the table's end with a scan of the whole table), then, from
version 1, the index built ``CONCURRENTLY`` (appends of writers already running go on
meanwhile), then the version.
"""

from __future__ import annotations

import asyncio
import errno
import re
import socket
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import LedgerError

if TYPE_CHECKING:
    import asyncpg

__all__ = [
    "SCHEMA_VERSION",
    "append_function_sql",
    "connection_lost",
    "describe_dsn",
    "migrate",
    "server_refused",
    "split_dsn",
    "translate",
]

#: The schema version this version writes; a schema with a higher one is refused.
SCHEMA_VERSION = 4
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
        f"CREATE INDEX events_call_run ON {s}.events (call_id, run_id, seq)",
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
        append_function_sql(schema),
    ]


# What the function answers, one row each: (kind, seq, text, hash, payload).
APPENDED = "ok"  # the rows are written (seq, hash: the new head); COMMIT follows
RECHAINED = "rechained"  # before APPENDED: the head the rows went on (seq, text = mac, hash)
STALE = "stale"  # the head is not the expected one (seq, text = mac, hash: the head)
ROW = "row"  # after STALE: a committed row past p_since (seq, text = prev, hash, payload)
CLAIMED = "claimed"  # a claim another holder has (text = the key, seq = its claim's seq)
UNEVEN = "uneven"  # the table does not end at the head: nothing written
# The message of the function's defense-in-depth check (a claim written around the head
# lock between its check and its insert): nothing written, the append goes again.
CLAIM_RACE = "agent-adapter: an effect claim was written around the head lock"


def append_function_sql(schema: str, *, rechain: bool = True) -> str:
    """``CREATE OR REPLACE FUNCTION`` of the schema's append function (version 4;
    ``rechain=False``: version 3's, the same but for step 1's ``p_rechain``).

    One call is one append transaction, so a commit is one round trip (called outside a
    transaction block, the statement is the transaction: it commits when it returns):

    1. lock the head ``FOR UPDATE`` (waiting at most ``p_lock_ms``) and compare it with
       the head the rows were chained on (``p_head_*``). Another one: answer ``STALE``,
       the head, and the rows past ``p_since`` (what the caller's followers have not
       heard), writing nothing; the caller chains again on it. With ``p_rechain`` (an
       unkeyed ledger, whose hashes are plain SHA-256) and a head whose MAC is the
       unkeyed one, the function chains the rows again on it instead (their seq and
       prev, hash, the claims' seq, the new head and its MAC), goes on with step 2,
       and answers ``RECHAINED`` (the head it found, then those rows) before
       ``APPENDED``.
    2. the table must end at the head (its last row is the head's), else ``UNEVEN``:
       one probe of the primary key's end, whatever the plan (every statement here is
       planned once per connection without its parameters' values, so none may depend
       on them to stay off a scan of the table).
    3. the claims (``p_key``...): one another holder has, past the claimer's horizon,
       answers ``CLAIMED`` (the same rule as the insert's ``WHERE``), writing nothing.
    4. the claims upserted, the rows inserted from an array of the table's rows
       (``unnest``: the driver encodes each row as a record, field by field, with no
       check per value that a column array would cost), the head moved,
       ``pg_notify`` (delivered at COMMIT, in commit order), ``APPENDED``.

    An answer that wrote nothing held only the head's row lock; with ``p_quiet`` (the
    call is its own transaction) its commit does not wait for a flush (there is nothing
    to make durable), so a fleet's stale tries do not hold the head for an fsync each.
    The chain's hashes and the head's MAC come from the caller (or, rechained, from the
    same SHA-256 here, which the caller checks): the key never reaches the database.
    """
    s = q(schema)
    if not rechain:
        return _append_function(s, "", "", "", _STALE_IF, "", "")
    elsif = _STALE_IF.replace("IF", "ELSIF", 1)
    parts = (", p_rechain boolean", _RECHAIN_DECLARE, _RECHAIN, elsif, _REFUSED, _RECHAINED)
    return _append_function(s, *(part.replace("{s}", s) for part in parts))


def _append_function(
    s: str, param: str, declare: str, rechain: str, stale_if: str, refused: str, rechained: str
) -> str:
    return f"""CREATE OR REPLACE FUNCTION {s}.append_events(
    p_head_seq bigint, p_head_hash text, p_head_mac text, p_since bigint, p_quiet boolean,
    p_lock_ms text,
    p_rows {s}.events[],
    p_key text[], p_key_seq bigint[], p_holder text[], p_horizon bigint[],
    p_new_hash text, p_new_mac text, p_channel text{param})
RETURNS TABLE (o_kind text, o_seq bigint, o_text text, o_hash text, o_payload bytea)
LANGUAGE plpgsql AS $fn$
DECLARE
    h record;
    t record;
    n bigint;
{declare}    new_seq bigint := p_head_seq + coalesce(cardinality(p_rows), 0);
BEGIN
    PERFORM set_config('lock_timeout', p_lock_ms, true);
    SELECT hd.seq, hd.hash, hd.mac INTO h FROM {s}.head hd WHERE hd.id = 1 FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'agent-adapter: the head row is missing';
    END IF;
{rechain}{stale_if}        IF p_quiet THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        RETURN QUERY SELECT 'stale'::text, h.seq, h.mac, h.hash, NULL::bytea;
        IF p_since IS NOT NULL THEN
            RETURN QUERY SELECT 'row'::text, e.seq, e.prev, e.hash, e.payload
                FROM {s}.events e WHERE e.seq > p_since AND e.seq <= h.seq ORDER BY e.seq;
        END IF;
        RETURN;
    END IF;
    -- The table's last row, through the primary key whatever the plan (a generic plan
    -- of "EXISTS (... WHERE seq > $1)" scans the whole table, under the head lock).
    SELECT e.seq, e.hash INTO t FROM {s}.events e ORDER BY e.seq DESC LIMIT 1;
    IF NOT (CASE WHEN FOUND THEN t.seq = p_head_seq AND t.hash = p_head_hash
                 ELSE p_head_seq = 0 END) THEN
        IF p_quiet THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        RETURN QUERY SELECT 'uneven'::text, h.seq, h.mac, h.hash, NULL::bytea;
        RETURN;
    END IF;
    IF cardinality(p_key) > 0 THEN
{refused}        RETURN QUERY SELECT 'claimed'::text, c.seq, c.key, NULL::text, NULL::bytea
            FROM {s}.effect_claims c
            JOIN unnest(p_key, p_holder, p_horizon) AS k(key, holder, horizon)
              ON c.key = k.key
            WHERE NOT (c.holder = k.holder OR c.seq <= k.horizon OR k.holder = '');
        IF FOUND THEN
            IF p_quiet THEN
                PERFORM set_config('synchronous_commit', 'off', true);
            END IF;
            RETURN;
        END IF;
        INSERT INTO {s}.effect_claims AS c (key, seq, holder, horizon)
            SELECT * FROM unnest(p_key, p_key_seq, p_holder, p_horizon)
            ON CONFLICT (key) DO UPDATE SET seq = EXCLUDED.seq, holder = EXCLUDED.holder,
                horizon = EXCLUDED.horizon
            WHERE c.holder = EXCLUDED.holder OR c.seq <= EXCLUDED.horizon
                OR EXCLUDED.holder = '';
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n < cardinality(p_key) THEN
            RAISE EXCEPTION '{CLAIM_RACE}';
        END IF;
    END IF;
    INSERT INTO {s}.events SELECT * FROM unnest(p_rows);
    UPDATE {s}.head SET seq = new_seq, hash = p_new_hash, mac = p_new_mac WHERE id = 1;
    PERFORM pg_notify(p_channel, new_seq::text);
{rechained}    RETURN QUERY SELECT 'ok'::text, new_seq, p_new_mac, p_new_hash, NULL::bytea;
END
$fn$"""


# The parts of the append function that chain the rows again on a moved head (version 4).
_RECHAIN_DECLARE = """    r {s}.events;
    i integer;
    delta bigint;
    link text;
"""
_RECHAIN = """    IF p_rechain AND p_head_seq >= 0 AND cardinality(p_rows) > 0
        AND (h.seq <> p_head_seq OR h.hash <> p_head_hash OR h.mac <> p_head_mac)
        AND h.mac = encode(sha256(convert_to(h.seq::text || ':' || h.hash || ':head keyed=0',
                                              'UTF8')), 'hex') THEN
        -- Unkeyed: the rows chained again here, on the head as it is.
        delta := h.seq - p_head_seq;
        link := h.hash;
        FOR i IN 1 .. cardinality(p_rows) LOOP
            r := p_rows[i];
            r.seq := r.seq + delta;
            r.prev := link;
            link := encode(sha256(convert_to(r.seq::text || ':' || link || ':', 'UTF8')
                                  || r.payload), 'hex');
            r.hash := link;
            p_rows[i] := r;
        END LOOP;
        IF cardinality(p_key) > 0 THEN
            p_key_seq := ARRAY(SELECT x + delta FROM unnest(p_key_seq) AS x);
        END IF;
        p_head_seq := h.seq;
        p_head_hash := h.hash;
        new_seq := h.seq + cardinality(p_rows);
        p_new_hash := link;
        p_new_mac := encode(sha256(convert_to(new_seq::text || ':' || link || ':head keyed=0',
                                              'UTF8')), 'hex');
"""
_STALE_IF = "    IF h.seq <> p_head_seq OR h.hash <> p_head_hash OR h.mac <> p_head_mac THEN\n"
# Claims refused on a head others moved: answered as that head, stale, with the rows
# past p_since, writing nothing, so that the caller's followers hear the claims that
# refuse theirs before the caller is told (``Follow.refused``); on the head it then
# knows, a claim the events do not explain is answered CLAIMED.
_REFUSED = """        IF link IS NOT NULL AND EXISTS (SELECT 1 FROM {s}.effect_claims c
                JOIN unnest(p_key, p_holder, p_horizon) AS k(key, holder, horizon)
                  ON c.key = k.key
                WHERE NOT (c.holder = k.holder OR c.seq <= k.horizon OR k.holder = '')) THEN
            IF p_quiet THEN
                PERFORM set_config('synchronous_commit', 'off', true);
            END IF;
            RETURN QUERY SELECT 'stale'::text, h.seq, h.mac, h.hash, NULL::bytea;
            IF p_since IS NOT NULL THEN
                RETURN QUERY SELECT 'row'::text, e.seq, e.prev, e.hash, e.payload
                    FROM {s}.events e WHERE e.seq > p_since AND e.seq <= h.seq ORDER BY e.seq;
            END IF;
            RETURN;
        END IF;
"""
_RECHAINED = """    IF link IS NOT NULL THEN
        RETURN QUERY SELECT 'rechained'::text, h.seq, h.mac, h.hash, NULL::bytea;
        IF p_since IS NOT NULL THEN
            RETURN QUERY SELECT 'row'::text, e.seq, e.prev, e.hash, e.payload
                FROM {s}.events e WHERE e.seq > p_since AND e.seq <= h.seq ORDER BY e.seq;
        END IF;
    END IF;
"""


def migration_sql(schema: str, version: int) -> list[tuple[str, bool]]:
    """The statements that bring a schema of ``version`` to ``SCHEMA_VERSION``, each with
    whether it must run outside a transaction block (``CONCURRENTLY``)."""
    s = q(schema)
    # The function as this version writes it (version 4's takes one more argument, so it
    # is created beside version 3's, which writers of versions 2 and 3 still running go
    # on calling: both take the same head lock). Version 2's own found the table's end
    # with a statement whose generic plan scans the whole table: replaced in place by
    # version 3's (the same signature).
    steps: list[tuple[str, bool]] = [(append_function_sql(schema), False)]
    if version == 2:
        steps.append((append_function_sql(schema, rechain=False), False))
    if version < 2:
        steps += [
            # Built without blocking the writers that run meanwhile (an older version's
            # included); an invalid index a crashed build left is dropped first.
            (
                f"CREATE INDEX CONCURRENTLY events_call_run ON {s}.events (call_id, run_id, seq)",
                True,
            ),
            (f"DROP INDEX CONCURRENTLY IF EXISTS {s}.events_call_id", True),
        ]
    return steps


async def migrate(
    conn: asyncpg.Connection, schema: str, where: str, timeout_s: float
) -> dict[str, str]:
    """Bring the ledger in ``schema`` to ``SCHEMA_VERSION`` (a writer's open does this);
    its meta as it is then. One migrator at a time (a session advisory lock: the index is
    built outside a transaction); another writer's appends go on meanwhile. A lock that
    another session holds for more than ``timeout_s`` (a migration still building the
    index, or a lock leaked on a pooled server connection) fails the open with
    ``LedgerError``, nothing changed."""
    lock = f"agent-adapter:migrate:{schema}"
    # Tried, not waited for: a statement waiting for the lock would hold a snapshot that
    # the holder's CREATE INDEX CONCURRENTLY waits for (a deadlock). The lock is the
    # server's, held by another process: polled, there is no event to wait on.
    try_lock = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))"
    deadline = time.monotonic() + timeout_s
    while not await conn.fetchval(try_lock, lock):
        left = deadline - time.monotonic()
        if left <= 0:
            raise LedgerError(
                f"ledger {where}: migrating the schema to version {SCHEMA_VERSION}: another "
                f"session has held the migration lock for more than {timeout_s:g} s (a "
                "migration still running, or its lock left on a pooled server connection: "
                "see pg_locks where locktype = 'advisory'); nothing was changed"
            )
        await asyncio.sleep(min(0.05, left))
    try:
        meta = await inspect(conn, schema, where)
        assert meta is not None  # a ledger was found before, and ledgers are not dropped
        version = int(meta["schema_version"])
        if version >= SCHEMA_VERSION:
            return meta
        invalid = await conn.fetchval(
            "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1 AND c.relname = 'events_call_run'",
            schema,
        )
        if invalid:  # a build that was interrupted left it behind, unusable
            await conn.execute(f"DROP INDEX CONCURRENTLY {q(schema)}.events_call_run")
        for statement, outside in migration_sql(schema, version):
            if invalid is False and "CREATE INDEX" in statement:
                continue  # built by a migration that stopped before its version was set
            if outside:
                await conn.execute(statement)
            else:
                async with conn.transaction():
                    await conn.execute(statement)
        await conn.execute(
            f"UPDATE {q(schema)}.meta SET value = $1 WHERE name = 'schema_version'",
            str(SCHEMA_VERSION),
        )
        meta["schema_version"] = str(SCHEMA_VERSION)
        return meta
    finally:
        await conn.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", lock)


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
