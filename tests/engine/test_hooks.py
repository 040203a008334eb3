"""Hooks (before_tool, after_tool, on_event), the structlog hook, and executor.subscribe()."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog
from _helpers import (
    assert_one_outcome_each,
    every_call_has_one_outcome,  # noqa: F401 (a fixture)
    fields,
    recorded,
    timeline,
    types,
)
from structlog.testing import capture_logs

from agent_adapter import CallContext, Executor, Outcome, Registry
from agent_adapter.errors import (
    AdapterError,
    ApprovalDenied,
    GuardrailBlocked,
    ToolError,
)
from agent_adapter.hooks import StructlogHook
from agent_adapter.ledger import CallBlocked, HookFailed, MemoryLedger

pytestmark = pytest.mark.usefixtures("every_call_has_one_outcome")

CTX = CallContext(run_id="r1", call_id="c1")


def tools() -> tuple[Registry, Any]:
    registry = Registry()

    @registry.tool
    async def echo(text: str) -> str:
        if text == "fail":
            raise ToolError("refused")
        return text

    return registry, echo


async def test_before_tool_adapter_error_blocks_with_that_error(clock: Any) -> None:
    """A before_tool hook raising an AdapterError blocks the call; the caller gets that error."""
    registry, echo = tools()
    error = ApprovalDenied("policy says no")

    class Policy:
        name = "policy"

        async def before_tool(self, call: Any) -> None:
            raise error

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[Policy()], clock=clock)
    with pytest.raises(ApprovalDenied) as info:
        await executor.run_spec(echo, {"text": "hi"}, CTX)
    events = await recorded(ledger)
    assert info.value is error
    assert [e.type for e in events] == timeline("call.blocked")
    assert events[-1] == CallBlocked(
        seq=3,
        ts=1000.0,
        run_id="r1",
        call_id="c1",
        tool="echo",
        stage="hook",
        by="policy",
        reason="policy says no",
        error_kind="approval-denied",
    )


async def test_before_tool_other_error_is_guardrail_blocked(clock: Any) -> None:
    """Any other exception from before_tool becomes GuardrailBlocked, chained to it."""
    registry, echo = tools()
    bug = ValueError("bad state")

    class Checker:
        def before_tool(self, call: Any) -> None:
            raise bug

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[Checker()], clock=clock)
    with pytest.raises(GuardrailBlocked) as info:
        await executor.run_spec(echo, {"text": "hi"}, CTX)
    last = (await recorded(ledger))[-1]
    assert (str(info.value), info.value.__cause__) == (
        "before_tool hook Checker stopped the call: bad state",
        bug,
    )
    assert (last.type, last.by, last.reason, last.error_kind) == (
        "call.blocked",
        "Checker",
        "bad state",
        "guardrail-blocked",
    )


async def test_after_tool_sees_every_outcome_that_reached_the_body(clock: Any) -> None:
    """after_tool gets (call, Outcome) with the caller's own error, only for calls that ran."""
    registry = Registry()
    refusal = ToolError("refused")
    never = asyncio.Event()

    def hide(call: Any, result: Any) -> None:
        if result == "secret":
            raise GuardrailBlocked("hidden")

    @registry.tool(timeout=0.01, output_guards=[hide])
    async def echo(text: str) -> str:
        if text == "fail":
            raise refusal
        if text == "slow":
            await never.wait()
        return text

    seen: list[tuple[str, Outcome]] = []

    class Observer:
        async def after_tool(self, call: Any, outcome: Outcome) -> None:
            seen.append((call.ctx.call_id, outcome))

    executor = Executor(registry, hooks=[Observer()], clock=clock)
    raised: list[BaseException] = []
    for call_id, text in [("a", "hi"), ("b", "fail"), ("c", "slow"), ("d", "secret"), ("e", 1)]:
        try:
            await executor.run_spec(echo, {"text": text}, CallContext(run_id="r", call_id=call_id))
        except AdapterError as exc:
            raised.append(exc)
    assert [type(e).__name__ for e in raised] == [
        "ToolError",
        "ToolTimeout",
        "GuardrailBlocked",
        "ToolArgsInvalid",
    ]
    assert seen == [
        ("a", Outcome(kind="succeeded", value="hi")),
        ("b", Outcome(kind="failed", error=refusal)),
        ("c", Outcome(kind="timed_out", error=raised[1])),
        ("d", Outcome(kind="blocked", error=raised[2])),
    ]


