"""The executor's projections: everything it remembers, folded from ledger events.

The live pipeline and replay call the same ``apply(event)``: a new executor opened on a
ledger folds the same events through the same code and so behaves exactly as the old
one would have. The live pipeline applies an event as soon as it builds it (before the
append returns), so that a check and the claim it leads to happen with no await in
between: two concurrent calls can never both pass an effect or limit check.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from ..ledger import (
    AMBIGUOUS,
    COMMITTED,
    FREE,
    IN_FLIGHT,
    ApprovalRequested,
    CallAmbiguous,
    CallBlocked,
    CallCached,
    CallCancelled,
    CallDenied,
    CallDuplicate,
    CallFailed,
    CallInvalid,
    CallLimited,
    CallPending,
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallTimedOut,
    CallValidated,
    EffectClaimed,
    EffectRenewed,
    EffectResolved,
    Event,
    lease_live,
    status_after_outcome,
    status_after_resolve,
)
from ._holders import holder_gone

__all__ = ["EffectState", "Projection"]

_encode = msgspec.json.encode
_decode = msgspec.json.decode

CallKey = tuple[str, str]


class EffectState(msgspec.Struct, kw_only=True):
    """An effect key's state: ``claimed`` (no outcome yet), ``committed`` or ``ambiguous``,
    and the claim's holder (executor id, pid, host) and lease (0: a claim with none)."""

    status: str
    run_id: str
    call_id: str
    digest: str
    holder: str = ""
    pid: int = 0
    host: str = ""
    lease_until: float = 0.0
    pid_start: int = 0

    def status_at(self, now: float, margin_s: float, host: str = "") -> str:
        """The key's status as a reader at ``now`` (its clock) on ``host`` sees it: a
        claim with no outcome is ``in flight`` while its lease is live and ``ambiguous``
        once it has expired (the holder died), or at once when the holder ran on
        ``host`` and its process is gone (``holder_gone``: a crash and a restart on one
        host need not wait out the lease); ``claimed`` for one with no lease that this
        process heard of live (an older writer's: it may still be running)."""
        status = self.status
        if status != "claimed" or not self.lease_until:
            return status
        if not lease_live(self.lease_until, now, margin_s):
            return AMBIGUOUS
        if host and self.host == host and holder_gone(self.pid, self.pid_start):
            return AMBIGUOUS
        return IN_FLIGHT

    def holder_text(self) -> str:
        """``executor X (pid P on host H)``, for messages."""
        return f"executor {self.holder or '?'} (pid {self.pid} on host {self.host or '?'})"


class _InFlight(msgspec.Struct, kw_only=True):
    tool: str
    validated: str | None = None
    counted: bool = False
    started: bool = False
    run_digest: str = ""
    effect_key: str | None = None


# Outcome classes by exact type: these checks run for every call's outcome, and an
# isinstance against a tuple of Struct classes costs ~100 ns per class that is not the
# event's own (event classes are final: each is a tag of the ledger's tagged union).
_COUNT_ALWAYS = frozenset((CallCached, CallDuplicate, CallAmbiguous))
_COUNT_IF_MARKED = frozenset((CallCancelled, CallFailed))
#: event class -> its tag (``Event.type`` is a property: ~120 ns a read)
_TAG_OF: dict[type, str] = {}


class _History:
    """What a warm run holds in the index: its finished calls, and when it last finished
    one (a tick, for least-recently-finished order)."""

    __slots__ = ("calls", "last")

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.last = 0


