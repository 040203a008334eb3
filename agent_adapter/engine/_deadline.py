"""Per-call deadlines that share one timer per event loop and timeout value.

``asyncio.timeout`` gives every call its own ``TimerHandle`` (a Python object built
through two ``__init__``s, pushed on the loop's heap, cancelled and left there until the
loop purges it) and two coroutines for its context manager. Calls of one tool all use
the same timeout, so their deadlines arrive in the order the calls started: a FIFO per
(loop, timeout) with one armed timer, for the earliest deadline still running, is enough.
A call adds an entry and marks it done; the timer cancels the tasks whose deadlines
passed and re-arms itself for the next one.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref
from collections import deque
from typing import Any

__all__: list[str] = []

# The timer runs in an empty context, not a copy of the caller's: a copy would keep the
# current Call (arguments, spec, ctx) alive for as long as the timer is armed.
_TIMER_CONTEXT = contextvars.Context()

# loop -> {timeout_s: its deadlines}; weak, so a closed loop (``asyncio.run`` per call)
# is not kept alive by the executor.
_Queues = dict[float, "_Deadlines"]
_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queues] = (
    weakref.WeakKeyDictionary()
)


class Deadline:
    """One call's deadline. ``fired``: the timer cancelled the task for it.

    The caller sets ``done`` and drops ``task`` when the call ends: nothing reachable
    from ``_by_loop``'s values may keep the loop (a task's ``_loop``) alive.
    """

    __slots__ = ("done", "fired", "task", "when")

    def __init__(self, task: asyncio.Task[Any], when: float) -> None:
        self.task: asyncio.Task[Any] | None = task
        self.when = when
        self.done = False
        self.fired = False


class _Deadlines:
    """The running calls of one loop with one timeout, in deadline order, and one timer."""

    __slots__ = ("armed_for", "queue", "timeout")

    def __init__(self, timeout: float) -> None:
        # No reference to the loop (see Deadline): it is passed in, or running.
        self.timeout = timeout
        self.queue: deque[Deadline] = deque()
        self.armed_for: float | None = None

    def add(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> Deadline:
        queue = self.queue
        while queue and queue[0].done:
            queue.popleft()
        entry = Deadline(task, loop.time() + self.timeout)
        queue.append(entry)
        if self.armed_for is None:
            self._arm(loop, entry.when)
        return entry

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self.armed_for = when
        loop.call_at(when, self._fire, context=_TIMER_CONTEXT)

    def _fire(self) -> None:
        # Everything due by the deadline this timer was armed for is due now (the loop
        # runs a timer up to its clock resolution early); later entries re-arm it.
        loop = asyncio.get_running_loop()
        due = max(loop.time(), self.armed_for or 0.0)
        self.armed_for = None
        queue = self.queue
        while queue:
            entry = queue[0]
            if entry.done:
                queue.popleft()
            elif entry.when <= due:
                queue.popleft()
                entry.done = True
                entry.fired = True
                if entry.task is not None:
                    entry.task.cancel()
            else:
                self._arm(loop, entry.when)
                return


def deadline(timeout: float) -> Deadline:
    """A deadline ``timeout`` seconds from now for the current task (mark it ``done``)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task(loop)
    if task is None:
        raise RuntimeError("Timeout should be used inside a task")
    try:
        queues = _by_loop.get(loop)
        if queues is None:
            queues = _by_loop[loop] = {}
    except TypeError:
        # A loop that takes no weak reference: a queue of its own for this call (one
        # entry, one timer), which is asyncio.timeout's cost but the same semantics.
        return _Deadlines(timeout).add(loop, task)
    deadlines = queues.get(timeout)
    if deadlines is None:
        deadlines = queues[timeout] = _Deadlines(timeout)
    return deadlines.add(loop, task)
