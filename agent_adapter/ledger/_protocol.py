"""The ``Ledger`` protocol every store implements (memory, SQLite, later Postgres)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

from ._chain import Verification
from ._events import Event

__all__ = ["LOCK_TIMEOUT_S", "Ledger"]

#: How long a store waits for a write lock another process holds before it gives up
#: with ``LedgerError``: the default of ``SQLiteLedger(busy_timeout_s=)`` and of the
#: command line's ``--lock-timeout``. A lock is normally held for one group-commit
#: transaction (milliseconds); giving up is the costlier mistake: an outcome that cannot
#: be appended after the body ran leaves the call ambiguous for a person to resolve, and
#: a decision the CLI could not record must be typed again. 30 s rides out a loaded
#: machine or a checkpoint and still ends the wait on a holder that is stuck.
LOCK_TIMEOUT_S: float = 30.0


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
