"""``ChainWatch``: the chain checked as records pass, for a reader that folds them anyway.

An executor replays every event when it opens a ledger; checking the chain on the way
costs one SHA-256 per record over the bytes as stored (``read_records``), far less than
a second pass (``verify()`` reads and decodes everything again). It finds what must not
pass unnoticed: a record deleted or inserted (a seq gap), re-chained (a broken link),
altered (its hash no longer matches its stored bytes), or malformed
(``Event.malformed``).

What it cannot check: a keyed (HMAC) chain's hashes without the key (when no hash
matches as plain SHA-256, the hashes are taken to be keyed and are not judged: the
store's ``verify()`` has the key), the hashes of a store without ``read_records`` (only
seqs and links then), and events deleted from the end (the store's authenticated head
tells that: ``verify()``).
"""

from __future__ import annotations

from hashlib import sha256

from ._events import Event

__all__ = ["ChainWatch"]


class ChainWatch:
    """Feed it each record in seq order (``see``); ``findings()`` says what is wrong."""

    __slots__ = ("_altered", "_last", "_link", "_malformed", "_matched", "broken")

    def __init__(self, *, keyed: bool | None = None) -> None:
        """``keyed``: what the store says of its chain (None: it does not say)."""
        self._last = 0
        self._link = ""
        self.broken = ""
        self._altered = 0  # first seq whose hash does not match its bytes (0: none)
        # Some hash matched as plain SHA-256 (or the store says it is unkeyed): the chain
        # is unkeyed, so a hash that does not match is an alteration.
        self._matched = keyed is False
        if keyed:
            self._altered = -1  # never judged: HMACs need the key (verify() has it)
        self._malformed: list[int] = []

    def see(self, event: Event, payload: bytes | None = None) -> None:
        """Check ``event`` against the one before it, and (given its stored bytes) its hash."""
        seq, prev = event.seq, event.prev
        if not self.broken and (seq != self._last + 1 or prev != self._link):
            self.broken = (
                f"seq {self._last + 1} is missing (the next record is seq {seq})"
                if seq != self._last + 1
                else f"seq {seq} does not link to the record before it"
            )
        if event.malformed:
            self._malformed.append(seq)
        if payload is not None:
            if self._altered >= 0:
                if sha256(b"%d:%b:%b" % (seq, prev.encode(), payload)).hexdigest() == event.hash:
                    self._matched = True
                elif not self._altered:
                    self._altered = seq
        self._last = seq
        self._link = event.hash

    def findings(self) -> list[str]:
        """What is wrong, one sentence each; empty when nothing was found."""
        found = [self.broken] if self.broken else []
        if self._altered > 0 and self._matched:
            found.append(f"seq {self._altered} does not match its hash (altered)")
        if self._malformed:
            found.append(
                f"{len(self._malformed)} malformed record(s), first seq {self._malformed[0]} "
                "(read with fields at their defaults)"
            )
        return found
