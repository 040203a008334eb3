"""Opening a ledger file safely: refuse what must not be opened, translate failures.

Reading commands open the ledger read-only (``SQLiteLedger(readonly=True)``): they never
create or change a file, never wait for another process's write lock, and work on a
read-only file or directory. A file that is not an SQLite database is refused before
SQLite sees it; writing commands refuse a read-only file. Every refusal is a
``CliError``: one line on stderr, exit status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..ledger import Ledger

__all__ = [
    "CliError",
    "check_ledger_file",
    "is_dsn",
    "open_ledger",
    "read_key",
    "sqlite_message",
]

_SQLITE_HEADER = b"SQLite format 3\x00"


class CliError(Exception):
    """An expected failure: printed as one line on stderr, exit status 1."""


def check_ledger_file(path: Path, *, write: bool) -> None:
    """Refuse, with one clear message, a file a command must not open.

    Reading commands never create a file, so a missing one is an error; anything but a
    regular file (a directory, a named pipe, a socket, a device; a symlink is followed)
    is refused before it is opened; a file that is not an SQLite database is refused
    before SQLite sees it (an empty file would otherwise become a new ledger). Writing
    commands refuse a read-only file.
    """
    try:
        # Classified before it is opened: opening a named pipe waits for a writer
        # (forever), and opening a device can act on it.
        _refuse_unless_regular(path, os.stat(path).st_mode)
        # Non-blocking and checked again on the opened file: what was swapped in after
        # the stat above cannot make this open wait either.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise CliError(f"{path}: no such file") from None
    except PermissionError:
        raise CliError(f"{path}: permission denied (cannot read it)") from None
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    try:
        _refuse_unless_regular(path, os.fstat(fd).st_mode)
        header = os.read(fd, len(_SQLITE_HEADER))
    finally:
        os.close(fd)
    if not header:
        raise CliError(f"{path} is empty, not a ledger")
    if header != _SQLITE_HEADER:
        raise CliError(f"{path} is not a ledger (not an SQLite database)")
    if write:
        # No write permission bit at all counts as read-only even for root, who could
        # write anyway: the owner marked the file read-only on purpose.
        mode = path.stat().st_mode
        if not os.access(path, os.W_OK) or not mode & 0o222:
            raise CliError(
                f"{path} is read-only; this command records a decision and needs to write"
            )
        if not os.access(path.parent, os.W_OK):
            raise CliError(f"{path.parent} is not writable (SQLite needs it for its journal)")


_NOT_REGULAR = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _refuse_unless_regular(path: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    what = next((name for test, name in _NOT_REGULAR if test(mode)), "a special file")
    raise CliError(f"{path} is {what}, not a ledger file")


def read_key(key_file: str | None) -> bytes | None:
    """The HMAC key from ``--key-file``: the file's bytes, trailing newline removed."""
    if key_file is None:
        return None
    try:
        key = Path(key_file).read_bytes().rstrip(b"\r\n")
    except FileNotFoundError:
        raise CliError(f"key file {key_file}: no such file") from None
    except OSError as exc:
        raise CliError(f"key file {key_file}: {exc.strerror or exc}") from None
    if not key:
        raise CliError(f"key file {key_file} is empty")
    return key


def sqlite_message(path: Path, exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"{path} is locked by another process ({text}); try again when it is released"
    if "readonly" in text or "read-only" in text:
        return f"{path} cannot be written ({text})"
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a ledger or is corrupt ({text})"
    return f"{path}: {text}"


def is_dsn(db: str) -> bool:
    """True when ``--db`` names a PostgreSQL database rather than a file."""
    return db.startswith(("postgresql://", "postgres://"))


def _postgres(args: argparse.Namespace, *, write: bool) -> Ledger:
    """The ``PostgresLedger`` of a ``postgresql://`` ``--db`` (``--schema`` or ``?schema=``).

    Never creates a schema: a command reads or answers what replicas wrote, and a typo
    in the schema must not become an empty ledger that says "nothing pending".
    """
    from ..ledger import PostgresLedger

    key = read_key(getattr(args, "key_file", None))
    try:
        return PostgresLedger(
            args.db,
            schema=getattr(args, "schema", None),
            key=key,
            readonly=not write,
            create=False,
            timeout_s=args.lock_timeout,
        )
    except ValueError as exc:
        raise CliError(f"--db / --schema: {exc}") from None


@contextlib.asynccontextmanager
async def open_ledger(args: argparse.Namespace, *, write: bool = False) -> AsyncIterator[Ledger]:
    """An opened ``SQLiteLedger`` on ``--db``, after the checks of ``check_ledger_file``,
    or a ``PostgresLedger`` when ``--db`` is a ``postgresql://`` URL.

    Read-only unless ``write``: a reading command must not need the write lock.
    """
    if is_dsn(args.db):
        ledger = _postgres(args, write=write)
        try:
            await ledger.open()  # type: ignore[attr-defined]
            yield ledger
        finally:
            with contextlib.suppress(Exception):
                await ledger.close()
        return
    if getattr(args, "schema", None) is not None:
        raise CliError("--schema is for a postgresql:// --db, not for a ledger file")
    path = Path(args.db)
    check_ledger_file(path, write=write)
    key = read_key(getattr(args, "key_file", None))
    from ..ledger import SQLiteLedger

    ledger = SQLiteLedger(str(path), key=key, busy_timeout_s=args.lock_timeout, readonly=not write)
    try:
        try:
            await ledger.open()
            yield ledger
        except sqlite3.Error as exc:
            raise CliError(sqlite_message(path, exc)) from None
    finally:
        with contextlib.suppress(Exception):
            await ledger.close()
