"""The ``Ledger`` protocol every store implements (memory, SQLite, later Postgres)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

from ._chain import Verification
from ._events import Event

__all__ = ["Ledger"]


@runtime_checkable
class Ledger(Protocol):
    """An append-only, hash-chained event store.

    ``append`` assigns ``seq`` (gap-free from 1), ``prev`` and ``hash`` and returns only
    once the event is durable (for the store's meaning of durable). ``append_many``
    makes several events durable together, in order, contiguous in seq.
    """

    async def append(self, event: Event) -> Event: ...

    async def append_many(self, events: Sequence[Event]) -> list[Event]: ...

    def read(
        self, after: int = 0, *, run_id: str | None = None, call_id: str | None = None
    ) -> AsyncIterator[Event]: ...

    async def verify(self, *, deep: bool = False) -> Verification:
        """Check the stored chain; name the first missing, reordered or altered seq.

        ``deep=True`` also checks what the store keeps beside the records (a file's
        structure, its indexes): slower, for an operator's check, not for every open.
        """
        ...

    async def close(self) -> None: ...
