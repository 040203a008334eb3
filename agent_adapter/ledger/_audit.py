"""``replay(events) -> Audit``: what ran, with which arguments, approved by whom.

The audit is a fold over the events alone; it reports the invariant violations a
reviewer must see: a call that ran with a digest no approval covered, an effect key left
ambiguous and not resolved (a call that timed out, was cancelled or failed with
``tool-failed`` after its body started, or that started and never finished), a started
call with no outcome, two outcomes for one call, and a broken chain. Which outcome
commits, frees or leaves a key ambiguous is the rule of ``_effect_keys``, the one the
executor's projection folds by.

Without a store's ``verify()`` result, ``replay`` checks the chain itself: each event's
hash is recomputed from its canonical bytes (the event re-encoded with ``seq``,
``prev`` and ``hash`` at their defaults, as ``make_record`` encoded it), see
``check_chain``. Two kinds of event cannot be re-encoded to the bytes that were stored:
an ``UnknownEvent`` (a type written by a newer version) and an event with fields this
version does not know (they are dropped on decoding). The first is not checked and the
chain is reported as "cannot be checked"; the second does not match its hash and is
reported as such, its reason naming that possibility. Neither is ever reported as ok,
and neither raises: ``Ledger.verify()`` and an exported file keep the stored bytes and
check them exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import cast

import msgspec

from ._chain import Verification, check_chain
from ._effect_keys import (
    AMBIGUOUS,
    DEFAULT_SKEW_MARGIN_S,
    lease_live,
    lease_text,
    redecided,
    status_after_outcome,
    status_after_resolve,
)
from ._events import (
    _ALL,
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    CallCancelled,
    CallExchanged,
    CallRequested,
    CallStarted,
    CallValidated,
    EffectClaimed,
    EffectRenewed,
    EffectResolved,
    Event,
    UnknownEvent,
    _encoder,
    _Outcome,
)

# The outcome classes (exactly one per call): ``_Outcome``'s subclasses.
_OUTCOME_CLASSES: frozenset[type] = frozenset(c for c in _ALL if issubclass(c, _Outcome))

__all__ = [
    "ApprovalRecord",
    "Audit",
    "CallRecord",
    "EffectRecord",
    "EffectResolution",
    "Problem",
    "replay",
]


class ApprovalRecord(msgspec.Struct, kw_only=True):
    """One approval decision in a call's timeline."""

    approved: bool
    reviewer: str
    source: str
    digest: str
    reason: str = ""
    edited: bool = False


class EffectResolution(msgspec.Struct, frozen=True, kw_only=True):
    """An operator's ``effect.resolved``: ``outcome`` ``"committed"`` or ``"failed"``."""

    outcome: str
    reviewer: str
    reason: str = ""
    seq: int | None = None
    #: the reviewer overrode a live holder's lease (``force``)
    forced: bool = False
    #: made while the claim had no outcome and its holder's lease was live (as the
    #: resolution's clock saw it, with the skew margin): the body may have been running
    in_flight: bool = False


class EffectRecord(msgspec.Struct, kw_only=True):
    """One claim of an effect key (``effect.claimed``) and what became of the key.

    ``status`` is ``"committed"``, ``"free"`` or ``"ambiguous"`` (the rule of
    ``_effect_keys``: from the claiming call's ``outcome``, None while it has none, or
    from ``resolution`` once an operator resolved it). ``seq`` is the claim's.
    """

    key: str
    run_id: str
    call_id: str
    tool: str = ""
    digest: str = ""
    seq: int | None = None
    outcome: str | None = None
    status: str = AMBIGUOUS
    resolution: EffectResolution | None = None
    #: the claim's holder (executor id, pid, host) and its lease, as last renewed before
    #: the call's outcome (0: a claim with no lease, an older version's)
    holder: str = ""
    pid: int = 0
    host: str = ""
    lease_until: float = 0.0