class Projection:
    """Folds events into: the outcome index, in-flight calls, run counters, cache, effects.

    ``remember`` bounds the run history (the outcome index and the run counters, which
    grow with every call): past that many finished calls, the least recently finished
    runs with nothing in flight go *cold*: their history leaves memory, and events of a
    cold run change only the live state (in-flight calls, effect keys, cache). The
    executor recalls a cold run from the ledger (``recall``) before it serves a call of it.
    """

    def __init__(self, remember: int | None = None) -> None:
        self.remember = remember
        #: warm runs, least recently finished first
        self.history: dict[str, _History] = {}
        self._tick = 0
        #: runs whose history is only in the ledger
        self.cold: set[str] = set()
        #: cold run -> how many of its calls had an outcome when it went cold: a recall
        #: that reads fewer read through a damaged index (``Executor._recall`` checks)
        self.cold_calls: dict[str, int] = {}
        #: cold run -> the calls another process finished in it since it went cold (a
        #: recall must read those and ``cold_calls`` more: they are not counted there)
        self.cold_extra: dict[str, set[str]] = {}
        #: runs whose outcome is applied but not yet written: never sent cold before it
        #: is (a recall would read a ledger without it and run the call again)
        self.pinned: dict[str, int] = {}
        self._remembered = 0
        # The next eviction pass runs once more than this many calls are remembered.
        self._evict_at: float = remember if remember is not None else math.inf
        #: (run_id, call_id) -> (digest of the call as requested, outcome tag; IN_FLIGHT
        #: for an in-flight refusal, which is not final: the call id decides again)
        self.outcomes: dict[CallKey, tuple[str | None, str]] = {}
        self.inflight: dict[CallKey, _InFlight] = {}
        self.run_calls: dict[str, int] = {}
        self.tool_calls: dict[tuple[str, str], int] = {}
        #: (tool, digest) -> (JSON of the value, ts of the success)
        self.cache: dict[tuple[str, str], tuple[bytes, float]] = {}
        # tool -> (digest, ts) of each store, oldest first: what _expire removes
        self._stored: dict[str, deque[tuple[str, float]]] = {}
        #: tool -> TTL seconds, for the tools whose successes are cached
        self.cache_ttl: dict[str, float] = {}
        self.effects: dict[str, EffectState] = {}
        self._handlers: dict[type, Callable[[Any], None]] = {
            CallRequested: self._requested,
            CallValidated: self._validated,
            ApprovalRequested: self._counting,
            EffectClaimed: self._claimed,
            EffectRenewed: self._renewed,
            EffectResolved: self._resolved,
            CallStarted: self._started,
        }
        for outcome in (
            CallSucceeded,
            CallFailed,
            CallTimedOut,
            CallCancelled,
            CallInvalid,
            CallBlocked,
            CallLimited,
            CallDenied,
            CallPending,
            CallCached,
            CallDuplicate,
            CallAmbiguous,
        ):
            self._handlers[outcome] = self._outcome

    def apply(self, event: Event) -> None:
        """Fold one event (events the projection does not track are ignored)."""
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def apply_live(self, event: Event) -> None:
        """Fold ``event`` into the live state only (in-flight calls, effect keys, cache),
        not into its run's history (outcome index, counts): as for a cold run."""
        run_id = event.run_id
        if run_id in self.cold:
            self.apply(event)
            return
        self.cold.add(run_id)
        try:
            self.apply(event)
        finally:
            self.cold.discard(run_id)

    def settle(self) -> None:
        """After replay: keys claimed by calls that never finished become ambiguous.

        No call of the replaying process is running, so a claim without an outcome means
        the body may have run when the old process died, or that another process is
        running it now: a claim with a lease stays ``claimed`` (``status_at`` tells in
        flight from expired by its lease, at each look); one without a lease (an older
        version's) has no holder to tell by, and is ambiguous as it always was. A call
        that died before
        ``call.started`` never ran its body: it is forgotten as in flight, so that a
        repeat of its ids runs the pipeline again (step 0 refuses only started calls).
        """
        for state in self.effects.values():
            if state.status == "claimed" and not state.lease_until:
                state.status = AMBIGUOUS  # a claim with no outcome (_effect_keys)
        self.inflight = {key: call for key, call in self.inflight.items() if call.started}

    # -- handlers ------------------------------------------------------------------------

    def _requested(self, event: CallRequested) -> None:
        self.inflight[(event.run_id, event.call_id)] = _InFlight(tool=event.tool)

    def _validated(self, event: CallValidated) -> None:
        call = self.inflight.get((event.run_id, event.call_id))
        if call is not None:
            call.validated = event.digest

    def count(self, run_id: str, call: _InFlight) -> None:
        """Count the call against its run, once (it passed the limit check)."""
        if not call.counted:
            call.counted = True
            if run_id in self.cold:
                return  # counted in the ledger; a recall reads it from there
            self.run_calls[run_id] = self.run_calls.get(run_id, 0) + 1
            key = (run_id, call.tool)
            self.tool_calls[key] = self.tool_calls.get(key, 0) + 1

    def _counting(self, event: Event) -> None:
        # The first event after the limit check (approval, cache hit, effect claim, start,
        # or an effect refusal) is where a call counts.
        call = self.inflight.get((event.run_id, event.call_id))
        if call is not None:
            self.count(event.run_id, call)

    def _claimed(self, event: EffectClaimed) -> None:
        self.effects[event.key] = EffectState(
            status="claimed",
            run_id=event.run_id,
            call_id=event.call_id,
            digest=event.digest,
            holder=event.holder,
            pid=event.pid,
            host=event.host,
            lease_until=event.lease_until,
            pid_start=event.pid_start,
        )
        call = self._tracked(event)
        self.count(event.run_id, call)
        call.effect_key = event.key

    def _tracked(self, event: Event) -> _InFlight:
        # A claim or start whose call is not in flight here: another process's call that
        # had not started when this executor replayed (settle forgot it). Tracked again
        # so that its outcome settles its key.
        key = (event.run_id, event.call_id)
        call = self.inflight.get(key)
        if call is None:
            call = self.inflight[key] = _InFlight(tool=event.tool)
        return call

    def _renewed(self, event: EffectRenewed) -> None:
        # Only the claim of the renewing call, still without an outcome: a renewal that
        # reaches us after its call's outcome, or after the key was claimed anew, says
        # nothing about the current claim.
        state = self.effects.get(event.key)
        if (
            state is not None
            and state.status == "claimed"
            and (state.run_id, state.call_id) == (event.run_id, event.call_id)
        ):
            state.lease_until = max(state.lease_until, event.lease_until)

    def _resolved(self, event: EffectResolved) -> None:
        # The rule is the ledger's (status_after_resolve), shared with the audit.
        if status_after_resolve(event) == FREE:
            self.effects.pop(event.key, None)
        else:
            state = self.effects.get(event.key)
            if state is not None:
                state.status = COMMITTED
            else:
                self.effects[event.key] = EffectState(
                    status=COMMITTED, run_id=event.run_id, call_id=event.call_id, digest=""
                )

    def _started(self, event: CallStarted) -> None:
        call = self.inflight.get((event.run_id, event.call_id))
        if call is None:
            call = self._tracked(event)
        self.count(event.run_id, call)
        call.started = True
        call.run_digest = event.digest

    def _outcome(self, event: Event) -> None:
        key = (event.run_id, event.call_id)
        call = self.inflight.pop(key, None)
        if call is None:
            return
        cls = type(event)
        tag = _TAG_OF.get(cls)
        if tag is None:
            tag = _TAG_OF[cls] = event.type
        if cls is CallAmbiguous and event.in_flight:  # type: ignore[attr-defined]
            tag = IN_FLIGHT  # not final: a repeat of the call id decides again (redecided)
        if cls in _COUNT_ALWAYS or (
            cls in _COUNT_IF_MARKED and event.counted  # type: ignore[attr-defined]
        ):
            self.count(event.run_id, call)
        run_id = key[0]
        if run_id not in self.cold:
            outcomes = self.outcomes
            new = key not in outcomes  # (a second outcome would be counted twice)
            outcomes[key] = (call.validated, tag)
            if new:
                # _finished inlined (this runs for every call): an append and a tick.
                history = self.history.get(run_id)
                if history is None:
                    history = self.history[run_id] = _History()
                history.calls.append(key[1])
                self._tick = tick = self._tick + 1
                history.last = tick
                self._remembered += 1
                if self._remembered > self._evict_at:
                    self._evict(keep=run_id)
        elif run_id in self.cold_calls:
            self.cold_extra.setdefault(run_id, set()).add(key[1])
        if call.effect_key is not None:
            self._settle_effect(call.effect_key, event)
        if isinstance(event, CallSucceeded) and not event.redacted:
            ttl = self.cache_ttl.get(call.tool)
            if ttl is not None:
                # Stored encoded: every hit decodes its own copy, so a caller that
                # mutates its value cannot change what later hits (or replay) return.
                self.cache[(call.tool, call.run_digest)] = (_encode(event.result), event.ts)
                queue = self._stored.get(call.tool)
                if queue is None:
                    queue = self._stored[call.tool] = deque()
                queue.append((call.run_digest, event.ts))
                self._expire(event.ts)

    def _expire(self, now: float) -> None:
        # Each tool's stores, oldest first (one TTL per tool: also the order they expire
        # in). Expired entries leave as new ones are stored, so a long-lived executor
        # holds about TTL x (new arguments per second) entries per tool, not one per value
        # ever cached. An entry stored again since keeps its newer time and stays.
        cache, ttls = self.cache, self.cache_ttl
        for tool, queue in self._stored.items():
            ttl = ttls.get(tool, 0.0)
            while queue and now - queue[0][1] >= ttl:
                digest, ts = queue.popleft()
                entry = cache.get((tool, digest))
                if entry is not None and entry[1] == ts:
                    del cache[(tool, digest)]

    # -- the bounded run history ---------------------------------------------------------

    def _evict(self, keep: str) -> None:
        """Send idle runs cold, least recently finished first, down to 90% of the bound.

        Never ``keep`` (the run just finished or recalled), never a run with a call in
        flight or an outcome on its way to the ledger. When those hold the rest, the next
        pass waits for another tenth of the bound: a pass sorts every warm run, and must
        not run on every call.
        """
        remember = self.remember
        assert remember is not None
        target = int(remember * 0.9)
        busy = {run_id for run_id, _ in self.inflight}
        gone: set[str] = set()
        for run_id, history in sorted(self.history.items(), key=lambda item: item[1].last):
            if self._remembered <= target:
                break
            if run_id == keep or run_id in busy or run_id in self.pinned:
                continue
            del self.history[run_id]
            for call_id in history.calls:
                self.outcomes.pop((run_id, call_id), None)
            self._remembered -= len(history.calls)
            self.cold_calls[run_id] = len(history.calls)
            self.cold_extra.pop(run_id, None)
            self.run_calls.pop(run_id, None)
            gone.add(run_id)
        # Runs counted but with no finished call here (one that died before it started,
        # say) have no history entry: their counts go cold with the rest.
        for run_id in [r for r in self.run_calls if r not in self.history]:
            if run_id != keep and run_id not in busy and run_id not in self.pinned:
                del self.run_calls[run_id]
                gone.add(run_id)
        if gone:
            for key in [k for k in self.tool_calls if k[0] in gone]:
                del self.tool_calls[key]
            self.cold |= gone
        self._evict_at = max(remember, self._remembered + remember // 10)

    def pin(self, run_id: str) -> None:
        """Keep ``run_id`` warm until ``unpin``: its outcome is on its way to the ledger."""
        self.pinned[run_id] = self.pinned.get(run_id, 0) + 1

    def unpin(self, run_id: str) -> None:
        left = self.pinned.get(run_id, 1) - 1
        if left:
            self.pinned[run_id] = left
        else:
            self.pinned.pop(run_id, None)

    def recall(self, run_id: str, events: list[Event]) -> None:
        """Make a cold run warm again from all its events in the ledger, in seq order."""
        if run_id not in self.cold:
            return
        past = Projection()
        for event in events:
            past.apply(event)
        self.cold.discard(run_id)
        self.cold_calls.pop(run_id, None)
        self.cold_extra.pop(run_id, None)
        for key, call in past.inflight.items():
            # Started with no outcome in the ledger (an outcome whose write failed, or a
            # process that died): in flight, as replay leaves it, so a repeat is refused.
            if call.started and key not in self.inflight:
                self.inflight[key] = call
        history = self.history[run_id] = _History()
        self._tick += 1
        history.last = self._tick
        for (run, call_id), outcome in past.outcomes.items():
            self.outcomes[(run, call_id)] = outcome
            history.calls.append(call_id)
        self._remembered += len(history.calls)
        if run_id in past.run_calls:
            self.run_calls[run_id] = past.run_calls[run_id]
        for (run, tool), n in past.tool_calls.items():
            self.tool_calls[(run, tool)] = n
        if self._remembered > self._evict_at:
            self._evict(keep=run_id)

    def _settle_effect(self, key: str, event: Event) -> None:
        state = self.effects.get(key)
        if state is None or state.status == COMMITTED:
            return
        if state.status == AMBIGUOUS and (state.run_id, state.call_id) != (
            event.run_id,
            event.call_id,
        ):
            return
        # (An ambiguous key's own claimer reporting its outcome: a call another process
        # was still running when this executor replayed and settled it as ambiguous.)
        # Which outcome commits, frees or leaves the key ambiguous is the ledger's rule
        # (status_after_outcome), the one the audit reports by: they cannot disagree.
        status = status_after_outcome(event)
        if status == FREE:
            del self.effects[key]
        else:
            state.status = status

    # -- queries -------------------------------------------------------------------------

    def cached(self, tool: str, digest: str, now: float) -> tuple[bool, Any]:
        """(hit, value) for a cached success younger than its TTL (by event time)."""
        entry = self.cache.get((tool, digest))
        if entry is None:
            return False, None
        blob, ts = entry
        if now - ts >= self.cache_ttl.get(tool, 0.0):
            del self.cache[(tool, digest)]
            return False, None
        return True, _decode(blob)
