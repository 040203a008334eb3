"""Checks of what the executor and the registry are built with, run once at construction.

A wrong option found here is one ``ToolUsageError`` that says what to pass. Found later, it
is worse: a path given as the ledger fails at the first call with an AttributeError, a
function given as the approval port makes every call denied (the port "fails", which
denies: fail closed), a hook without hook methods is silently never called.
"""

from __future__ import annotations

import difflib
import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import ToolUsageError
from ..ledger import Ledger
from ._limits import RunLimits

__all__ = [
    "BRIDGES",
    "register_target",
    "check_approval",
    "check_clock",
    "check_guards",
    "check_hooks",
    "check_ledger",
    "check_limits",
    "check_targets",
]

#: The bundled bridges a tool can name in ``Registry.tool(targets=...)`` (DESIGN.md,
#: "Bridges"); a bridge outside this package adds its name with ``register_target``.
BRIDGES: tuple[str, ...] = ("langgraph", "mcp", "openai_agents", "pydantic_ai", "temporal")
_targets: list[str] = list(BRIDGES)
_TARGET_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-.")


def register_target(name: str) -> str:
    """Let tools name ``name`` in ``Registry.tool(targets=[...])``; returns ``name``.

    A bridge calls it once, at import (registering a name again is harmless). Names are
    lower-case letters, digits, ``_``, ``-`` and ``.``; any name not registered is still
    refused, with a suggestion, so that a typo never exports a tool to nobody.
    """
    if not isinstance(name, str) or not name or not set(name) <= _TARGET_CHARS:
        raise ToolUsageError(
            f"a target name is lower-case letters, digits, '_', '-' or '.', not {name!r}"
        )
    if name not in _targets:
        _targets.append(name)
    return name


_HOOK_METHODS = ("before_tool", "after_tool", "on_event", "around_body")


def _kind(value: Any) -> str:
    """How a message names what was passed: its type, or a class given uncalled."""
    if isinstance(value, type):
        return f"the class {value.__name__} itself (call it: {value.__name__}(...))"
    if inspect.isfunction(value) or inspect.ismethod(value):
        return f"the function {getattr(value, '__qualname__', value.__name__)}"
    return type(value).__name__


def _items(label: str, value: Any, example: str) -> tuple[Any, ...]:
    """``value`` as a tuple of items; one object instead of a list is refused."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ToolUsageError(f"{label} must be a list, not {_kind(value)}; e.g. {example}")
    return tuple(value)


def check_ledger(ledger: Any) -> None:
    """Refuse a ``ledger`` that is not a Ledger object (a path, a class, anything else)."""
    if ledger is None or (isinstance(ledger, Ledger) and not isinstance(ledger, type)):
        return
    message = f"ledger must be a Ledger (MemoryLedger(), SQLiteLedger(path)), not {_kind(ledger)}"
    if isinstance(ledger, str | os.PathLike):
        message += f"; for a file use SQLiteLedger({os.fspath(ledger)!r})"
    raise ToolUsageError(message)


def check_approval(approval: Any) -> None:
    """Refuse an ``approval`` that has no ``decide`` method (a bare function, a bool)."""
    if approval is None or (
        callable(getattr(approval, "decide", None)) and not isinstance(approval, type)
    ):
        return
    message = (
        "approval must be an ApprovalPort (CallbackApproval(fn), DeferredApproval(ledger)), "
        f"not {_kind(approval)}"
    )
    if callable(approval) and not isinstance(approval, type):
        message += "; to decide with a function, pass approval=CallbackApproval(fn)"
    raise ToolUsageError(message)


def check_limits(limits: Any) -> None:
    """Refuse ``limits`` that are not a RunLimits (a dict of them, a number)."""
    if limits is None or isinstance(limits, RunLimits):
        return
    example = "RunLimits(max_calls=20, max_calls_per_tool={'refund': 1})"
    if isinstance(limits, Mapping) and limits and set(limits) <= set(RunLimits.__struct_fields__):
        example = "RunLimits(" + ", ".join(f"{k}={v!r}" for k, v in limits.items()) + ")"
    raise ToolUsageError(f"limits must be a RunLimits, not {_kind(limits)}; e.g. limits={example}")


def check_clock(clock: Any) -> None:
    """Refuse a ``clock`` that cannot be called (a time given instead of a clock)."""
    if clock is None or callable(clock):
        return
    raise ToolUsageError(
        f"clock must be a function returning seconds (like time.time), not {_kind(clock)}"
    )


def check_seconds(name: str, value: Any, *, positive: bool) -> float:
    """``value`` as a float number of seconds; refuse a bool, a non-number, NaN, infinity,
    a negative number, or (``positive``) zero."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (0 <= value < float("inf"))
        or (positive and value == 0)
    ):
        least = "more than 0" if positive else "0 or more"
        raise ToolUsageError(f"{name} must be a number of seconds, {least}, not {value!r}")
    return float(value)


