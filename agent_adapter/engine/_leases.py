"""Effect leases: a running effect call's claim stays *in flight* while its body runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..ledger import EffectRenewed, Event
from ._run import _Run

__all__ = ["Leases"]

_log = logging.getLogger("agent_adapter")


class Leases:
    """Keeps an executor's running effect calls in flight: one timer, every third of
    ``lease_s``, renews (``effect.renewed``, one batch) the lease of each call that has
    been running since the previous tick, pushing it on by ``lease_s``.

    One timer for all calls, not one per call: a call that ends within its first period
    costs a dict insert and a pop, and appends nothing more. A renewal is written at most
    two periods after the claim or the previous renewal, so a live holder's lease never
    runs out (it lasts three).
    """

    __slots__ = (
        "_clock",
        "_due",
        "_handle",
        "_lease_s",
        "_record",
        "_running",
        "_writing",
        "_written",
    )

    def __init__(
        self,
        clock: Callable[[], float],
        lease_s: float,
        record: Callable[[list[Event]], Awaitable[None]],
    ) -> None:
        self._clock = clock
        self._lease_s = lease_s
        #: appends events outside any call (``Pipeline.record``)
        self._record = record
        #: running calls (by their _Run's id): the run and its effect key
        self._running: dict[int, tuple[_Run, str]] = {}
        #: the calls that were running at the previous tick: renewed at the next one
        self._due: set[int] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None
        self._written: set[int] = set()  # the calls of the renewal being written

    def hold(self, run: _Run, key: str) -> None:
        """``run``'s body starts: renew its claim of ``key`` while it runs."""
        self._running[id(run)] = (run, key)
        if self._handle is None:
            period = self._lease_s / 3
            self._handle = asyncio.get_running_loop().call_later(period, self._tick)

    def release(self, run: _Run) -> asyncio.Task[None] | None:
        """``run``'s body ended: no more renewals. Returns the renewal of it being written,
        if any, to wait for before its outcome is recorded (none may land after it)."""
        self._running.pop(id(run), None)
        self._due.discard(id(run))
        writing = self._writing
        if writing is not None and id(run) in self._written and not writing.done():
            return writing
        return None

    def _tick(self) -> None:
        self._handle = None
        running = self._running
        due = [running[i] for i in self._due if i in running]
        self._due = set(running)
        if due and (self._writing is None or self._writing.done()):
            self._written = {id(run) for run, _ in due}
            self._writing = asyncio.get_running_loop().create_task(self._renew(due))
        if running:
            period = self._lease_s / 3
            self._handle = asyncio.get_running_loop().call_later(period, self._tick)

    async def _renew(self, due: list[tuple[_Run, str]]) -> None:
        now = self._clock()
        events: list[Event] = [
            EffectRenewed(
                ts=now,
                run_id=run.ctx.run_id,
                call_id=run.ctx.call_id,
                tool=run.spec.name,
                key=key,
                lease_until=now + self._lease_s,
            )
            for run, key in due
        ]
        try:
            await self._record(events)
        except Exception as exc:
            # The bodies run on: a lease that lapses makes the key ambiguous to others
            # (never free), so the effect still cannot run twice without an operator.
            _log.warning("effect leases could not be renewed: %s", exc)

    def close(self) -> None:
        """Stop the timer (the executor closed); running calls keep their outcome."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
