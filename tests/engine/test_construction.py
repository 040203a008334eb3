"""Mistakes in what the executor, the registry and the SQLite ledger are built with are
refused at construction (or, for a file, at open), with a message that says what to pass."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import pytest

from agent_adapter import CallbackApproval, Executor, Registry, RunLimits
from agent_adapter.errors import (
    AdapterWarning,
    LedgerError,
    ToolUsageError,
    UnannotatedToolWarning,
)
from agent_adapter.ledger import MemoryLedger, SQLiteLedger


def _message(build: Any) -> str:
    with pytest.raises(ToolUsageError) as caught:
        build()
    return str(caught.value)


def check_call(call: Any) -> None:
    """An input guard: takes the call."""


def check_result(call: Any, result: Any) -> None:
    """An output guard: takes the call and the result."""


class Recorder:
    """A hook that records what it sees."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def before_tool(self, call: Any) -> None:
        self.seen.append(f"before {call.tool}")

    def on_event(self, event: Any) -> None:
        self.seen.append(event.type)


def _registry() -> Registry:
    registry = Registry()

    @registry.tool
    async def ping(n: int) -> int:
        return n

    return registry


@pytest.mark.parametrize(
    ("ledger", "message"),
    [
        (
            "x.db",
            "ledger must be a Ledger (MemoryLedger(), SQLiteLedger(path)), not str; "
            "for a file use SQLiteLedger('x.db')",
        ),
        (
            Path("data/x.db"),
            "ledger must be a Ledger (MemoryLedger(), SQLiteLedger(path)), not PosixPath; "
            "for a file use SQLiteLedger('data/x.db')",
        ),
        (
            MemoryLedger,
            "ledger must be a Ledger (MemoryLedger(), SQLiteLedger(path)), not the class "
            "MemoryLedger itself (call it: MemoryLedger(...))",
        ),
        (42, "ledger must be a Ledger (MemoryLedger(), SQLiteLedger(path)), not int"),
    ],
)
def test_a_ledger_that_is_not_a_ledger_is_refused(ledger: Any, message: str) -> None:
    """A path, a class or anything else as ``ledger`` is one ToolUsageError naming what to pass
    (it used to be an AttributeError about append_many at the first call)."""
    assert _message(lambda: Executor(ledger=ledger)) == message


async def test_executor_open_refuses_a_path_before_opening_anything() -> None:
    """``Executor.open(ledger="x.db")`` is refused the same way."""
    with pytest.raises(ToolUsageError) as caught:
        await Executor.open(ledger="x.db")
    assert str(caught.value).endswith("for a file use SQLiteLedger('x.db')")


def test_a_ledger_passed_as_the_registry_is_refused() -> None:
    """``Executor(MemoryLedger())`` (the ledger by position) says to pass it by name."""
    assert _message(lambda: Executor(MemoryLedger())) == (
        "registry must be a Registry, not MemoryLedger; a ledger is passed by name: "
        "Executor(registry, ledger=...)"
    )


