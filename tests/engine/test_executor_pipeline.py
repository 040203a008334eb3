"""The run_spec pipeline: each step and each outcome, with the exact events per call."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _helpers import (
    assert_one_outcome_each,
    every_call_has_one_outcome,  # noqa: F401 (a fixture)
    recorded,
    timeline,
    types,
)

from agent_adapter import CallContext, Executor, Registry, current_call, digest
from agent_adapter.engine import MAX_ARGS_BYTES
from agent_adapter.errors import (
    GuardrailBlocked,
    ToolArgsInvalid,
    ToolError,
    ToolFailed,
    ToolTimeout,
    ToolUsageError,
)
from agent_adapter.ledger import (
    CallBlocked,
    CallFailed,
    CallInvalid,
    CallRequested,
    CallStarted,
    CallSucceeded,
    CallTimedOut,
    CallValidated,
    GuardChecked,
    GuardVerdict,
    MemoryLedger,
)

pytestmark = pytest.mark.usefixtures("every_call_has_one_outcome")

CTX = CallContext(run_id="r1", call_id="c1")
ADD_DIGEST = digest({"a": 1, "b": 2})


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def ledger() -> MemoryLedger:
    return MemoryLedger()


@pytest.fixture
def executor(registry: Registry, ledger: MemoryLedger, clock: Any) -> Executor:
    return Executor(registry, ledger=ledger, clock=clock)


async def test_success_records_the_whole_timeline(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """A successful async call appends requested, validated, started and succeeded, exactly."""

    @registry.tool
    async def add(a: int, b: int) -> int:
        return a + b

    value = await executor.run_spec(add, {"b": 2, "a": 1}, CTX)
    common = {"ts": 1000.0, "run_id": "r1", "call_id": "c1", "tool": "add"}
    assert value == 3
    assert await recorded(ledger) == [
        CallRequested(seq=1, **common, args={"b": 2, "a": 1}),
        CallValidated(seq=2, **common, digest=ADD_DIGEST),
        CallStarted(seq=3, **common, digest=ADD_DIGEST),
        CallSucceeded(seq=4, **common, duration_ms=0.0, result=3),
    ]


async def test_sync_tool_and_json_text(
    registry: Registry, executor: Executor, ledger: MemoryLedger, clock: Any
) -> None:
    """A sync tool runs too; JSON text is recorded as given; duration comes from the clock."""

    @registry.tool
    def add(a: int, b: int) -> int:
        clock.advance(0.25)
        return a + b

    ctx = CallContext(run_id="r1", call_id="c1", metadata={"integration": "test"})
    value = await executor.run_spec(add, '{"a": 1, "b": 2}', ctx)
    events = await recorded(ledger)
    assert value == 3
    assert [e.type for e in events] == timeline("call.succeeded")
    assert (events[0].args, events[0].metadata, events[3].duration_ms, events[3].ts) == (
        '{"a": 1, "b": 2}',
        {"integration": "test"},
        250.0,
        1000.25,
    )


@pytest.mark.parametrize(
    ("args", "recorded_args", "message"),
    [
        ("{oops", "{oops", "invalid arguments for add: JSON is malformed: "
         "object keys must be strings (byte 1)"),
        ("[1]", "[1]", "invalid arguments for add: Expected `object`, got `array`"),
        ({"a": "1", "b": 2}, {"a": "1", "b": 2},
         "invalid arguments for add: Expected `int`, got `str` - at `$.a`"),
        ({"a": 1}, {"a": 1}, "invalid arguments for add: Object missing required field `b`"),
        ({"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 2, "c": 3},
         "invalid arguments for add: Object contains unknown field `c`"),
        ({"a": 1, "b": 2.0}, {"a": 1, "b": 2.0},
         "invalid arguments for add: Expected `int`, got `float` - at `$.b`"),
    ],
)  # fmt: skip
async def test_invalid_arguments_end_the_call(
    registry: Registry,
    executor: Executor,
    ledger: MemoryLedger,
    args: Any,
    recorded_args: Any,
    message: str,
) -> None:
    """Invalid arguments: call.requested then call.invalid, and ToolArgsInvalid; no body."""
    ran = []

    @registry.tool
    async def add(a: int, b: int) -> int:
        ran.append(1)
        return a + b

    with pytest.raises(ToolArgsInvalid) as info:
        await executor.run_spec(add, args, CTX)
    common = {"ts": 1000.0, "run_id": "r1", "call_id": "c1", "tool": "add"}
    assert (str(info.value), ran) == (message, [])
    assert await recorded(ledger) == [
        CallRequested(seq=1, **common, args=recorded_args),
        CallInvalid(seq=2, **common, error=message),
    ]
    assert (await ledger.verify()).ok


async def test_arguments_that_are_not_json_values(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """A dict holding an object JSON cannot hold is ToolArgsInvalid, recorded, not a crash."""

    @registry.tool
    async def store(data: Any) -> None:
        return None

    with pytest.raises(ToolArgsInvalid) as info:
        await executor.run_spec(store, {"data": object()}, CTX)
    assert str(info.value) == (
        "arguments for store are not JSON values: Encoding objects of type object is unsupported"
    )
    events = await recorded(ledger)
    assert [(e.type, getattr(e, "args", None)) for e in events] == [
        ("call.requested", {"data": "<unencodable object>"}),
        ("call.invalid", None),
    ]
    # Nothing is left in flight: the same ids replay the recorded error.
    with pytest.raises(ToolArgsInvalid):
        await executor.run_spec(store, {"data": object()}, CTX)
    assert executor.state.inflight == {}


async def test_oversized_text_is_neither_parsed_nor_stored(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """Text over 1 MiB is refused and withheld from call.requested (the ledger stays small)."""

    @registry.tool
    async def echo(text: str) -> str:
        return text

    big = '{"text": "' + "x" * MAX_ARGS_BYTES + '"}'
    with pytest.raises(ToolArgsInvalid):
        await executor.run_spec(echo, big, CTX)
    events = await recorded(ledger)
    assert [(e.type, getattr(e, "args", None)) for e in events] == [
        ("call.requested", f"[withheld: {len(big)} bytes, over the size limit]"),
        ("call.invalid", None),
    ]
    assert sum(len(r.payload) for r in ledger.records) < 1000


async def test_oversized_dict_is_refused(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """A dict whose JSON form is over 1 MiB is refused like the text would be."""

    @registry.tool
    async def echo(text: str) -> str:
        return text

    with pytest.raises(ToolArgsInvalid) as info:
        await executor.run_spec(echo, {"text": "x" * MAX_ARGS_BYTES}, CTX)
    assert str(info.value) == (
        f"arguments for echo are {MAX_ARGS_BYTES + 11} bytes as JSON, over the "
        f"{MAX_ARGS_BYTES} byte limit"
    )
    assert await types(ledger) == ["call.requested", "call.invalid"]


async def test_tool_error_is_a_definite_failure(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """A ToolError from the body is recorded as call.failed (tool-error) and raised as is."""
    error = ToolError("out of stock")

    @registry.tool
    async def buy(sku: str) -> None:
        raise error

    with pytest.raises(ToolError) as info:
        await executor.run_spec(buy, {"sku": "x"}, CTX)
    events = await recorded(ledger)
    assert info.value is error
    assert [e.type for e in events] == timeline("call.failed")
    assert events[-1] == CallFailed(
        seq=4,
        ts=1000.0,
        run_id="r1",
        call_id="c1",
        tool="buy",
        error_kind="tool-error",
        error="out of stock",
    )


async def test_unexpected_exception_is_tool_failed(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """Any other exception becomes ToolFailed chained to it, recorded as tool-failed."""
    boom = KeyError("k")

    @registry.tool
    def broken(x: int) -> None:
        raise boom

    with pytest.raises(ToolFailed) as info:
        await executor.run_spec(broken, {"x": 1}, CTX)
    events = await recorded(ledger)
    assert (str(info.value), info.value.__cause__) == ("broken failed: KeyError: 'k'", boom)
    assert (events[-1].type, events[-1].error_kind, events[-1].error) == (
        "call.failed",
        "tool-failed",
        "broken failed: KeyError: 'k'",
    )


async def test_a_tool_raising_timeout_error_itself_is_a_failure(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """A TimeoutError raised by the body (not our deadline) is ToolFailed, not ToolTimeout."""

    @registry.tool(timeout=60)
    async def slow() -> None:
        raise TimeoutError("upstream")

    with pytest.raises(ToolFailed) as info:
        await executor.run_spec(slow, {}, CTX)
    assert str(info.value) == "slow failed: TimeoutError: upstream"
    assert (await recorded(ledger))[-1].error_kind == "tool-failed"


async def test_unencodable_result_is_tool_failed(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """A result that cannot be encoded is ToolFailed and recorded as call.failed."""

    @registry.tool
    async def weird() -> object:
        return object()

    with pytest.raises(ToolFailed) as info:
        await executor.run_spec(weird, {}, CTX)
    assert str(info.value) == (
        "weird returned a value that cannot be encoded: "
        "Encoding objects of type object is unsupported"
    )
    assert await types(ledger) == timeline("call.failed")
    await assert_one_outcome_each(ledger)


async def test_timeout(registry: Registry, executor: Executor, ledger: MemoryLedger) -> None:
    """A body past its timeout is cancelled: call.timed_out and ToolTimeout."""
    never = asyncio.Event()

    @registry.tool(timeout=0.01)
    async def stuck() -> None:
        await never.wait()

    with pytest.raises(ToolTimeout) as info:
        await executor.run_spec(stuck, {}, CTX)
    events = await recorded(ledger)
    assert str(info.value) == "stuck did not finish within 0.01 s"
    assert events[-1] == CallTimedOut(
        seq=4, ts=1000.0, run_id="r1", call_id="c1", tool="stuck", timeout_s=0.01
    )
    assert [e.type for e in events] == timeline("call.timed_out")


async def test_input_guards_in_order_and_blocking(
    registry: Registry, ledger: MemoryLedger, clock: Any
) -> None:
    """Spec guards run before executor guards; the first block stops the call with its reason."""
    seen: list[str] = []

    def allow(call: Any) -> None:
        seen.append("allow")

    async def deny(call: Any) -> None:
        seen.append("deny")
        raise GuardrailBlocked("amount too large")

    class Never:
        name = "never"

        def __call__(self, call: Any) -> None:
            seen.append("never")

    @registry.tool(guards=[allow])
    async def pay(amount: int) -> None:
        seen.append("body")

    executor = Executor(registry, ledger=ledger, clock=clock, guards=[deny, Never()])
    with pytest.raises(GuardrailBlocked) as info:
        await executor.run_spec(pay, {"amount": 5}, CTX)
    events = await recorded(ledger)
    common = {"ts": 1000.0, "run_id": "r1", "call_id": "c1", "tool": "pay"}
    assert (str(info.value), seen) == ("amount too large", ["allow", "deny"])
    assert events[2:] == [
        GuardChecked(
            seq=3,
            **common,
            stage="input",
            verdicts=[
                GuardVerdict(name="allow", ok=True),
                GuardVerdict(name="deny", ok=False, reason="amount too large"),
            ],
        ),
        CallBlocked(seq=4, **common, stage="input", by="deny", reason="amount too large"),
    ]


async def test_guards_that_pass_are_recorded(
    registry: Registry, ledger: MemoryLedger, clock: Any
) -> None:
    """Passing guards give one guard.checked with every verdict, by ``name`` or ``__name__``."""

    class Named:
        name = "policy"

        def __call__(self, call: Any) -> None:
            return None

    def plain(call: Any) -> None:
        return None

    @registry.tool
    async def ping() -> str:
        return "pong"

    executor = Executor(registry, ledger=ledger, clock=clock, guards=[Named(), plain])
    assert await executor.run_spec(ping, {}, CTX) == "pong"
    events = await recorded(ledger)
    assert [e.type for e in events] == timeline("call.succeeded", guards=True)
    assert events[2].verdicts == [
        GuardVerdict(name="policy", ok=True),
        GuardVerdict(name="plain", ok=True),
    ]


async def test_a_guard_that_raises_blocks(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """A guard raising anything else blocks too (fail closed), with its error recorded."""
    bug = ZeroDivisionError("division by zero")

    def flaky(call: Any) -> None:
        raise bug

    @registry.tool(guards=[flaky])
    async def ping() -> str:
        return "pong"

    with pytest.raises(GuardrailBlocked) as info:
        await executor.run_spec(ping, {}, CTX)
    reason = "guard flaky failed: ZeroDivisionError: division by zero"
    events = await recorded(ledger)
    assert (str(info.value), info.value.__cause__) == (reason, bug)
    assert (events[-2].verdicts, events[-1].type, events[-1].reason) == (
        [GuardVerdict(name="flaky", ok=False, reason=reason)],
        "call.blocked",
        reason,
    )


async def test_output_guard_blocks_the_result(
    registry: Registry, ledger: MemoryLedger, clock: Any
) -> None:
    """An output guard sees the result; a block is call.blocked and the result is withheld."""
    seen = []

    def no_secrets(call: Any, result: Any) -> None:
        seen.append(result)
        raise GuardrailBlocked("result contains a secret")

    @registry.tool(output_guards=[no_secrets])
    async def read() -> str:
        return "the secret"

    executor = Executor(registry, ledger=ledger, clock=clock)
    with pytest.raises(GuardrailBlocked) as info:
        await executor.run_spec(read, {}, CTX)
    events = await recorded(ledger)
    assert (str(info.value), seen) == ("result contains a secret", ["the secret"])
    assert [e.type for e in events] == timeline("call.blocked", output_guards=True)
    assert (events[3].stage, events[4].stage, events[4].by) == ("output", "output", "no_secrets")
    assert b"the secret" not in b"".join(r.payload for r in ledger.records)


async def test_executor_output_guards_run_after_spec_output_guards(
    registry: Registry, ledger: MemoryLedger, clock: Any
) -> None:
    """Executor output guards run after the spec's, and passing ones let the result through."""
    order = []

    def spec_guard(call: Any, result: Any) -> None:
        order.append(("spec", result))

    async def exec_guard(call: Any, result: Any) -> None:
        order.append(("executor", result))

    @registry.tool(output_guards=[spec_guard])
    async def read() -> int:
        return 7

    executor = Executor(registry, ledger=ledger, clock=clock, output_guards=[exec_guard])
    assert await executor.run_spec(read, {}, CTX) == 7
    events = await recorded(ledger)
    assert order == [("spec", 7), ("executor", 7)]
    assert (events[3].type, events[3].verdicts, events[4].type) == (
        "guard.checked",
        [GuardVerdict(name="spec_guard", ok=True), GuardVerdict(name="exec_guard", ok=True)],
        "call.succeeded",
    )


