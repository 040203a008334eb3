"""The executor's floors, shared by ``bench_executor.py`` and ``bench_durable.py``.

A module of its own so that ``bench_durable.py`` does not import the SDK and the rest of
``bench_executor.py``'s imports: a heap of a few hundred thousand more objects makes a
full garbage collection that lands inside a timed durable call cost ~80 ms.

- ``ContractFloor``: what the contract alone costs per call, no executor;
- ``BookkeepingFloor``: the contract plus what ``run_spec`` must keep per call, in one
  straight line (issue 16's item 4). Its two appends go to ``append_now``: a
  MemoryLedger's, or a durable commit to await (``bench_durable.py``'s ``CallFloor``);
- ``Threaded``: the best hand-written writer thread, one round trip per commit, our
  writer's statements (with ``mark=True`` also the head's MAC and the mark), and the
  least group commit in front of it (``stage``): ``bench_durable.py``'s floors and
  ``bench_ledger.py``'s floor of 64 appenders.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from agent_adapter.engine import CallContext, Executor, Registry
from agent_adapter.engine._context import Call, _current
from agent_adapter.engine._digest import digest
from agent_adapter.engine._run import _Run, _validated
from agent_adapter.ledger import MemoryLedger
from agent_adapter.ledger._chain import make_record
from agent_adapter.ledger._events import (
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallValidated,
    Event,
)
from agent_adapter.ledger._follow import appending
from agent_adapter.ledger._head import head_mac as _head_mac
from agent_adapter.ledger._sqlite_files import _FORMAT, _SCHEMA, SCHEMA_VERSION
from agent_adapter.ledger._sqlite_head import _PUT_HEAD, _UPDATE_HEAD
from agent_adapter.ledger._sqlite_threads import _INSERT

#: call ids, unique within the process
ids = itertools.count(1)
_ids = ids

RAW = (
    '{"order_id":"ord_0001","customer":"cus_42","amount":99.5,'
    '"express":false,"note":"refund for a damaged parcel"}'
)
KWARGS = {
    "order_id": "ord_0001",
    "customer": "cus_42",
    "amount": 99.5,
    "express": False,
    "note": "refund for a damaged parcel",
}


async def lookup_order(
    order_id: str, customer: str, amount: float, express: bool, note: str
) -> str:
    """Look an order up (a trivial tool: the cost measured is the machinery around it)."""
    return "ok"


class ContractFloor:
    """What the contract alone costs per call: no executor at all (``--floors``).

    The model's text validated and digested, the four events every executed call must
    append (``call.requested``, ``call.validated``, ``call.started`` before the body, the
    outcome after it) in the two appends the write-ahead needs, on a real ``MemoryLedger``
    (encode + SHA-256 chain + record), and the body. No ids, no projection, no context
    variable, no error handling: a lower bound for any executor that keeps the contract.
    """

    def __init__(self) -> None:
        self.spec = Registry().tool(lookup_order)
        self.ledger = MemoryLedger()

    def reset(self, n: int) -> None:
        self.ledger = MemoryLedger()

    async def call(self) -> Any:
        spec, ledger = self.spec, self.ledger
        call_id = f"c{next(_ids)}"
        now = time.time
        args = spec.validate(RAW)
        call_digest = digest(args)
        common = {"run_id": "run-bench", "call_id": call_id, "tool": spec.name}
        await ledger.append_many(
            [
                CallRequested(ts=now(), args=RAW, **common),
                CallValidated(ts=now(), digest=call_digest, **common),
                CallStarted(ts=now(), digest=call_digest, **common),
            ]
        )
        result = await lookup_order(**args)
        await ledger.append_many([CallSucceeded(ts=now(), result=result, **common)])
        return result


class BookkeepingFloor(ContractFloor):
    """The contract floor plus what the executor must keep per call, in one straight line.

    What ``run_spec`` does for a plain call that succeeds, and nothing it does only to
    decide (no step checks, no buffer, no error handling, no second coroutine): the
    caller's ``CallContext``, the step-0 check of its ids, ``_Run`` and ``Call``, the
    ``call.requested`` arguments as recorded, the projection's four handlers (the outcome
    index a repeated id is answered from, the in-flight table, the run counters), the two
    context variables (``current_call()`` for the body, and the appending follower that a
    shared ledger must not hand its own events back to), the result as JSON values, the
    same four events and two appends. A lower bound for ``run_spec`` that keeps
    DESIGN's pipeline and public API.
    """

    def reset(self, n: int) -> None:
        self.executor = Executor(self.spec_registry, ledger=MemoryLedger())
        self.executor._started = True  # nothing to replay
        # Stores a call's events: the MemoryLedger's append_now (returns None), or, in
        # bench_durable.py's floor of a durable call, a commit to await (a future).
        self.append_now: Callable[[list[Any]], Awaitable[None] | None] = (
            self.executor.ledger.append_now  # type: ignore[attr-defined]
        )

    def __init__(self, fn: Callable[..., Awaitable[Any]] = lookup_order, raw: str = RAW) -> None:
        self.spec_registry = Registry()
        self.spec = self.spec_registry.tool(fn)
        self.raw = raw
        self.reset(0)

    async def call(self) -> Any:
        ex, spec, raw = self.executor, self.spec, self.raw
        state, append_now, clock = ex.state, self.append_now, time.time
        ctx = CallContext(run_id="run-bench", call_id=f"c{next(_ids)}")
        key = (ctx.run_id, ctx.call_id)
        if key in state.outcomes or key in state.inflight:
            raise AssertionError("a repeated id")
        run = _Run(spec, ctx, clock())
        common = {"run_id": ctx.run_id, "call_id": ctx.call_id, "tool": spec.name}
        requested = CallRequested(
            ts=run.t0, args=ex._requested_args(spec, raw), metadata=ctx.metadata, **common
        )
        state._requested(requested)
        mine = appending.set(ex._follower)
        token = None
        try:
            args, call_digest = _validated(spec, raw)
            validated = CallValidated(ts=clock(), digest=call_digest, **common)
            state._validated(validated)
            call = Call(tool=spec.name, spec=spec, args=args, digest=call_digest, ctx=ctx)
            run.call = call
            token = _current.set(call)
            started = CallStarted(ts=clock(), digest=call_digest, **common)
            state._started(started)
            committing = append_now([requested, validated, started])
            if committing is not None:
                await committing
            result = await spec.fn(**call.args)
            value = msgspec.to_builtins(result, str_keys=True)
            now = clock()
            outcome = CallSucceeded(
                ts=now, duration_ms=(now - run.t0) * 1000.0, result=value, **common
            )
            state._outcome(outcome)
            committing = append_now([outcome])
            if committing is not None:
                await committing
            return result
        finally:
            appending.reset(mine)
            if token is not None:
                _current.reset(token)


# -- the hand-written writer thread (bench_durable.py, bench_ledger.py) ------------------


class Rows:
    """Chained rows shaped like the ledger's (a small ``call.requested`` each), numbered on."""

    def __init__(self) -> None:
        self.seq, self.prev = 0, ""

    def next(self) -> tuple[Any, ...]:
        event = CallRequested(
            ts=time.time(), run_id="run-raw", call_id=f"c{self.seq + 1}", tool="lookup", args={}
        )
        return self.chain(event)

    def chain(self, event: Event) -> tuple[Any, ...]:
        """``event``'s row, chained after the last one (encoded and hashed as the ledger's)."""
        self.seq += 1
        r = make_record(event, self.seq, self.prev)
        self.prev = r.hash
        return (r.seq, r.type, r.run_id, r.call_id, r.tool, r.ts, r.payload, r.prev, r.hash)


