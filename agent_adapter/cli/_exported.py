"""An exported ledger as ``--db`` of ``ledger audit`` and ``ledger verify``.

``ledger export`` writes one JSON line per stored record (``agent_adapter.ledger.
export_line``). Such a file is told from an SQLite ledger by its content, not its name:
an SQLite file starts with ``"SQLite format 3\\0"``, and any other regular, non-empty
file is read as an export. Everything else (missing, empty, a directory, a FIFO, a file
that cannot be read) is left to ``open_ledger``, whose checks and messages apply.

Its chain is checked exactly (``check_chain`` over the payload bytes the lines stand
for), with ``--key-file`` for a keyed one. A file has no authenticated head, so events
cut from its end cannot be found: the output says so. A line that is not one ``export``
could have written is a ``CliError`` naming the file and the line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ._opening import _SQLITE_HEADER, CliError
from ._progress import EVERY_EVENTS, Progress

if TYPE_CHECKING:
    from ..ledger import Event, Record, Verification

__all__ = ["EXPORT_NOTE", "export_events", "is_export", "read_export", "verify_export"]

EXPORT_NOTE = (
    "note: an exported file has no authenticated head: events removed from its end "
    "cannot be detected"
)


def is_export(path: Path) -> bool:
    """True when ``path`` is a regular, non-empty file that is not an SQLite database."""
    try:
        # is_file() is False for a FIFO or a device: opening one could block or consume it.
        if not path.is_file():
            return False
        with path.open("rb") as fh:
            header = fh.read(len(_SQLITE_HEADER))
    except OSError:
        return False  # open_ledger reports it (permission denied, ...)
    return bool(header) and header != _SQLITE_HEADER


def read_export(path: Path, progress: Progress | None = None) -> list[Record]:
    """Every line of the exported file as the stored record it stands for (``progress``
    told every ``EVERY_EVENTS`` lines)."""
    from ..ledger import parse_export_line

    records = []
    try:
        with path.open("rb") as fh:
            for number, line in enumerate(fh, 1):
                if progress is not None and not number % EVERY_EVENTS:
                    progress.update(number)
                try:
                    records.append(parse_export_line(line))
                except ValueError as exc:
                    if number == 1:
                        raise CliError(
                            f"{path} is not a ledger (not an SQLite database, nor an exported "
                            f"JSON-lines ledger: line 1 {exc})"
                        ) from None
                    raise CliError(f"{path} line {number} {exc}") from None
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    return records


def verify_export(
    records: list[Record], key: bytes | None, progress: Progress | None = None
) -> Verification:
    """The chain check of an exported file: seq, links and every hash, exactly
    (``progress`` told every ``EVERY_EVENTS`` records, of how many)."""
    from ..ledger import check_chain

    links: Iterator[_Link] = ((r.seq, r.prev, r.hash, r.payload) for r in records)
    if progress is not None:
        links = _counted(links, progress, len(records))
    return check_chain(links, key)


#: (seq, prev, hash, payload) of one record, as ``check_chain`` takes them
_Link = tuple[int, str, str, bytes]


def _counted(items: Iterator[_Link], progress: Progress, total: int) -> Iterator[_Link]:
    for done, item in enumerate(items, 1):
        yield item
        if not done % EVERY_EVENTS:
            progress.update(done, total)


def export_events(path: Path, records: list[Record]) -> list[Event]:
    """The events of the records, with their chain fields, for ``replay``.

    A line whose event does not fit its type is read flagged (``Event.malformed``), as a
    store reads such a record: the audit reports it, it does not stop.
    """
    from ..ledger import decode_event

    events = []
    for record in records:
        event = decode_event(record.payload)
        event.seq, event.prev, event.hash = record.seq, record.prev, record.hash
        events.append(event)
    return events
