"""Progress on a terminal for long ledger work (``verify``, ``audit``, ``export``).

One line on stderr, rewritten in place (``\\r``, then erase to the end of the line), and
erased when the work ends, so the terminal is left as the command's output alone. Only
when stderr is a terminal: otherwise ``progress_for`` gives None and the command runs
exactly as before, writing nothing more anywhere (a pipe or a log file gets no
carriage returns). The first report is written at once, later ones at most every
``EVERY_S`` seconds, so a fast machine still shows that work was going on and a slow one
is not flooded.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO

__all__ = ["EVERY_EVENTS", "EVERY_S", "Progress", "progress_for", "showing"]

#: At most one rewrite of the line this often (seconds).
EVERY_S = 0.2
#: A loop over events reports every this many (a check per event, a call per 4096).
EVERY_EVENTS = 4096
_ERASE = "\r\x1b[K"


class Progress:
    """The progress line of one command: ``update(done, total)`` from any thread."""

    def __init__(
        self,
        label: str,
        stream: IO[str],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._label = label
        self._stream = stream
        self._clock = clock
        self._next = 0.0
        self._shown = False
        # The verifier reports from its own thread while the loop may end the line.
        self._lock = threading.Lock()

    def update(self, done: int, total: int = 0) -> None:
        """Say that ``done`` of ``total`` (0: not known) are done, unless said very lately."""
        now = self._clock()
        if now < self._next:
            return
        with self._lock:
            self._next = now + EVERY_S
            text = f"{self._label}: {done:,} events"
            if total >= done > 0:
                text += f" of {total:,} ({done * 100 // total}%)"
            self._write(_ERASE + text)
            self._shown = True

    def phase(self, label: str) -> None:
        """Go on under another label (the next step of the same command)."""
        with self._lock:
            self._label = label
            self._next = 0.0

    def close(self) -> None:
        """Erase the line (if one was written): the terminal keeps only the output."""
        with self._lock:
            if self._shown:
                self._write(_ERASE)
                self._shown = False

    def _write(self, text: str) -> None:
        # A terminal that went away must not end the command: progress is a courtesy.
        with contextlib.suppress(OSError, ValueError):
            self._stream.write(text)
            self._stream.flush()


def _tty(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def progress_for(
    label: str, stream: IO[str] | None = None, *, output: IO[str] | None = None
) -> Progress | None:
    """A ``Progress`` on ``stream`` (stderr) when it is a terminal, else None.

    ``output``: where the command writes while it works (``export``'s lines); when that is
    a terminal too, the lines are the progress, and a line rewritten among them would
    only garble them: None.
    """
    stream = sys.stderr if stream is None else stream
    if not _tty(stream) or (output is not None and _tty(output)):
        return None
    return Progress(label, stream)


@contextlib.contextmanager
def showing(label: str, *, output: IO[str] | None = None) -> Iterator[Progress | None]:
    """``progress_for(label)`` for the block, its line erased however the block ends (an
    error's one line on stderr then starts on a clean line)."""
    progress = progress_for(label, output=output)
    try:
        yield progress
    finally:
        if progress is not None:
            progress.close()
