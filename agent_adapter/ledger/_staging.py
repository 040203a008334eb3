"""The front of a group commit, shared by the stores that have a writer (SQLite, Postgres).

Appends made in one loop iteration are staged and handed to the store's writer together,
so all appenders woken by one commit join the next one (a writer task of the same loop
gets each at once: it runs after this iteration anyway, so they still come together).
Each store supplies its writer (``_put_staged``), its name for messages (``_where``) and
how to pass a key (``_KEY_HINT``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..errors import LedgerError
from ._batches import Batch, settle_batches
from ._events import Event
from ._follow import Followers, appending

__all__ = ["GroupCommit"]


class GroupCommit(Followers):
    """Followers plus the staging of appends for one writer (``_stage``, ``_kick``)."""

    #: how the store's constructor takes a key, for the message of a keyed ledger
    _KEY_HINT = ""
    #: True when the writer is a task of the appenders' loop: it takes everything
    #: staged when it next runs, so each append is handed over at once (a thread would
    #: start a transaction with the first one, so its store waits for the loop's turn)
    _HAND_OVER_AT_ONCE = False
    _closed: bool
    _keyed: bool
    _key: bytes | None
    _writer: Any
    _staged: list[Batch]
    _kick_scheduled: bool

    def _where(self) -> str:
        """The ledger's name in messages (a path, a database URL without its password)."""
        raise NotImplementedError

    def _put_staged(self, writer: Any, staged: list[Batch]) -> None:
        """Hand ``staged`` to ``writer`` for its next transaction."""
        raise NotImplementedError

    async def _open_for_appends(self) -> None:
        """Start the writer (refusing a read-only ledger)."""
        raise NotImplementedError

    async def append(self, event: Event) -> Event:
        """Store ``event``; returns it with ``seq``, ``prev`` and ``hash`` set, once committed."""
        if self._writer is None:
            await self._open_for_appends()
        await self._stage([event])
        return event

    async def append_many(self, events: Sequence[Event]) -> list[Event]:
        """Store ``events`` contiguously, in order, in one transaction."""
        batch = list(events)
        if batch:
            if self._writer is None:
                await self._open_for_appends()
            await self._stage(batch)
        return batch

    async def catch_up(self) -> None:
        """Hand every follower of this object what others committed until now.

        One empty commit: after it, each follower has been handed everything committed
        by anyone else up to it, whoever calls this.
        """
        if not self._follows:
            return
        if self._writer is None:
            await self._open_for_appends()
        await self._stage([])

    def _stage(self, events: list[Event]) -> asyncio.Future[None]:
        """Queue ``events`` for the next commit; the future is settled once it committed."""
        if self._closed:
            raise LedgerError(f"ledger {self._where()} is closed")
        if self._keyed and self._key is None:
            raise LedgerError(
                f"ledger {self._where()} is keyed (HMAC): appending needs its key "
                f"({self._KEY_HINT})"
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        owner = appending.get()
        if owner is None or owner.ledger is not self:
            self._staged.append(Batch(events, future))
        else:
            # The horizon is read and the batch counted together (no await between):
            # Follow.committed relies on it.
            owner.staged += 1
            self._staged.append(Batch(events, future, owner.horizon, owner))
        if self._HAND_OVER_AT_ONCE:
            self._kick()
        elif not self._kick_scheduled:
            # Hand everything staged in this loop iteration to the writer at once: all
            # appenders woken by one commit join the next one together.
            self._kick_scheduled = True
            loop.call_soon(self._kick)
        return future

    def _kick(self) -> None:
        self._kick_scheduled = False
        staged, self._staged = self._staged, []
        if not staged:
            return
        writer = self._writer
        if writer is None:
            error = LedgerError(f"ledger {self._where()} is closed")
            for batch in staged:
                batch.error = error
            settle_batches(staged)
            return
        self._put_staged(writer, staged)