class CallRecord(msgspec.Struct, kw_only=True):
    """One call (run_id, call_id): its timeline, digests, approvals, effect and outcome."""

    run_id: str
    call_id: str
    tool: str = ""
    digest: str = ""
    ran_digest: str | None = None
    approval_requested: bool = False
    approvals: list[ApprovalRecord] = []
    outcome: str | None = None
    outcomes: int = 0
    duration_ms: float | None = None
    #: the effect key this call claimed, and what became of it
    effect: EffectRecord | None = None
    events: list[Event] = []
    #: attempts of the call id: each after the first follows an in-flight refusal, which
    #: is not final (``redecided``); ``outcome``, ``outcomes`` and ``ran_digest`` are the
    #: last attempt's, and each attempt has its own ``call.requested`` and one outcome
    attempts: int = 1
    #: the outcome so far is an in-flight refusal: a later attempt may follow it
    redecidable: bool = False
    #: the call's ``call.exchanged`` records (what its body asked and was answered
    #: mid-call), in ledger order; those outside its started body are also in
    #: ``misplaced`` (their seq and where they stand), which ``problems()`` reports
    exchanges: list[CallExchanged] = []
    misplaced: list[tuple[int, str]] = []

    @property
    def started(self) -> bool:
        """True when the body was about to run (``call.started`` recorded)."""
        return self.ran_digest is not None


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """One violation: ``kind`` is ``unapproved``, ``ambiguous``, ``resolved-in-flight`` (an
    effect key resolved while its holder's lease was live: its body may have been
    running, and a key resolved as failed may have run twice), ``incomplete``,
    ``multiple-outcomes``, ``broken-chain``, ``malformed`` (a record that did not fit
    its type: read with the fields it names at their defaults) or ``misplaced-exchange``
    (a ``call.exchanged`` of a call that had not started, or after its outcome: no
    running body can have written it); ``key`` names the effect key of an ambiguous one
    that has a key."""

    kind: str
    message: str
    run_id: str = ""
    call_id: str = ""
    seq: int | None = None
    key: str = ""


class Audit(msgspec.Struct, kw_only=True):
    """The audit of a ledger: per-call records in first-seen order, the effect keys, and
    the chain check.

    ``effects`` holds each key's latest claim (keys in first-claimed order); an earlier
    claim of a key stays on its call's record (``CallRecord.effect``). ``chain`` is None
    only when the events carry no hashes at all (built by hand, or their chain fields
    cleared): nothing was there to check.
    """

    calls: dict[tuple[str, str], CallRecord]
    chain: Verification | None = None
    events: int = 0
    effects: dict[str, EffectRecord] = {}
    #: records that did not fit their type (``Event.malformed`` set), in seq order
    malformed: list[Event] = []

    def call(self, run_id: str, call_id: str) -> CallRecord:
        """The record of one call (KeyError when the ledger has none)."""
        return self.calls[(run_id, call_id)]

    def problems(self) -> list[Problem]:
        """Every violation found, chain first, then calls in ledger order."""
        found: list[Problem] = []
        if self.chain is not None and not self.chain.ok:
            found.append(
                Problem(
                    kind="broken-chain",
                    message=self.chain.reason or "the hash chain does not verify",
                    seq=self.chain.first_bad_seq,
                )
            )
        for event in self.malformed:
            found.append(
                Problem(
                    kind="malformed",
                    message=f"seq {event.seq} ({event.type}) is malformed: {event.malformed}",
                    run_id=event.run_id,
                    call_id=event.call_id,
                    seq=event.seq,
                )
            )
        for record in self.calls.values():
            ids = {"run_id": record.run_id, "call_id": record.call_id}
            first = record.events[0].seq if record.events else None
            if record.outcomes > 1:
                found.append(
                    Problem(
                        kind="multiple-outcomes",
                        message=f"call {record.call_id} has {record.outcomes} outcomes",
                        seq=first,
                        **ids,
                    )
                )
            effect = record.effect
            resolution = effect.resolution if effect is not None else None
            if effect is not None and resolution is not None and resolution.in_flight:
                how = "forced past the lease by" if resolution.forced else "by"
                found.append(
                    Problem(
                        kind="resolved-in-flight",
                        message=(
                            f"effect {effect.key}: resolved as {resolution.outcome} {how} "
                            f"{resolution.reviewer} (seq {resolution.seq}) while call "
                            f"{record.call_id} ({record.tool}) was in flight: its holder, "
                            f"executor {effect.holder} (pid {effect.pid} on host "
                            f"{effect.host}), held a lease until {lease_text(effect.lease_until)}; "
                            "its body may have been running, so the effect may have run "
                            "twice"
                        ),
                        seq=resolution.seq,
                        key=effect.key,
                        **ids,
                    )
                )
            if effect is not None and effect.status == AMBIGUOUS:
                # Every ambiguous key that nobody resolved, whatever left it so: only
                # effect.resolved settles it (a resolved key has another status).
                found.append(
                    Problem(
                        kind="ambiguous",
                        message=(
                            f"effect {effect.key}: call {record.call_id} ({record.tool}) "
                            f"{_why_ambiguous(record)}; the effect may or may not have "
                            "happened, and no effect.resolved says which"
                        ),
                        seq=first,
                        key=effect.key,
                        **ids,
                    )
                )
            elif record.outcome is None and effect is None:
                # (A call whose key was resolved has its answer: not missing an outcome.)
                if record.started:
                    found.append(
                        Problem(
                            kind="ambiguous",
                            message=(
                                f"call {record.call_id} ({record.tool}) started and has no "
                                "outcome: its effect may or may not have happened"
                            ),
                            seq=first,
                            **ids,
                        )
                    )
                elif any(isinstance(e, CallRequested) for e in record.events):
                    found.append(
                        Problem(
                            kind="incomplete",
                            message=f"call {record.call_id} ({record.tool}) has no outcome",
                            seq=first,
                            **ids,
                        )
                    )
            for seq, where in record.misplaced:
                found.append(
                    Problem(
                        kind="misplaced-exchange",
                        message=(
                            f"seq {seq}: call.exchanged {_of(record)} {where}; only a "
                            "running body records what it exchanged"
                        ),
                        seq=seq,
                        **ids,
                    )
                )
            if record.started and record.approval_requested:
                granted = {a.digest for a in record.approvals if a.approved}
                if record.ran_digest not in granted:
                    found.append(
                        Problem(
                            kind="unapproved",
                            message=(
                                f"call {record.call_id} ({record.tool}) ran with digest "
                                f"{record.ran_digest} that no approval covered"
                            ),
                            seq=first,
                            **ids,
                        )
                    )
        return found