async def test_current_call_inside_body_guards_and_hooks(
    registry: Registry, ledger: MemoryLedger, clock: Any
) -> None:
    """current_call() gives the running Call (ids, args, digest, effect key) and None outside."""
    seen: dict[str, Any] = {}

    def guard(call: Any) -> None:
        seen["guard"] = current_call()

    class Hook:
        def before_tool(self, call: Any) -> None:
            seen["hook"] = current_call()

    @registry.tool(effect="ship:{order_id}", guards=[guard])
    async def ship(order_id: str) -> str:
        call = current_call()
        assert call is not None
        seen["body"] = call
        return call.effect_key or ""

    executor = Executor(registry, ledger=ledger, clock=clock, hooks=[Hook()])
    assert await executor.run_spec(ship, {"order_id": "A1"}, CTX) == "ship:A1"
    body = seen["body"]
    assert (
        body.tool,
        body.args,
        body.digest,
        body.ctx.run_id,
        body.ctx.call_id,
        body.effect_key,
        body.spec is ship,
    ) == ("ship", {"order_id": "A1"}, digest({"order_id": "A1"}), "r1", "c1", "ship:A1", True)
    # The key is rendered right after validation: guards and hooks see the key the call
    # will claim (issue 10, item 8; it was None before step 8).
    assert (seen["guard"].effect_key, seen["hook"].effect_key, seen["hook"].digest) == (
        "ship:A1",
        "ship:A1",
        body.digest,
    )
    assert current_call() is None