def check_hooks(hooks: Any) -> tuple[Any, ...]:
    """The hooks as a tuple; refuse one that has none of the hook methods, or a
    non-callable one, since the executor would never call it."""
    items = _items("hooks", hooks, "hooks=[StructlogHook()]")
    for i, hook in enumerate(items):
        # hasattr, as the executor composes its hook chains: what it finds, it calls.
        present = [name for name in _HOOK_METHODS if hasattr(hook, name)]
        if isinstance(hook, type):
            raise ToolUsageError(f"hooks[{i}] is {_kind(hook)}")
        if not present:
            raise ToolUsageError(
                f"hooks[{i}] ({_kind(hook)}) is not a hook: a hook is an object with any of "
                "before_tool(call), after_tool(call, outcome), on_event(event), "
                "around_body(call, next); a function "
                "that may stop a call is a guard (guards=[fn])"
            )
        for name in present:
            if not callable(getattr(hook, name)):
                raise ToolUsageError(f"hooks[{i}].{name} is not callable")
    return items


def _takes(fn: Callable[..., Any], count: int) -> bool | None:
    """Whether ``fn`` can be called with ``count`` positional arguments (None: unknown)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: not checked
        return None
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


def check_guards(label: str, guards: Any, *, output: bool) -> tuple[Callable[..., Any], ...]:
    """The guards as a tuple; refuse one that is not callable, or that cannot take what it
    is called with: ``(call)`` for an input guard, ``(call, result)`` for an output guard
    (an output guard in the input list would otherwise block every call: fail closed)."""
    items = _items(label, guards, "guards=[check]")
    count, other = (2, 1) if output else (1, 2)
    for i, guard in enumerate(items):
        if not callable(guard):
            raise ToolUsageError(f"{label}[{i}] must be callable, not {_kind(guard)}")
        if _takes(guard, count) is False:
            name = getattr(guard, "__qualname__", type(guard).__name__)
            expected = "(call, result)" if output else "(call)"
            if _takes(guard, other):
                kind, where = ("an input", "guards") if output else ("an output", "output_guards")
                raise ToolUsageError(
                    f"{label}[{i}] ({name}) does not take {expected}; it takes what {kind} "
                    f"guard takes: pass it in {where}"
                )
            raise ToolUsageError(f"{label}[{i}] ({name}) must take {expected}")
    return items


def check_targets(tool: str, targets: Any) -> tuple[str, ...] | None:
    """The targets as a tuple (None: every bridge); refuse names that are not bridges."""
    if targets is None:
        return None
    if isinstance(targets, str):
        raise ToolUsageError(
            f"tool {tool}: targets must be a list of bridge names, e.g. targets=[{targets!r}]"
        )
    names = _items(f"tool {tool}: targets", targets, "targets=['openai_agents']")
    for target in names:
        if target not in _targets:
            close = difflib.get_close_matches(str(target), _targets, n=1, cutoff=0.5)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            raise ToolUsageError(
                f"tool {tool}: unknown target {target!r}{guess}; the bridges are "
                f"{', '.join(_targets)} (a bridge outside this package registers its "
                "name with agent_adapter.engine.register_target)"
            )
    return names