def _of(record: CallRecord) -> str:
    """Whose event it is, for a message: the call, or the tool alone for no call id."""
    if record.call_id:
        return f"of call {record.call_id} ({record.tool})"
    return f"of tool {record.tool}" if record.tool else "of no tool"


def _why_ambiguous(record: CallRecord) -> str:
    """What left the call's key ambiguous, for the problem's message."""
    outcome = record.effect.outcome if record.effect is not None else None
    if outcome is None:
        if record.started and record.effect is not None and record.effect.lease_until:
            # The audit has no clock of its own: it names the lease, and the reader's
            # clock tells which (`effects list` does: in flight, or ambiguous).
            effect = record.effect
            return (
                "started and has no outcome: its holder, executor "
                f"{effect.holder} (pid {effect.pid} on host {effect.host}), leased the key "
                f"until {lease_text(effect.lease_until)}; until then it may still be "
                "running, after that its process died"
            )
        if record.started:
            return "started and has no outcome (the process died, or it is still running)"
        return "claimed it and has no outcome"
    if outcome == "call.timed_out":
        return "timed out after its body started"
    if outcome == "call.cancelled":
        started = any(isinstance(e, CallCancelled) and e.started for e in record.events)
        return "was cancelled after its body started" if started else "was cancelled"
    if outcome == "call.failed":
        return "failed with tool-failed (an exception, not a ToolError) after its body started"
    return f"ended with {outcome}"


def _links(events: list[Event]) -> Iterator[tuple[int, str, str, bytes | None]]:
    """Each event's chain fields and canonical bytes: encoded with ``seq``, ``prev`` and
    ``hash`` at their defaults, as ``make_record`` encoded it for the store."""
    encode = _encoder.encode
    for event in events:
        seq, prev, stored = event.seq, event.prev, event.hash
        if isinstance(event, UnknownEvent) or event.malformed:
            # A newer version's type, or a record read with fields at their defaults:
            # its stored bytes cannot be rebuilt from what decoding kept, so its hash is
            # not checked (and the chain is not ok).
            yield seq, prev, stored, None
            continue
        event.seq, event.prev, event.hash = 0, "", ""
        try:
            payload: bytes | None = encode(event)
        except Exception:
            # Only an event built by hand can hold what does not encode (a lone
            # surrogate, say): not checkable, never a crash.
            payload = None
        finally:
            event.seq, event.prev, event.hash = seq, prev, stored
        yield seq, prev, stored, payload