@pytest.mark.parametrize(
    ("approval", "message"),
    [
        (
            lambda request: True,
            "approval must be an ApprovalPort (CallbackApproval(fn), DeferredApproval(ledger)), "
            "not the function "
            "<lambda>; to decide with a function, pass approval=CallbackApproval(fn)",
        ),
        (
            CallbackApproval,
            "approval must be an ApprovalPort (CallbackApproval(fn), DeferredApproval(ledger)), "
            "not the class CallbackApproval itself (call it: CallbackApproval(...))",
        ),
        (
            True,
            "approval must be an ApprovalPort (CallbackApproval(fn), DeferredApproval(ledger)), "
            "not bool",
        ),
    ],
)
def test_an_approval_that_is_not_a_port_is_refused(approval: Any, message: str) -> None:
    """A bare function as ``approval`` is refused, with the port that wraps it (it used to
    make every call that needs approval denied: the "port" failed, which denies)."""
    assert _message(lambda: Executor(approval=approval)) == message


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (
            {"max_calls": 5, "max_calls_per_tool": {"refund": 1}},
            "limits must be a RunLimits, not dict; e.g. "
            "limits=RunLimits(max_calls=5, max_calls_per_tool={'refund': 1})",
        ),
        (
            5,
            "limits must be a RunLimits, not int; e.g. "
            "limits=RunLimits(max_calls=20, max_calls_per_tool={'refund': 1})",
        ),
    ],
)
def test_limits_that_are_not_run_limits_are_refused(limits: Any, message: str) -> None:
    """A dict (or a number) as ``limits`` is refused; a dict of its fields is shown as the
    RunLimits to write instead."""
    assert _message(lambda: Executor(limits=limits)) == message


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"max_calls": "5"},
            "RunLimits.max_calls must be a number of calls (an int, 0 or more) or None, not '5'",
        ),
        (
            {"max_calls": True},
            "RunLimits.max_calls must be a number of calls (an int, 0 or more) or None, not True",
        ),
        (
            {"max_calls_per_tool": -1},
            "RunLimits.max_calls_per_tool must be a number of calls (an int, 0 or more) or "
            "None, not -1",
        ),
        (
            {"max_calls_per_tool": {"refund": 1.5}},
            "RunLimits.max_calls_per_tool['refund'] must be a number of calls (an int, 0 or "
            "more) or None, not 1.5",
        ),
        (
            {"max_calls_per_tool": {1: 1}},
            "RunLimits.max_calls_per_tool: tool names are text, not 1",
        ),
    ],
)
def test_run_limits_refuse_values_that_are_not_counts(fields: dict[str, Any], message: str) -> None:
    """RunLimits checks its fields when built (msgspec does not for a Struct built in Python)."""
    assert _message(lambda: RunLimits(**fields)) == message


def test_run_limits_keep_valid_values() -> None:
    """Counts, 0 included, and None are kept as given."""
    limits = RunLimits(max_calls=0, max_calls_per_tool={"refund": 2})
    assert (limits.max_calls, limits.per_tool("refund"), limits.per_tool("other")) == (0, 2, None)


def test_a_clock_that_is_not_callable_is_refused() -> None:
    """A time given instead of a clock is refused."""
    assert _message(lambda: Executor(clock=1_000.0)) == (
        "clock must be a function returning seconds (like time.time), not float"
    )


class NoneHook:
    """Has the name of a hook method, but nothing to call."""

    before_tool = None


@pytest.mark.parametrize(
    ("hooks", "message"),
    [
        (
            Recorder(),
            "hooks must be a list, not Recorder; e.g. hooks=[StructlogHook()]",
        ),
        (
            [check_call],
            "hooks[0] (the function check_call) is not a hook: a hook is an object with any of "
            "before_tool(call), after_tool(call, outcome), on_event(event), around_body(call, "
            "next); a function that may stop a call is a guard (guards=[fn])",
        ),
        (
            [Recorder],
            "hooks[0] is the class Recorder itself (call it: Recorder(...))",
        ),
        ([NoneHook()], "hooks[0].before_tool is not callable"),
    ],
)
def test_hooks_that_would_never_be_called_are_refused(hooks: Any, message: str) -> None:
    """One hook without a list, a function, a class or a hook method that is not callable."""
    assert _message(lambda: Executor(hooks=hooks)) == message


