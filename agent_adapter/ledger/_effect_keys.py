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

The executor's projection (``engine/_state.py``) and ``replay`` (``_audit.py``) both call
these functions, so the key an executor refuses as ambiguous is exactly the key the
audit reports, and one that an operator resolved is reported by neither.
"""

from __future__ import annotations

from ._events import CallBlocked, CallFailed, CallSucceeded, EffectResolved, Event

__all__ = ["AMBIGUOUS", "COMMITTED", "FREE", "status_after_outcome", "status_after_resolve"]

COMMITTED = "committed"
FREE = "free"
AMBIGUOUS = "ambiguous"

# A tuple, not a union: this is checked for every outcome of a call with an effect key.
_BODY_RAN = (CallSucceeded, CallBlocked)


def status_after_outcome(outcome: Event) -> str:
    """The key's status after ``outcome``, the outcome of the call that claimed it."""
    if isinstance(outcome, _BODY_RAN):
        return COMMITTED
    if isinstance(outcome, CallFailed) and (outcome.error_kind == "tool-error" or not outcome.ran):
        return FREE
    return AMBIGUOUS


def status_after_resolve(event: EffectResolved) -> str:
    """The key's status after an operator's ``effect.resolved``: ``failed`` frees it,
    any other outcome (``committed``) commits it."""
    return FREE if event.outcome == "failed" else COMMITTED