def connect(path: str, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """A raw connection on a new file with the ledger's schema and meta (a ledger that
    ``SQLiteLedger`` opens), WAL + FULL."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=check_same_thread)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.executemany(
        "INSERT INTO meta (name, value) VALUES (?, ?)",
        [("format", _FORMAT), ("schema_version", str(SCHEMA_VERSION)), ("keyed", "0")],
    )
    conn.execute(_PUT_HEAD, (0, "", _head_mac(0, "", None)))
    return conn


def ledger_commit(
    conn: sqlite3.Connection, rows: list[tuple[Any, ...]], mac: str | None = None
) -> None:
    """The statements our writer runs per commit (tail known): BEGIN IMMEDIATE, PRAGMA
    data_version, the insert, the head update, COMMIT. ``mac``: the head's MAC (None:
    the last hash stands in for it, not computed)."""
    execute = conn.execute
    execute("BEGIN IMMEDIATE")
    execute("PRAGMA data_version").fetchone()
    conn.executemany(_INSERT, rows)
    last = rows[-1]
    execute(_UPDATE_HEAD, (last[0], last[8], last[8] if mac is None else mac))
    execute("COMMIT")


class Threaded:
    """The best hand-written threaded writer: a thread owning the connection, one round
    trip per commit (``SimpleQueue.put``, then ``call_soon_threadsafe`` back), running
    the ledger's statements (or none: the round trip alone)."""

    def __init__(self, path: str | None, *, mark: bool = False) -> None:
        self.conn = connect(path, check_same_thread=False) if path is not None else None
        # mark: after each commit, what DESIGN's SQLite ledger promises before the
        # commit's appends return (README, "the mark"): the head's MAC, and the mark
        # file moved forward under its lock (flock, pread, pwrite of one record, unlock).
        self.mark_fd = os.open(f"{path}-mark", os.O_RDWR | os.O_CREAT, 0o600) if mark else None
        self.known = b""
        self.rows = Rows()
        self.staged: list[tuple[asyncio.Future[None], list[Event]]] = []
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            if type(item) is list:
                # A group (``stage``): every call's events chained here, one commit, one
                # hop back for all of them.
                futures = [future for future, _ in item]
                try:
                    rows = [self.rows.chain(e) for _, events in item for e in events]
                    self._commit(rows)
                except BaseException as exc:  # the benchmark fails rather than hangs
                    futures[0].get_loop().call_soon_threadsafe(_settle, futures, exc)
                    continue
                futures[0].get_loop().call_soon_threadsafe(_settle, futures)
                continue
            future, rows, events = item
            try:
                if events is not None:
                    rows = [self.rows.chain(e) for e in events]  # in the thread, as ours
                self._commit(rows)
            except BaseException as exc:
                future.get_loop().call_soon_threadsafe(future.set_exception, exc)
                continue
            future.get_loop().call_soon_threadsafe(future.set_result, None)

    def _commit(self, rows: list[tuple[Any, ...]]) -> None:
        conn, fd = self.conn, self.mark_fd
        if conn is None:
            return
        if fd is None:
            ledger_commit(conn, rows)
            return
        # With the mark, in its least form: the head's MAC computed (once, for the head
        # and the mark), then the mark moved under its lock: flock, pread, pwrite, unlock.
        seq, hash_ = rows[-1][0], rows[-1][8]
        mac = _head_mac(seq, hash_, None)
        ledger_commit(conn, rows, mac)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            if os.pread(fd, 257, 0) != self.known:
                raise AssertionError("nobody else writes this mark")
            record = b"agent-adapter-mark 1 %d %b %b" % (seq, hash_.encode(), mac.encode())
            self.known = record.ljust(255) + b"\n"
            os.pwrite(fd, self.known, 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def commit_events(self, events: list[Event]) -> asyncio.Future[None]:
        """One commit of ``events``, encoded and chained in the thread (as the ledger's
        writer does); the future is settled once it committed."""
        future = asyncio.get_running_loop().create_future()
        self.queue.put((future, None, events))
        return future

    def stage(self, events: list[Event]) -> asyncio.Future[None]:
        """``commit_events`` through the least group commit: what is staged in one loop
        iteration goes to the thread together and is committed in one transaction."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.staged.append((future, events))
        if len(self.staged) == 1:
            loop.call_soon(self._kick)
        return future

    def _kick(self) -> None:
        staged, self.staged = self.staged, []
        self.queue.put(staged)

    async def commit(self, count: int = 1) -> None:
        """One commit of ``count`` rows (each encoded and chained, as the ledger's)."""
        future = asyncio.get_running_loop().create_future()
        self.queue.put((future, [self.rows.next() for _ in range(count)], None))
        await future

    async def write_ahead(self) -> None:
        """The rows of a write-ahead call: requested, validated and started in one
        commit, its outcome in a second."""
        await self.commit(3)
        await self.commit(1)

    async def outcome(self) -> None:
        """The four rows of an ``"outcome"`` call, in one commit."""
        await self.commit(4)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.conn is not None:
            self.conn.close()
        if self.mark_fd is not None:
            os.close(self.mark_fd)


def _settle(futures: list[asyncio.Future[None]], error: BaseException | None = None) -> None:
    for future in futures:
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