async def test_hooks_given_as_a_generator_are_all_used() -> None:
    """A generator of hooks is read once into a tuple: every hook method is composed (the
    executor used to iterate it once per method, so only the first method saw it)."""
    recorder = Recorder()
    executor = Executor(_registry(), hooks=(h for h in [recorder]))
    assert await executor.call("ping", {"n": 1}, run_id="r1", call_id="c1") == 1
    assert recorder.seen == [
        "before ping",  # (events reach on_event when they are written, after the hook)
        "call.requested",
        "call.validated",
        "call.started",
        "call.succeeded",
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"guards": check_call},
            "guards must be a list, not the function check_call; e.g. guards=[check]",
        ),
        (
            {"guards": [check_result]},
            "guards[0] (check_result) does not take (call); it takes what an output guard "
            "takes: pass it in output_guards",
        ),
        (
            {"output_guards": [check_call]},
            "output_guards[0] (check_call) does not take (call, result); it takes what an "
            "input guard takes: pass it in guards",
        ),
        ({"guards": ["no"]}, "guards[0] must be callable, not str"),
        ({"guards": [lambda: None]}, "guards[0] (<lambda>) must take (call)"),
    ],
)
def test_executor_guards_that_cannot_be_called_as_guards_are_refused(
    options: dict[str, Any], message: str
) -> None:
    """A guard that is not in a list, not callable, or takes the other kind's arguments."""
    assert _message(lambda: Executor(**options)) == message


def test_tool_guards_are_checked_the_same_way() -> None:
    """``Registry.tool(guards=...)`` refuses an output guard in its input guards."""
    registry = Registry()

    def register() -> None:
        @registry.tool(guards=[check_result])
        async def refund(order_id: str) -> str:
            return order_id

    assert _message(register) == (
        "tool refund: guards[0] (check_result) does not take (call); it takes what an "
        "output guard takes: pass it in output_guards"
    )
    assert "refund" not in registry


def test_valid_guards_of_every_shape_are_kept() -> None:
    """Functions, lambdas, callable objects and builtins without a signature are accepted."""

    class Guard:
        def __call__(self, call: Any, *rest: Any) -> None:
            pass

    guard = Guard()
    executor = Executor(guards=[check_call, guard, print], output_guards=[check_result, guard])
    assert (executor._guards, executor._output_guards) == (
        (check_call, guard, print),
        (check_result, guard),
    )


_REGISTER_HINT = (
    " (a bridge outside this package registers its name with agent_adapter.engine.register_target)"
)


@pytest.mark.parametrize(
    ("targets", "message"),
    [
        (
            ["openai"],
            "tool refund: unknown target 'openai' (did you mean 'openai_agents'?); the bridges "
            "are langgraph, mcp, openai_agents, pydantic_ai, temporal",
        ),
        (
            ["haystack"],
            "tool refund: unknown target 'haystack'; the bridges are langgraph, mcp, "
            "openai_agents, pydantic_ai, temporal",
        ),
        (
            "openai_agents",
            "tool refund: targets must be a list of bridge names, e.g. targets=['openai_agents']",
        ),
    ],
)
def test_unknown_targets_are_refused(targets: Any, message: str) -> None:
    """A target that names no bridge (or a bare string, which would be read letter by
    letter) is refused, and nothing is registered. The message lists the bundled bridges
    first (then any name registered in this process) and says how to register one."""
    registry = Registry()

    def register() -> None:
        @registry.tool(targets=targets)
        async def refund(order_id: str) -> str:
            return order_id

    got = _message(register)
    if isinstance(targets, list):
        # Names other tests registered in this process stand between the two parts.
        assert (got.startswith(message), got.endswith(_REGISTER_HINT), len(registry)) == (
            True,
            True,
            0,
        ), got
    else:
        assert (got, len(registry)) == (message, 0)


def test_registered_targets_are_accepted_and_typos_still_refused() -> None:
    """A name registered with register_target can be a tool's target; a near miss of it
    is refused with the registered name as the suggestion; a malformed name is refused."""
    from agent_adapter.engine import register_target

    assert register_target("test_bridge_x") == "test_bridge_x"
    register_target("test_bridge_x")  # again: harmless
    registry = Registry()

    @registry.tool(targets=["test_bridge_x"])
    async def lookup(order_id: str) -> str:
        return order_id

    def typo() -> None:
        @registry.tool(targets=["test_bridge_y"])
        async def other(order_id: str) -> str:
            return order_id

    with pytest.raises(ToolUsageError) as bad_name:
        register_target("Not A Name")
    assert (
        lookup.exported_to("test_bridge_x"),
        lookup.exported_to("mcp"),
        "(did you mean 'test_bridge_x'?)" in _message(typo),
        str(bad_name.value),
    ) == (
        True,
        False,
        True,
        "a target name is lower-case letters, digits, '_', '-' or '.', not 'Not A Name'",
    )


