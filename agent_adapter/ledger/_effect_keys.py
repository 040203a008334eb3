"""What becomes of an effect key: the one rule the executor and the audit both fold by.

An effect key is claimed (``effect.claimed``) by one call before its body runs. What the
key is afterwards follows from that call's outcome alone, or from an operator's
``effect.resolved``:

- ``committed``: the body ran and returned (``call.succeeded``), or an output guard
  refused what it returned (``call.blocked`` after the claim: the body did run);
- ``free``: the tool said it did nothing (``call.failed`` with ``error_kind``
  ``tool-error``) or the body never ran (``call.failed`` with ``ran`` false);
- ``ambiguous``: anything else once the body may have started (``call.timed_out``,
  ``call.cancelled``, ``call.failed`` with ``tool-failed``, ...), and a claim with no
  outcome at all (the process died, or the call is still running): the effect may or
  may not have happened, and only ``effect.resolved`` settles it.

A claim names its holder and a lease (``lease_until``, renewed by ``effect.renewed``
while the body runs). Before its outcome, a claim whose lease is live is *in flight*
(the holder is alive: "retry later", never "resolve it"), one whose lease has expired
is ambiguous (the holder died). The lease is written in the holder's clock and read in
the reader's: ``lease_live`` grants ``margin_s`` beyond it for skew between hosts' clocks
and a renewal delayed by a busy holder, so a reader whose clock runs ahead by less than
the margin never takes a live holder for a dead one. A claim with no lease (an older
version's) is ambiguous once replayed, as before.

The executor's projection (``engine/_state.py``) and ``replay`` (``_audit.py``) both call
these functions, so the key an executor refuses as ambiguous is exactly the key the
audit reports, and one that an operator resolved is reported by neither.
"""

from __future__ import annotations

import time

from ._events import CallAmbiguous, CallBlocked, CallFailed, CallSucceeded, EffectResolved, Event

__all__ = [
    "AMBIGUOUS",
    "COMMITTED",
    "DEFAULT_LEASE_S",
    "DEFAULT_SKEW_MARGIN_S",
    "FREE",
    "IN_FLIGHT",
    "lease_live",
    "lease_text",
    "redecided",
    "status_after_outcome",
    "status_after_resolve",
]

COMMITTED = "committed"
FREE = "free"
AMBIGUOUS = "ambiguous"
IN_FLIGHT = "in flight"

#: How long a claim's lease lasts; the holder renews it every third of that.
DEFAULT_LEASE_S = 30.0
#: How far past ``lease_until`` (the holder's clock) a reader still takes the holder
#: for alive: the clock skew between hosts (NTP keeps it far below) plus a late renewal.
DEFAULT_SKEW_MARGIN_S = 5.0


def lease_text(lease_until: float) -> str:
    """``lease_until`` as UTC clock time, for messages."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(lease_until))


def lease_live(lease_until: float, now: float, margin_s: float = DEFAULT_SKEW_MARGIN_S) -> bool:
    """True while a lease ending at ``lease_until`` (holder's clock) is live at ``now``
    (reader's clock), ``margin_s`` of skew granted; a claim without a lease (0) has none."""
    return lease_until > 0.0 and now < lease_until + margin_s


# A tuple, not a union: this is checked for every outcome of a call with an effect key.
_BODY_RAN = (CallSucceeded, CallBlocked)


def status_after_outcome(outcome: Event) -> str:
    """The key's status after ``outcome``, the outcome of the call that claimed it."""
    if isinstance(outcome, _BODY_RAN):
        return COMMITTED
    if isinstance(outcome, CallFailed) and (outcome.error_kind == "tool-error" or not outcome.ran):
        return FREE
    return AMBIGUOUS


def redecided(outcome: Event) -> bool:
    """True for an outcome that is not final for its call id: an in-flight refusal
    (``call.ambiguous`` with ``in_flight``: the holder was alive, "retry later").

    It is the outcome of that attempt only: the same (run_id, call_id) asked again
    decides again, as a new attempt that opens with its own ``call.requested`` and ends
    with its own outcome (in flight again, a duplicate once the holder committed,
    ambiguous once it is dead). So every ``call.requested`` still has exactly one
    outcome, and a call's final outcome is its last attempt's. Ledgers written before
    this rule hold such a refusal as a last outcome: they read and audit as before.
    """
    return type(outcome) is CallAmbiguous and outcome.in_flight


def status_after_resolve(event: EffectResolved) -> str:
    """The key's status after an operator's ``effect.resolved``: ``failed`` frees it,
    any other outcome (``committed``) commits it."""
    return FREE if event.outcome == "failed" else COMMITTED