async def test_failing_after_tool_is_recorded_and_changes_nothing(clock: Any) -> None:
    """An after_tool hook that raises is recorded as hook.failed; the value still returns."""
    registry, echo = tools()

    class Broken:
        name = "broken"

        def after_tool(self, call: Any, outcome: Any) -> None:
            raise RuntimeError("oops")

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[Broken()], clock=clock)
    assert await executor.run_spec(echo, {"text": "hi"}, CTX) == "hi"
    events = await recorded(ledger)
    assert [e.type for e in events] == [
        "call.requested",
        "call.validated",
        "call.started",
        "call.succeeded",
        "hook.failed",
    ]
    assert events[-1] == HookFailed(
        seq=5,
        ts=1000.0,
        run_id="r1",
        call_id="c1",
        tool="echo",
        hook="broken",
        stage="after_tool",
        error="RuntimeError: oops",
    )
    await assert_one_outcome_each(ledger)


async def test_on_event_sees_every_event_in_order(clock: Any) -> None:
    """on_event hooks get each appended event once, in ledger order, with seq set."""
    registry, echo = tools()
    seen: list[tuple[int, str]] = []

    class Watcher:
        async def on_event(self, event: Any) -> None:
            seen.append((event.seq, event.type))

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[Watcher()], clock=clock)
    await executor.run_spec(echo, {"text": "hi"}, CTX)
    await executor.run_spec(echo, {"text": "hi"}, CTX)  # a replayed repeat
    assert seen == [(e.seq, e.type) for e in await recorded(ledger)]
    assert [t for _, t in seen] == [
        "call.requested",
        "call.validated",
        "call.started",
        "call.succeeded",
        "call.replayed",
    ]


async def test_failing_on_event_is_recorded_once_per_event(clock: Any) -> None:
    """An on_event hook that raises gives hook.failed per event, never dispatched to itself."""
    registry, echo = tools()
    calls = []

    class Broken:
        def on_event(self, event: Any) -> None:
            calls.append(event.type)
            raise RuntimeError(f"cannot log {event.type}")

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[Broken()], clock=clock)
    assert await executor.run_spec(echo, {"text": "hi"}, CTX) == "hi"
    events = await recorded(ledger)
    assert calls == timeline("call.succeeded")
    assert [(e.type, getattr(e, "error", "")) for e in events] == [
        ("call.requested", ""),
        ("call.validated", ""),
        ("call.started", ""),
        ("hook.failed", "RuntimeError: cannot log call.requested"),
        ("hook.failed", "RuntimeError: cannot log call.validated"),
        ("hook.failed", "RuntimeError: cannot log call.started"),
        ("call.succeeded", ""),
        ("hook.failed", "RuntimeError: cannot log call.succeeded"),
    ]
    await assert_one_outcome_each(ledger)


async def test_subscribe_yields_appended_events(clock: Any) -> None:
    """subscribe() is registered at once and yields the appended events, including hook.failed."""
    registry, echo = tools()

    class Broken:
        def after_tool(self, call: Any, outcome: Any) -> None:
            raise RuntimeError("x")

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[Broken()], clock=clock)
    live = executor.subscribe()
    await executor.run_spec(echo, {"text": "hi"}, CTX)
    got = [fields(await anext(live)) for _ in range(5)]
    assert got == [fields(e) for e in await recorded(ledger)]
    await live.aclose()
    await executor.run_spec(echo, {"text": "again"}, CallContext(run_id="r1", call_id="c2"))
    assert (executor._subscribers, executor._observed) == ([], False)
    with pytest.raises(StopAsyncIteration):
        await anext(live)


# -- structlog -------------------------------------------------------------------------


