"""``replay(events) -> Audit``: what ran, with which arguments, approved by whom.

The audit is a fold over the events alone; it reports the invariant violations a
reviewer must see: a call that ran with a digest no approval covered, a started call
with no outcome (ambiguous), two outcomes for one call, and a broken chain.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ._chain import Verification
from ._events import (
    ApprovalGranted,
    ApprovalRejected,
    ApprovalRequested,
    CallRequested,
    CallStarted,
    CallValidated,
    Event,
)

__all__ = ["ApprovalRecord", "Audit", "CallRecord", "Problem", "replay"]


class ApprovalRecord(msgspec.Struct, kw_only=True):
    """One approval decision in a call's timeline."""

    approved: bool
    reviewer: str
    source: str
    digest: str
    reason: str = ""
    edited: bool = False


class CallRecord(msgspec.Struct, kw_only=True):
    """One call (run_id, call_id): its timeline, digests, approvals and outcome."""

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
    events: list[Event] = []

    @property
    def started(self) -> bool:
        """True when the body was about to run (``call.started`` recorded)."""
        return self.ran_digest is not None


class Problem(msgspec.Struct, frozen=True, kw_only=True):
    """One violation: ``kind`` is ``unapproved``, ``ambiguous``, ``incomplete``,
    ``multiple-outcomes``, ``broken-chain`` or ``malformed`` (a record that did not fit
    its type: read with the fields it names at their defaults)."""

    kind: str
    message: str
    run_id: str = ""
    call_id: str = ""
    seq: int | None = None


class Audit(msgspec.Struct, kw_only=True):
    """The audit of a ledger: per-call records in first-seen order, and the chain check."""

    calls: dict[tuple[str, str], CallRecord]
    chain: Verification | None = None
    events: int = 0
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
            if record.outcome is None:
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


def replay(events: Iterable[Event], verification: Verification | None = None) -> Audit:
    """Fold ``events`` (in seq order) into an ``Audit``.

    Pass ``await ledger.verify()`` as ``verification`` to include the stored-bytes check;
    without it, the seq and ``prev`` links of the events themselves are checked (a
    deleted or reordered event is found, an altered payload needs ``verify()``).
    """
    calls: dict[tuple[str, str], CallRecord] = {}
    malformed: list[Event] = []
    count = 0
    expected_seq = 1
    prev = ""
    link_problem: Verification | None = None
    for event in events:
        count += 1
        if link_problem is None and event.seq:
            if event.seq != expected_seq:
                link_problem = Verification(
                    ok=False,
                    checked=count - 1,
                    first_bad_seq=min(event.seq, expected_seq),
                    reason=f"seq {expected_seq} is missing (found {event.seq})",
                )
            elif event.prev != prev:
                link_problem = Verification(
                    ok=False,
                    checked=count - 1,
                    first_bad_seq=event.seq,
                    reason=f"seq {event.seq} does not link to the previous hash",
                )
            expected_seq = event.seq + 1
            prev = event.hash
        if event.malformed:
            malformed.append(event)
        if not event.call_id:
            continue
        key = (event.run_id, event.call_id)
        record = calls.get(key)
        if record is None:
            record = calls[key] = CallRecord(
                run_id=event.run_id, call_id=event.call_id, tool=event.tool, events=[]
            )
        record.events.append(event)
        if isinstance(event, CallValidated):
            record.digest = event.digest
        elif isinstance(event, ApprovalRequested):
            record.approval_requested = True
        elif isinstance(event, ApprovalGranted):
            record.approvals.append(
                ApprovalRecord(
                    approved=True,
                    reviewer=event.reviewer,
                    source=event.source,
                    digest=event.digest,
                    reason=event.reason,
                    edited=event.edited,
                )
            )
        elif isinstance(event, ApprovalRejected):
            record.approvals.append(
                ApprovalRecord(
                    approved=False,
                    reviewer=event.reviewer,
                    source=event.source,
                    digest=event.digest,
                    reason=event.reason,
                )
            )
        elif isinstance(event, CallStarted):
            record.ran_digest = event.digest
        elif event.is_outcome:
            record.outcomes += 1
            if record.outcome is None:
                record.outcome = event.type
                record.duration_ms = getattr(event, "duration_ms", None)
    chain = verification if verification is not None else link_problem
    if chain is None:
        chain = Verification(ok=True, checked=count)
    return Audit(calls=calls, chain=chain, events=count, malformed=malformed)
