"""What a tool's calls need from the pipeline, decided once per spec (and executor).

A spec's options and the executor's hooks, guards, limits and port cannot change, so
which steps a call of the spec runs is decided here, once, into a ``Plan`` that
``run_spec`` looks up by the spec; only what can change between calls (a subscriber that
came, code that saw the arguments) is asked per call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._pipeline import Pipeline
from ._spec import ToolSpec

__all__ = ["Plan", "plan_of"]

#: Plans kept per executor before the table starts over (specs made on the fly, one per
#: call, must not grow it without bound).
_MAX_PLANS = 4096


class Plan:
    """The steps a call of one spec runs on one executor (frozen once built)."""

    __slots__ = (
        "cache",
        "checks",
        "confirm",
        "confirm_exposes",
        "direct",
        "durable_start",
        "effect",
        "exposed",
        "exposes",
        "guards",
        "output_guards",
        "straight",
        "timeout",
    )

    def __init__(self, pipe: Pipeline, spec: ToolSpec) -> None:
        #: input guards, the spec's then the executor's (step 4)
        self.guards: tuple[Callable[..., Any], ...] = spec.guards + pipe.guards
        #: output guards, the spec's then the executor's (step 10)
        self.output_guards: tuple[Callable[..., Any], ...] = spec.output_guards + pipe.output_guards
        #: a before_tool hook or an input guard is shown the validated arguments
        self.exposes = bool(pipe.before or self.guards)
        #: steps 3-5 have something to do (hooks, guards, limits)
        self.checks = self.exposes or pipe.limits is not None
        #: step 6: False, True or the spec's rule
        self.confirm = spec.confirm
        #: step 6 shows the arguments to user code (a confirm rule, or a port)
        self.confirm_exposes = spec.confirm is not False and (
            spec.confirm is not True or pipe.approval is not None
        )
        #: user code sees the arguments before the body: they are checked against their
        #: digest after steps 3-6
        self.exposed = self.exposes or self.confirm_exposes
        #: step 7: the cache's TTL (None: no cache)
        self.cache = spec.cache
        #: step 8: the tool has an effect key to claim
        self.effect = spec.effect is not None
        #: step 9: the pre-body events are committed before the body (not with the outcome)
        self.durable_start = spec.durability != "outcome"
        #: step 9: the body's deadline (None: none)
        self.timeout = spec.timeout
        #: the body is awaited as it is: an async function, no deadline, no around_body
        self.direct = spec.is_async and spec.timeout is None and pipe.around is None
        #: nothing but started, body and outcome: no cache, effect, timeout, output
        #: guard, after_tool or around_body hook, and an async body (no worker thread)
        self.straight = (
            spec.cache is None
            and spec.effect is None
            and spec.timeout is None
            and spec.is_async
            and not self.output_guards
            and not pipe.always_full
        )


def plan_of(pipe: Pipeline, plans: dict[ToolSpec, Plan], spec: ToolSpec) -> Plan:
    """The plan of ``spec`` on ``pipe``'s executor, built at its first call and kept in
    ``plans`` (keyed by the spec object: a ToolSpec hashes by identity)."""
    if len(plans) >= _MAX_PLANS:
        plans.clear()
    plan = plans[spec] = Plan(pipe, spec)
    if spec.cache is not None:
        # A spec outside the registry (a bridge's own) caches under its name too.
        pipe.state.cache_ttl.setdefault(spec.name, spec.cache)
    return plan
