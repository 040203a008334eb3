"""The SQLite ledger's mark: a small file beside it that WAL recovery cannot take back.

Why. The head in meta (``_sqlite_head``) is written in the same transaction as the
events, so it lives in the same WAL. After a crash, SQLite's WAL recovery keeps the
frames up to the first damaged one (a WAL cut short, a changed byte, a removed -wal)
and silently drops the rest: events and head roll back together, and the shorter
ledger verifies. The mark is outside the WAL: after each commit that appended, the
writer writes the ledger's last seq and hash into ``<file>-mark`` (with the head's MAC
rule, ``head_mac`` of ``_head``), before any append of that commit returns. So every acknowledged
event is at or below the mark, and a table that ends before the mark, or holds another
record at the mark's seq, has lost acknowledged events.

A lower bound, never ahead. The mark is written after the commit: a process killed
between the two leaves the mark behind the table, which is no alarm. Writers only move
it forward, reading, comparing and writing under an exclusive ``flock`` on the mark
file, so a writer that committed earlier cannot overwrite a later writer's mark (which
would uncover events already acknowledged). Readers take no lock: a read torn by a
concurrent write fails its format or its MAC and is read again.

Not fsynced. A process crash keeps the mark (the kernel has it). A power cut keeps
whatever version of it reached the disk; with ``synchronous="FULL"`` the mark is written
only after the WAL's fsync returned, so no version on disk is ahead of the durable WAL,
and the mark is at worst behind (by the kernel's write-back delay, about 30 s by
default). An fsync of the mark at every commit would double the flushes per commit to
narrow that window. With ``"NORMAL"`` the mark may reach the disk before the commits it
names: a power cut that loses acknowledged events (which NORMAL allows) is then
reported, not an alarm raised for nothing.

The file is one record of ``_SIZE`` bytes, rewritten in place at offset 0 (within one
disk sector): ``agent-adapter-mark 1 SEQ HASH MAC``, padded with spaces. A missing or
empty mark, or one at seq 0, claims nothing.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from typing import NamedTuple

from ..errors import LedgerError
from ._head import head_mac

try:
    import fcntl
except ImportError:  # not POSIX: writers cannot exclude each other; see _locked
    fcntl = None  # type: ignore[assignment]

#: Appended to the ledger's path: beside SQLite's own -wal, -shm and -journal.
MARK_SUFFIX = "-mark"
_SIZE = 256
_MAGIC = b"agent-adapter-mark 1"
_RECORD = re.compile(
    rb"agent-adapter-mark 1 (0|[1-9][0-9]{0,18}) (-|[0-9a-f]{64}) ([0-9a-f]{64}) *\n"
)
# A torn read (a concurrent write) is read again this many times before it is reported.
_READ_TRIES = 3
_LAST_ROW = "SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1"
_HASH_AT = "SELECT hash FROM events WHERE seq = ?"


class Mark(NamedTuple):
    """A sound mark: the ledger held the record ``hash`` at ``seq`` (seq 0: nothing)."""

    seq: int
    hash: str


class MarkUnreadable(Exception):
    """The mark file holds something other than a mark this key can check; ``reason`` says what."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def mark_path(path: str) -> str:
    """Where the mark of the ledger at ``path`` is kept: beside the file itself, symbolic
    links resolved, as SQLite places its -wal (so every path to one file finds one mark)."""
    return os.path.realpath(path) + MARK_SUFFIX


def _encode(seq: int, hash_: str, key: bytes | None, mac: str | None = None) -> bytes:
    # ``mac``: the head's MAC over the same (seq, hash), when the caller has it already.
    line = b"%b %d %b %b" % (
        _MAGIC,
        seq,
        hash_.encode() if hash_ else b"-",
        (mac if mac is not None else head_mac(seq, hash_, key)).encode(),
    )
    return line.ljust(_SIZE - 1) + b"\n"


def _fields(data: bytes, where: str) -> tuple[int, str, str]:
    """(seq, hash, mac) of a well-formed record; MarkUnreadable otherwise."""
    found = _RECORD.fullmatch(data) if len(data) == _SIZE else None
    if found is None:
        raise MarkUnreadable(f"its mark file {where} is unreadable (torn or overwritten)")
    seq, hash_, mac = found.groups()
    return int(seq), "" if hash_ == b"-" else hash_.decode(), mac.decode()