async def test_call_looks_the_tool_up_and_makes_ids(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """``call`` runs a registered tool by name, with fresh ids unless given."""

    @registry.tool
    async def ping() -> str:
        return "pong"

    assert await executor.call("ping", {}) == "pong"
    assert await executor.call("ping", {}, run_id="r9", call_id="c9", metadata={"k": 1}) == "pong"
    events = await recorded(ledger)
    first, second = events[0], events[4]
    assert (first.run_id.startswith("run_"), first.call_id.startswith("call_")) == (True, True)
    assert (second.run_id, second.call_id, second.metadata) == ("r9", "c9", {"k": 1})
    await assert_one_outcome_each(ledger)


async def test_unknown_tool_in_call_is_a_usage_error(
    executor: Executor, ledger: MemoryLedger
) -> None:
    """``call`` with a name nobody registered raises ToolUsageError and records nothing."""
    with pytest.raises(ToolUsageError) as info:
        await executor.call("nope", {})
    assert (str(info.value), ledger.records) == ("no tool named 'nope' is registered", [])


async def test_cancelled_error_from_the_body_is_not_a_failure(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """A body raising CancelledError is recorded as call.cancelled and the error propagates."""

    @registry.tool
    async def quit_() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await executor.run_spec(quit_, {}, CTX)
    events = await recorded(ledger)
    assert [e.type for e in events] == timeline("call.cancelled")
    assert events[-1].started is True


async def test_redacted_values_never_reach_the_ledger(registry: Registry, clock: Any) -> None:
    """A redacted argument's value is absent from every encoded event, whatever the outcome."""
    secret = "hunter2-s3cret"
    ledger = MemoryLedger()

    @registry.tool(redact=["password"], effect="login:{user}")
    async def login(user: str, password: str, mode: int = 0) -> str:
        if mode == 1:
            raise ToolError("locked")
        if mode == 2:
            raise RuntimeError("boom")
        return "ok"

    executor = Executor(registry, ledger=ledger, clock=clock)
    calls: list[Any] = [
        {"user": "a", "password": secret},
        f'{{"user": "b", "password": "{secret}"}}',
        f'{{"user": "c", "password": "{secret}", "mode": 1}}',
        {"user": "d", "password": secret, "mode": 2},
        {"user": "e", "password": secret, "mode": "x"},
        f'{{"user": "f", "password": "{secret}", "extra": 1}}',
        f'{{"user": "g", "password": "{secret}"',
        {"user": "a", "password": secret},
    ]
    for i, args in enumerate(calls):
        try:
            await executor.run_spec(login, args, CallContext(run_id="r", call_id=f"c{i}"))
        except Exception:
            pass
    payloads = [r.payload for r in ledger.records]
    assert [p for p in payloads if secret.encode() in p] == []
    first = (await recorded(ledger))[0]
    assert first.args == {"user": "a", "password": "[redacted]"}
    assert len(payloads) > len(calls) * 2
    await assert_one_outcome_each(ledger)


async def test_sync_tool_sees_current_call_and_times_out(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """A sync body runs in a thread with current_call() set; past its timeout it is ToolTimeout."""
    import threading

    release = threading.Event()
    seen = []

    @registry.tool(timeout=0.5, effect="job:{n}")
    def job(n: int) -> int:
        call = current_call()
        seen.append(None if call is None else (call.ctx.call_id, call.effect_key))
        if n == 2:
            release.wait(10)
        return n

    assert await executor.run_spec(job, {"n": 1}, CallContext(run_id="r", call_id="a")) == 1
    try:
        with pytest.raises(ToolTimeout):
            await executor.run_spec(job, {"n": 2}, CallContext(run_id="r", call_id="b"))
    finally:
        release.set()
    assert seen == [("a", "job:1"), ("b", "job:2")]
    assert await types(ledger, "b") == timeline("call.timed_out", effect=True)
    assert executor.ambiguous_effects() == {"job:2": ("r", "b")}


async def test_oversized_non_ascii_text_is_withheld_by_its_byte_size(
    registry: Registry, executor: Executor, ledger: MemoryLedger
) -> None:
    """Text under 1 Mi characters but over 1 MiB in UTF-8 is refused and withheld alike."""

    @registry.tool
    async def echo(text: str) -> str:
        return text

    big = '{"text": "' + "é" * (MAX_ARGS_BYTES // 2) + '"}'
    with pytest.raises(ToolArgsInvalid):
        await executor.run_spec(echo, big, CTX)
    size = len(big.encode())
    assert (await recorded(ledger))[0].args == f"[withheld: {size} bytes, over the size limit]"
