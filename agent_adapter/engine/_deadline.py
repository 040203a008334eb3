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
    """One call's deadline. ``fired``: the timer cancelled the task for it."""

    __slots__ = ("done", "fired", "task", "when")

    def __init__(self, task: asyncio.Task[Any], when: float) -> None:
        self.task = task
        self.when = when
        self.done = False
        self.fired = False


class _Deadlines:
    """The running calls of one loop with one timeout, in deadline order, and one timer."""

    __slots__ = ("armed_for", "loop", "queue", "timeout")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.loop = loop
        self.timeout = timeout
        self.queue: deque[Deadline] = deque()
        self.armed_for: float | None = None

    def add(self, task: asyncio.Task[Any]) -> Deadline:
        queue = self.queue
        while queue and queue[0].done:
            queue.popleft()
        entry = Deadline(task, self.loop.time() + self.timeout)
        queue.append(entry)
        if self.armed_for is None:
            self._arm(entry.when)
        return entry

    def _arm(self, when: float) -> None:
        self.armed_for = when
        self.loop.call_at(when, self._fire, context=_TIMER_CONTEXT)

    def _fire(self) -> None:
        # Everything due by the deadline this timer was armed for is due now (the loop
        # runs a timer up to its clock resolution early); later entries re-arm it.
        due = max(self.loop.time(), self.armed_for or 0.0)
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
                entry.task.cancel()
            else:
                self._arm(entry.when)
                return


def deadline(timeout: float) -> Deadline:
    """A deadline ``timeout`` seconds from now for the current task (mark it ``done``)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task(loop)
    if task is None:
        raise RuntimeError("Timeout should be used inside a task")
    queues = _by_loop.get(loop)
    if queues is None:
        queues = _by_loop[loop] = {}
    deadlines = queues.get(timeout)
    if deadlines is None:
        deadlines = queues[timeout] = _Deadlines(loop, timeout)
    return deadlines.add(task)