async def test_structlog_hook_logs_every_event(clock: Any) -> None:
    """The structlog hook logs each event with its fields; refusals at warning level."""
    registry, echo = tools()
    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[StructlogHook()], clock=clock)
    with capture_logs() as logs:
        await executor.run_spec(echo, {"text": "hi"}, CTX)
        with pytest.raises(ToolError):
            await executor.run_spec(echo, {"text": "fail"}, CallContext(run_id="r1", call_id="c2"))
    common = {"ts": 1000.0, "run_id": "r1", "tool": "echo"}
    assert logs[:4] == [
        {
            "event": "call.requested",
            "log_level": "info",
            "seq": 1,
            "call_id": "c1",
            "args": {"text": "hi"},
            "metadata": {},
            **common,
        },
        {
            "event": "call.validated",
            "log_level": "info",
            "seq": 2,
            "call_id": "c1",
            "digest": (await recorded(ledger))[1].digest,
            **common,
        },
        {
            "event": "call.started",
            "log_level": "info",
            "seq": 3,
            "call_id": "c1",
            "digest": (await recorded(ledger))[1].digest,
            "effect_key": "",
            **common,
        },
        {
            "event": "call.succeeded",
            "log_level": "info",
            "seq": 4,
            "call_id": "c1",
            "duration_ms": 0.0,
            "result": "hi",
            "result_digest": "",
            "redacted": False,
            **common,
        },
    ]
    assert [(e["event"], e["log_level"]) for e in logs[4:]] == [
        ("call.requested", "info"),
        ("call.validated", "info"),
        ("call.started", "info"),
        ("call.failed", "warning"),
    ]