def test_known_targets_are_kept() -> None:
    """Each bridge's name is accepted; the tool is exported to those bridges only."""
    registry = Registry()

    @registry.tool(targets=["mcp", "temporal"])
    async def refund(order_id: str) -> str:
        return order_id

    exported = {name: refund.exported_to(name) for name in ("mcp", "openai_agents", "temporal")}
    assert (refund.targets, exported) == (
        ("mcp", "temporal"),
        {"mcp": True, "openai_agents": False, "temporal": True},
    )


def _register_unannotated(registry: Registry, bare: bool) -> int:
    """Register a tool with unannotated parameters; returns the decorator's line."""
    if bare:

        @registry.tool  # the warning's line (bare)
        async def add(a, b: int, c=1):  # type: ignore[no-untyped-def]
            return a + b + c

        return add_line_bare
    else:

        @registry.tool(description="adds")  # the warning's line (with options)
        async def add(a, b: int, c=1):  # type: ignore[no-untyped-def]
            return a + b + c

        return add_line_options


add_line_bare = _register_unannotated.__code__.co_firstlineno + 4
add_line_options = _register_unannotated.__code__.co_firstlineno + 11


@pytest.mark.parametrize("bare", [True, False])
def test_a_tool_without_annotations_warns_at_the_users_line(bare: bool) -> None:
    """Unannotated parameters are accepted, with an UnannotatedToolWarning (an AdapterWarning)
    pointing at the decorator, in both forms of ``@registry.tool``."""
    registry = Registry()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _register_unannotated(registry, bare)
    assert [(w.category, str(w.message), w.filename, w.lineno) for w in caught] == [
        (
            UnannotatedToolWarning,
            "tool add: parameter(s) 'a', 'c' have no type annotation, so any JSON value is "
            "accepted for them; annotate them (a: str, ...), with Any to accept anything",
            __file__,
            line,
        )
    ]
    assert (issubclass(UnannotatedToolWarning, AdapterWarning), "add" in registry) == (True, True)


def test_with_warnings_as_errors_an_unannotated_tool_is_not_registered() -> None:
    """Where warnings are errors, the warning is raised before the tool is registered."""
    registry = Registry()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UnannotatedToolWarning):
            _register_unannotated(registry, bare=True)
    assert len(registry) == 0


def test_a_ledger_in_a_missing_directory_says_so(tmp_path: Path) -> None:
    """Opening a ledger whose directory does not exist names the directory (SQLite says only
    "unable to open database file"), and creates nothing; read-only too."""
    path = tmp_path / "missing" / "dir" / "x.db"
    messages = []
    for readonly in (False, True):
        with pytest.raises(LedgerError) as caught:
            asyncio.run(SQLiteLedger(path, readonly=readonly).open())
        messages.append(str(caught.value))
    expected = (
        f"ledger {path}: the directory {path.parent} does not exist (a ledger file is created "
        "on first open, its directory is not)"
    )
    assert (messages, list(tmp_path.iterdir())) == ([expected, expected], [])


def test_a_ledger_under_a_file_says_it_is_not_a_directory(tmp_path: Path) -> None:
    """A path through a regular file says that part is not a directory."""
    (tmp_path / "notes.txt").write_text("hello")
    path = tmp_path / "notes.txt" / "x.db"
    with pytest.raises(LedgerError) as caught:
        asyncio.run(SQLiteLedger(path).open())
    assert (str(caught.value), (tmp_path / "notes.txt").read_text()) == (
        f"ledger {path}: the directory {path.parent} is not a directory (a ledger file is "
        "created on first open, its directory is not)",
        "hello",
    )
