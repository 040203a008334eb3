"""``ChainWatch``: the chain checked as events pass, for a reader that folds them anyway.

An executor replays every event when it opens a ledger; checking the chain on the way
costs one encode and one SHA-256 per event, far less than a second pass (``verify()``
reads and decodes everything again). It finds what must not pass unnoticed: a record
deleted or inserted (a seq gap), re-chained (a broken link), altered (its hash no
longer matches its canonical bytes), or malformed (``Event.malformed``).

What it cannot check: a keyed (HMAC) chain's hashes without the key (when no hash
matches as plain SHA-256, the hashes are taken to be keyed and are not judged), events
of a newer version's type or read with fields at their defaults (their bytes cannot be
rebuilt), and events deleted from the end (the store's authenticated head tells that:
``verify()``).
"""

from __future__ import annotations

from hashlib import sha256

from ._events import Event, UnknownEvent, _encoder

__all__ = ["ChainWatch"]


class ChainWatch:
    """Feed it each event in seq order (``see``); ``findings()`` says what is wrong."""

    __slots__ = ("_altered", "_last", "_link", "_malformed", "_matched", "broken")

    def __init__(self) -> None:
        self._last = 0
        self._link = ""
        self.broken = ""
        self._altered = 0  # first seq whose hash does not match (0: none)
        self._matched = False  # some hash matched as plain SHA-256: the chain is unkeyed
        self._malformed: list[int] = []

    def see(self, event: Event) -> None:
        """Check ``event`` against the one before it, and its hash."""
        seq = event.seq
        if not self.broken and (seq != self._last + 1 or event.prev != self._link):
            self.broken = (
                f"seq {self._last + 1} is missing (the next record is seq {seq})"
                if seq != self._last + 1
                else f"seq {seq} does not link to the record before it"
            )
        if event.malformed or type(event) is UnknownEvent:
            if event.malformed:
                self._malformed.append(seq)
        else:
            prev, stored = event.prev, event.hash
            # The canonical bytes are the event encoded with its chain fields at their
            # defaults (as make_record stored it).
            event.seq, event.prev, event.hash = 0, "", ""
            try:
                payload = _encoder.encode(event)
            except Exception:  # (only an event built by hand could hold such a value)
                payload = None
            finally:
                event.seq, event.prev, event.hash = seq, prev, stored
            if payload is None:
                pass
            elif sha256(b"%d:%b:%b" % (seq, prev.encode(), payload)).hexdigest() == stored:
                self._matched = True
            elif not self._altered:
                self._altered = seq
        self._last = seq
        self._link = event.hash

    def findings(self) -> list[str]:
        """What is wrong, one sentence each; empty when nothing was found."""
        found = [self.broken] if self.broken else []
        if self._altered and self._matched:
            found.append(f"seq {self._altered} does not match its hash (altered)")
        if self._malformed:
            found.append(
                f"{len(self._malformed)} malformed record(s), first seq {self._malformed[0]} "
                "(read with fields at their defaults)"
            )
        return found