async def test_structlog_hook_never_configures_structlog(
    clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building and using the hook never calls structlog.configure (the host owns logging)."""
    configured = []
    monkeypatch.setattr(structlog, "configure", lambda *a, **k: configured.append(k))
    monkeypatch.setattr(structlog, "configure_once", lambda *a, **k: configured.append(k))
    lines: list[tuple[str, str]] = []

    class Logger:
        def info(self, event: str, **kw: Any) -> None:
            lines.append(("info", event))

        def warning(self, event: str, **kw: Any) -> None:
            lines.append(("warning", event))

    registry, echo = tools()
    executor = Executor(registry, hooks=[StructlogHook(), StructlogHook(Logger())], clock=clock)
    await executor.run_spec(echo, {"text": "hi"}, CTX)
    assert (configured, lines) == (
        [],
        [
            ("info", "call.requested"),
            ("info", "call.validated"),
            ("info", "call.started"),
            ("info", "call.succeeded"),
        ],
    )
    assert await types(executor.ledger) == timeline("call.succeeded")


async def test_port_records_reach_hooks_and_subscribers(clock: Any) -> None:
    """approval.pending and approval.consumed, written by a deferred port, are observed too."""
    from agent_adapter import DeferredApproval
    from agent_adapter.errors import ApprovalPending

    registry = Registry()

    @registry.tool(confirm=True)
    async def act() -> str:
        return "done"

    seen: list[str] = []

    class Watcher:
        def on_event(self, event: Any) -> None:
            seen.append(event.type)

    ledger = MemoryLedger()
    deferred = DeferredApproval(ledger, clock=clock)
    executor = Executor(registry, ledger=ledger, approval=deferred, hooks=[Watcher()], clock=clock)
    live = executor.subscribe()
    with pytest.raises(ApprovalPending) as info:
        await executor.call("act", {}, run_id="r", call_id="c1")
    await deferred.answer(info.value.request_id, approved=True, reviewer="x")
    assert await executor.call("act", {}, run_id="r", call_id="c2") == "done"
    streamed = [(await anext(live)).type for _ in range(len(seen))]
    await live.aclose()
    expected = [
        t for t in await types(ledger) if t != "approval.answered"
    ]  # answered is written by the reviewer, not by this executor's calls
    assert (seen, streamed) == (expected, expected)
    assert "approval.pending" in seen and "approval.consumed" in seen


async def test_arguments_changed_in_place_by_a_hook_are_refused(clock: Any) -> None:
    """A hook that edits call.args in place cannot run unapproved arguments: ToolUsageError."""
    from agent_adapter.errors import ToolUsageError

    registry = Registry()
    ran = []

    @registry.tool(confirm=True)
    async def pay(amount: int) -> int:
        ran.append(amount)
        return amount

    class Sneaky:
        def before_tool(self, call: Any) -> None:
            call.args["amount"] = 1_000_000

    from agent_adapter import Decision, digest

    ledger = MemoryLedger()
    executor = Executor(registry, ledger=ledger, hooks=[Sneaky()], clock=clock)
    approval = Decision(approved=True, reviewer="ui", digest=digest({"amount": 5}))
    with pytest.raises(ToolUsageError) as info:
        await executor.run_spec(
            pay, {"amount": 5}, CallContext(run_id="r", call_id="c", approval=approval)
        )
    assert str(info.value) == (
        "the arguments of pay were changed in place after validation (by a hook, guard or "
        "confirm rule); approvals, cache and effects bind to their digest"
    )
    assert (ran, await types(ledger)) == (
        [],
        [
            "call.requested",
            "call.validated",
            "approval.requested",
            "approval.granted",
            "call.failed",
        ],
    )


async def test_around_body_hooks_wrap_the_body_first_hook_outermost() -> None:
    """Hooks' around_body methods are composed once, the first hook outermost (as
    temporalio's interceptors): each runs the rest with next() and gets its value; an
    error of the body passes through them all and is the call's failure."""
    from agent_adapter.errors import ToolFailed
    from agent_adapter.ledger import MemoryLedger

    seen: list[str] = []

    class Around:
        def __init__(self, name: str) -> None:
            self.name = name

        async def around_body(self, call: Any, next: Any) -> Any:
            seen.append(f"{self.name} in {call.tool}")
            try:
                return await next()
            finally:
                seen.append(f"{self.name} out")

    registry = Registry()

    @registry.tool
    async def echo(n: int) -> int:
        """Returns n; fails for 0."""
        seen.append("body")
        if n == 0:
            raise ValueError("zero")
        return n

    executor = Executor(registry, ledger=MemoryLedger(), hooks=[Around("outer"), Around("inner")])
    assert await executor.call("echo", {"n": 3}) == 3
    with pytest.raises(ToolFailed, match="zero"):
        await executor.call("echo", {"n": 0})
    assert seen == ["outer in echo", "inner in echo", "body", "inner out", "outer out"] * 2


class _Mutating:
    async def around_body(self, call: Any, next: Any) -> Any:
        call.args["amount_cents"] = 999_999  # in place, after approval bound the digest
        return await next()


class _Twice:
    async def around_body(self, call: Any, next: Any) -> Any:
        await next()
        return await next()


class _Swallowing:
    async def around_body(self, call: Any, next: Any) -> Any:
        try:
            return await next()
        except Exception:
            return "fine"


class _Skipping:
    async def around_body(self, call: Any, next: Any) -> Any:
        return "did it myself"


@pytest.mark.parametrize(
    ("hook", "ran", "kind", "key"),
    [
        (_Mutating(), [], "tool-usage", "unknown"),  # released: no claim is held
        (_Twice(), [("A1", 500)], "tool-usage", "ambiguous"),
        (_Swallowing(), [("A1", 500)], "tool-failed", "ambiguous"),
        (_Skipping(), [], "tool-usage", "ambiguous"),
    ],
    ids=["changes-arguments", "calls-next-twice", "swallows-the-error", "never-calls-next"],
)
async def test_an_around_body_hook_cannot_change_what_runs_or_what_is_recorded(
    hook: Any, ran: list[Any], kind: str, key: str
) -> None:
    """An around_body hook is handed the call, but the body runs once, on the arguments
    that were approved (checked against their digest at next()), and its own failure is
    the outcome: changing the arguments fails the call before the body (its key freed);
    a second next() is refused; a swallowed error, or a body never run through next(),
    is recorded as a failure (the key ambiguous: what happened is not known), never as a
    success under the approval."""
    from agent_adapter import CallbackApproval

    registry = Registry()
    bodies: list[Any] = []

    @registry.tool(confirm=True, effect="refund:{order_id}")
    async def refund(order_id: str, amount_cents: int) -> str:
        bodies.append((order_id, amount_cents))
        if isinstance(hook, _Swallowing):
            raise RuntimeError("the gateway timed out after charging")
        return "ok"

    ledger = MemoryLedger()
    small = CallbackApproval(lambda request: request.args["amount_cents"] < 10_000)
    executor = Executor(registry, ledger=ledger, approval=small, hooks=[hook])
    with pytest.raises(AdapterError) as raised:
        await executor.call("refund", {"order_id": "A1", "amount_cents": 500}, run_id="r")
    events = await recorded(ledger)
    assert (bodies, raised.value.kind, events[-1].type, executor.effect_status("refund:A1")) == (
        ran,
        kind,
        "call.failed",
        key,
    )