def replay(
    events: Iterable[Event],
    verification: Verification | None = None,
    *,
    key: bytes | None = None,
) -> Audit:
    """Fold ``events`` (in seq order) into an ``Audit``.

    Pass ``await ledger.verify()`` as ``verification`` to use the store's check of its
    stored bytes (``key`` is then not used). Without it, the chain is checked from the
    events themselves: seq continuity, each ``prev`` link, and each hash recomputed from
    the event's canonical bytes (``check_chain``), so an altered event is found without
    the store. A keyed (HMAC) chain is checked with ``key``; without it (or with another
    key) the audit says the chain cannot be checked, never ok and never altered. See
    the module docstring for events this version cannot re-encode byte for byte.
    """
    events = events if isinstance(events, list) else list(events)
    if verification is not None:
        chain: Verification | None = verification
    elif not events:
        chain = Verification(ok=True, checked=0)
    elif any(e.hash for e in events):
        chain = check_chain(_links(events), key, reencoded=True)
    else:
        chain = None  # no hashes at all: nothing to check, and nothing claimed checked
    calls: dict[tuple[str, str], CallRecord] = {}
    effects: dict[str, EffectRecord] = {}
    malformed: list[Event] = []
    outcomes = _OUTCOME_CLASSES
    for event in events:
        if event.malformed:
            malformed.append(event)
        # Dispatch on the exact class (events are decoded into their own classes): an
        # identity test per branch, not an isinstance walk, since this runs per event.
        cls = type(event)
        if cls is EffectResolved:
            _resolve(effects, cast(EffectResolved, event))
        if not event.call_id and cls is not CallExchanged:
            continue  # (an exchange that names no call is a problem: recorded below)
        call_key = (event.run_id, event.call_id)
        record = calls.get(call_key)
        if record is None:
            record = calls[call_key] = CallRecord(
                run_id=event.run_id, call_id=event.call_id, tool=event.tool, events=[]
            )
        record.events.append(event)
        if cls is CallRequested and record.redecidable:
            # The same call asked again after an in-flight refusal: a new attempt, which
            # ends with its own outcome (every call.requested has exactly one).
            record.attempts += 1
            record.redecidable = False
            record.outcome = None
            record.outcomes = 0
            record.duration_ms = None
            record.ran_digest = None
        elif cls is CallValidated:
            record.digest = cast(CallValidated, event).digest
        elif cls is CallStarted:
            record.ran_digest = cast(CallStarted, event).digest
        elif cls is CallExchanged:
            if not record.exchanges:
                record.exchanges = []
            record.exchanges.append(cast(CallExchanged, event))
            # Only a body that runs records one: after call.started, before the outcome.
            if not event.call_id:
                where = "names no call"
            elif record.outcome is not None:
                where = f"comes after its outcome ({record.outcome})"
            elif record.ran_digest is None:
                where = "comes before the call started (no call.started precedes it)"
            else:
                where = ""
            if where:
                if not record.misplaced:
                    record.misplaced = []
                record.misplaced.append((event.seq, where))
        elif cls in outcomes:
            record.outcomes += 1
            record.redecidable = record.outcome is None and redecided(event)
            if record.outcome is None:
                record.outcome = tag = event.type
                record.duration_ms = cast(_Outcome, event).duration_ms
                ended = record.effect
                if ended is not None and ended.outcome is None:
                    ended.outcome = tag
                    if ended.resolution is None:
                        # An operator's answer stands over an outcome heard after it,
                        # as in the projection (a resolved key ignores late outcomes).
                        ended.status = status_after_outcome(event)
        elif cls is EffectClaimed:
            claimed = cast(EffectClaimed, event)
            claim = EffectRecord(
                key=claimed.key,
                run_id=claimed.run_id,
                call_id=claimed.call_id,
                tool=claimed.tool,
                digest=claimed.digest,
                seq=claimed.seq or None,
                holder=claimed.holder,
                pid=claimed.pid,
                host=claimed.host,
                lease_until=claimed.lease_until,
            )
            record.effect = effects[claimed.key] = claim
        elif cls is EffectRenewed:
            renewed = cast(EffectRenewed, event)
            held = record.effect
            # The lease of this call's own claim, until its outcome (as the projection).
            if held is not None and held.key == renewed.key and held.outcome is None:
                held.lease_until = max(held.lease_until, renewed.lease_until)
        elif cls is ApprovalRequested:
            record.approval_requested = True
        elif cls is ApprovalGranted:
            granted = cast(ApprovalGranted, event)
            record.approvals.append(
                ApprovalRecord(
                    approved=True,
                    reviewer=granted.reviewer,
                    source=granted.source,
                    digest=granted.digest,
                    reason=granted.reason,
                    edited=granted.edited,
                )
            )
        elif cls is ApprovalRejected:
            rejected = cast(ApprovalRejected, event)
            record.approvals.append(
                ApprovalRecord(
                    approved=False,
                    reviewer=rejected.reviewer,
                    source=rejected.source,
                    digest=rejected.digest,
                    reason=rejected.reason,
                )
            )
    return Audit(calls=calls, chain=chain, events=len(events), effects=effects, malformed=malformed)


def _resolve(effects: dict[str, EffectRecord], event: EffectResolved) -> None:
    """Fold ``effect.resolved`` into the key's latest claim (or a record of its own)."""
    claim = effects.get(event.key)
    if claim is None:
        # Resolved with no claim in these events (a partial log): still shown.
        claim = effects[event.key] = EffectRecord(
            key=event.key, run_id=event.run_id, call_id=event.call_id, tool=event.tool
        )
    # In flight by the rule the resolver itself applies (lease_live, with the margin):
    # no outcome yet and the holder's lease live at the resolution's time.
    in_flight = claim.outcome is None and lease_live(
        claim.lease_until, event.ts, DEFAULT_SKEW_MARGIN_S
    )
    claim.resolution = EffectResolution(
        outcome=event.outcome,
        reviewer=event.reviewer,
        reason=event.reason,
        seq=event.seq or None,
        forced=event.forced,
        in_flight=in_flight,
    )
    claim.status = status_after_resolve(event)