def _decode(data: bytes, key: bytes | None, where: str, check_mac: bool = True) -> Mark | None:
    """The mark in ``data``; None for an empty file; MarkUnreadable when unsound.

    A record at seq 0 claims nothing, whatever its MAC: it may have been written under
    another key rule (a ledger created unkeyed, then given a key while still empty).
    """
    if not data:
        return None  # created, never written (a power cut right after creating it)
    seq, hash_, mac = _fields(data, where)
    if seq == 0 and not hash_:
        return Mark(0, "")
    if check_mac and not hmac.compare_digest(head_mac(seq, hash_, key), mac):
        raise MarkUnreadable(
            f"its mark file {where} does not match its MAC: it was altered"
            + (", or written without the key" if key is not None else "")
        )
    return Mark(seq, hash_)


def read_mark(path: str, key: bytes | None, *, check_mac: bool = True) -> Mark | None:
    """The mark beside the ledger at ``path``, read without creating or locking anything.

    None when there is none (no file, or an empty one); ``MarkUnreadable`` when it
    cannot be checked. Used by ``verify`` (read-only ledgers too) and before creating a ledger.
    """
    where = mark_path(path)
    try:
        fd = os.open(where, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MarkUnreadable(f"its mark file {where} cannot be read: {exc.strerror}") from exc
    try:
        for attempt in range(_READ_TRIES):
            try:
                return _decode(os.pread(fd, _SIZE + 1, 0), key, where, check_mac)
            except MarkUnreadable:
                if attempt == _READ_TRIES - 1:
                    raise
                time.sleep(0.001)  # a writer's pwrite of one record takes microseconds
            except OSError as exc:
                raise MarkUnreadable(
                    f"its mark file {where} cannot be read: {exc.strerror}"
                ) from exc
    finally:
        os.close(fd)
    raise AssertionError("unreachable")


def lost_message(path: str, last_seq: int, mark: Mark) -> str:
    """What a table that ends at ``last_seq``, before ``mark``, means (for errors and verify)."""
    return (
        f"the ledger ends at seq {last_seq} but its mark file {mark_path(path)} says "
        f"{mark.seq}: acknowledged events were lost (its -wal damaged, cut short or removed "
        "after a crash, or a power cut with synchronous=NORMAL)"
    )


def missing_message(path: str, seq: int) -> str:
    """What opening a ledger of ``seq`` events without its mark file means (seq 0: no
    events yet, nothing to say); the warning at open and the line in ``verify``."""
    return (
        f"its mark file {mark_path(path)} was missing though the ledger holds {seq} "
        "event(s) (restored from a backup of the .db and -wal only, or written before marks "
        "were kept): events a damaged WAL lost before then cannot be detected; a backup "
        "must include the -mark file"
    )


def replaced_message(path: str, mark: Mark) -> str:
    """What a record at the mark's seq other than the one it names means."""
    return f"seq {mark.seq} is not the record its mark file {mark_path(path)} names (replaced)"


class MarkWriter:
    """The writer thread's handle on the mark: opened at start, moved after each commit.

    ``error`` is set once the mark shows lost events, cannot be read, or cannot be
    written: from then on the writer refuses appends, so that the evidence stays.
    """

    def __init__(self, path: str, key: bytes | None, wait_s: float) -> None:
        self._db = path
        self.path = mark_path(path)
        self._key = key
        self._wait_s = wait_s
        self._fd: int | None = None
        # The record this writer last wrote or checked: when the file still holds it,
        # no other writer moved the mark, and it need not be parsed again.
        self._known = b""
        self.error: LedgerError | None = None
        #: The seq the mark was started again at because its file was missing while the
        #: table held events (0: it was not): see ``missing_message``.
        self.restarted_at = 0

    def _refuse(self, reason: str) -> LedgerError:
        return LedgerError(
            f"ledger {self._db}: {reason}; appends are refused so that the evidence stays "
            "(see ledger verify)"
        )

    def start(self, conn: sqlite3.Connection) -> None:
        """Open (or create) the mark and check it against the table; sets ``error``."""
        try:
            self._fd, created = _open_for_writing(self.path, self._db)
        except OSError as exc:
            self.error = LedgerError(
                f"ledger {self._db}: its mark file {self.path} cannot be opened for "
                f"writing ({exc.strerror}); appends are refused, since without it events "
                "lost from a damaged WAL would go unnoticed"
            )
            return
        try:
            with self._locked():
                data = os.pread(self._fd, _SIZE + 1, 0)
                try:
                    mark = _decode(data, self._key, self.path)
                except MarkUnreadable as exc:
                    self.error = self._refuse(exc.reason)
                    return
                # Read under the lock, before the snapshot: any mark a writer wrote was
                # written after its commit, so the table read next holds at least as much.
                conn.execute("BEGIN")
                try:
                    last = conn.execute(_LAST_ROW).fetchone()
                    last_seq, last_hash = last if last is not None else (0, "")
                    if mark is None or mark.seq == 0:
                        # No mark yet (a new ledger, or one written before marks were kept):
                        # the table as it is now is what later losses are measured from.
                        if type(last_hash) is str and (mark is None or last_seq > 0):
                            self._write(last_seq, last_hash)
                            if created and last_seq > 0:
                                # Events lost before now (a damaged -wal) cannot be told.
                                self.restarted_at = last_seq
                        else:
                            self._known = data
                        return
                    if mark.seq > last_seq:
                        self.error = self._refuse(lost_message(self._db, last_seq, mark))
                        return
                    row = conn.execute(_HASH_AT, (mark.seq,)).fetchone()
                    if row is None or row[0] != mark.hash:
                        self.error = self._refuse(replaced_message(self._db, mark))
                        return
                    self._known = data
                finally:
                    conn.execute("ROLLBACK")
        except Exception as exc:  # never out of the writer thread: its waiters would hang
            self.error = self._cannot_write(exc)

    def advance(self, seq: int, hash_: str, mac: str | None = None) -> None:
        """After a commit through ``seq`` (last hash ``hash_``): move the mark forward.

        ``mac``: the head MAC that commit stored (``head_mac`` of the same seq and
        hash, the mark's own rule), so that it is not computed twice.

        Called before the commit's appends are acknowledged. Never raises: a failure
        sets ``error`` (the commit itself stands, and its appends are acknowledged).
        """
        fd = self._fd
        if fd is None:
            return
        try:
            # This runs after every commit, right after an fsync, when the thread's code
            # runs slowest: the lock is tried once inline, and _locked() (which waits
            # out another writer's hold) only when that fails.
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    with self._locked():
                        self._advance(fd, seq, hash_, mac)
                    return
                try:
                    self._advance(fd, seq, hash_, mac)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            else:
                self._advance(fd, seq, hash_, mac)
        except Exception as exc:  # never out of the writer thread: its waiters would hang
            self.error = self._cannot_write(exc)

    def _advance(self, fd: int, seq: int, hash_: str, mac: str | None) -> None:
        """``advance`` under the lock."""
        data = os.pread(fd, _SIZE + 1, 0)
        if data != self._known:
            # Another writer moved it (or someone changed it).
            try:
                mark = _decode(data, self._key, self.path)
            except MarkUnreadable as exc:
                self.error = self._refuse(exc.reason)
                return
            if mark is not None and mark.seq >= seq:
                self._known = data
                return  # a later commit's mark: never moved back
        self._write(seq, hash_, mac)

    def _write(self, seq: int, hash_: str, mac: str | None = None) -> None:
        assert self._fd is not None
        record = _encode(seq, hash_, self._key, mac)
        os.pwrite(self._fd, record, 0)
        self._known = record

    def _cannot_write(self, exc: BaseException) -> LedgerError:
        detail = getattr(exc, "strerror", None) or str(exc)
        return LedgerError(
            f"ledger {self._db}: its mark file {self.path} cannot be written ({detail}); "
            "appends are refused, since without it events lost from a damaged WAL would "
            "go unnoticed"
        )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the mark's exclusive lock; held only for a read and a write, never across
        a commit, so a wait is short (bounded by ``busy_timeout_s`` all the same)."""
        fd = self._fd
        if fcntl is None or fd is None:
            yield None
            return
        deadline = time.monotonic() + self._wait_s
        pause = 0.0001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LedgerError(
                        f"another process held the lock of {self.path} for more than "
                        f"{self._wait_s:g} s"
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.01)
        try:
            yield None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Release the file (in the writer thread, when it stops)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _open_for_writing(where: str, db: str) -> tuple[int, bool]:
    """The mark's descriptor and whether this call created the file, creating it with the
    ledger file's permissions (as SQLite does for its -wal), so every user who may write
    the ledger may write its mark."""
    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(where, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return os.open(where, flags), False
    with contextlib.suppress(OSError):
        os.fchmod(fd, os.stat(db).st_mode & 0o777)
    return fd, True


def check_before_create(path: str) -> None:
    """LedgerError when a mark beside a database that holds no ledger claims events.

    The database is empty but its mark says it held events: every one was lost (a -wal
    removed or damaged before any of it reached the main file). Creating a new ledger
    there would make that loss look like a fresh start. The MAC is not checked: a mark
    past seq 0 is evidence whatever key it was written with.
    """
    try:
        mark = read_mark(path, None, check_mac=False)
    except MarkUnreadable as exc:
        raise LedgerError(
            f"ledger {path} holds no ledger yet, but {exc.reason}; nothing was created"
        ) from None
    if mark is not None and mark.seq > 0:
        raise LedgerError(
            f"ledger {path} holds no events, but its mark file {mark_path(path)} says it held "
            f"{mark.seq}: they were lost (its -wal removed or damaged after a crash?); "
            "nothing was created, so that the evidence stays"
        )
