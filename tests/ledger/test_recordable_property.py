"""Property (issue 10): whatever public values reach events (Decisions from a port or
carried in the context, ids, metadata, arguments as dicts and as text, tool results, error
texts; with lone surrogates, NaN, huge numbers and deep nesting), after any sequence of
calls the ledger reads back, verifies and replays without a malformed record, every call
has exactly one outcome, and a new executor opens it without a warning."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_adapter import CallbackApproval, CallContext, Decision, Executor, Registry
from agent_adapter.errors import AdapterError, LedgerError, ToolError
from agent_adapter.ledger import MemoryLedger, SQLiteLedger, replay

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
TEXT = st.text(st.one_of(st.characters(), SURROGATES), max_size=8)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.just(10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)


def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


VALUES = st.one_of(
    st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.one_of(TEXT, st.integers()), inner, max_size=3),
            st.tuples(inner),
        ),
        max_leaves=8,
    ),
    st.sampled_from([60, 70, 3000]).map(deep),
    st.builds(object),
)
ARGS = st.one_of(
    st.dictionaries(st.sampled_from(["x", "y", "\ud800"]), VALUES, max_size=2),
    st.builds(lambda value: {"x": value}, VALUES),
    TEXT.map(lambda t: '{"x": "' + t + '"}'),
    st.just("[" * 5000),
    TEXT,
)
DECISIONS = st.fixed_dictionaries(
    {
        "approved": st.one_of(st.booleans(), st.just("yes")),
        "reviewer": st.one_of(st.none(), TEXT, st.just(5)),
        "reason": st.one_of(st.none(), TEXT),
        "edits": st.one_of(st.none(), st.builds(lambda v: {"x": v}, VALUES)),
    }
)
CALLS = st.lists(
    st.fixed_dictionaries(
        {
            "tool": st.sampled_from(["plain", "confirm", "effect", "secret"]),
            "args": ARGS,
            "run_id": st.one_of(st.just("r1"), TEXT),
            "metadata": st.one_of(st.just({}), st.dictionaries(TEXT, VALUES, max_size=2)),
            "carried": st.one_of(st.none(), DECISIONS),
            "port": DECISIONS,
            "result": VALUES,
            "raises": st.one_of(st.none(), TEXT),
        }
    ),
    min_size=1,
    max_size=6,
)


def decision(fields: dict[str, Any]) -> Decision:
    """Built where the engine meets it: a badly typed one raises ToolUsageError there."""
    return Decision(**fields)


async def run_calls(ledger: Any, calls: list[dict[str, Any]]) -> None:
    registry = Registry()
    now: dict[str, Any] = {}

    async def body(x: Any = None) -> Any:
        if now["raises"] is not None:
            raise (ToolError if len(now["raises"]) % 2 else RuntimeError)(now["raises"])
        return now["result"]

    registry.add_schema_tool("plain", {"type": "object"}, body)
    registry.add_schema_tool("confirm", {"type": "object"}, body, confirm=True)
    registry.add_schema_tool("effect", {"type": "object"}, body, effect=lambda a: repr(a)[:20])
    secret = {"type": "object", "properties": {"x": {}}}
    registry.add_schema_tool("secret", secret, body, redact=["x"])
    port = CallbackApproval(lambda request: decision(now["port"]))
    executor = Executor(registry, ledger=ledger, approval=port)
    for n, call in enumerate(calls):
        now.update(call)
        try:
            carried = decision(call["carried"]) if call["carried"] is not None else None
        except AdapterError:
            carried = None
        ctx = CallContext(
            run_id=call["run_id"], call_id=f"c{n}", metadata=call["metadata"], approval=carried
        )
        try:
            await executor.run_spec(registry.get(call["tool"]), call["args"], ctx)
        except LedgerError:
            raise  # the ledger refused one of our events: the boundary let it through
        except AdapterError:
            pass


async def check_ledger(ledger: Any, reopen: Any) -> None:
    events = [event async for event in ledger.read()]
    verification = await ledger.verify()
    assert verification.ok, verification
    assert [e.seq for e in events if e.malformed] == []
    kinds = {p.kind for p in replay(events, verification).problems()}
    # An ambiguous effect key is a legitimate finding (a body that raised); nothing else.
    assert kinds <= {"ambiguous"}, kinds
    outcomes: dict[tuple[str, str], int] = {}
    for event in events:
        key = (event.run_id, event.call_id)
        if event.type == "call.requested":
            outcomes.setdefault(key, 0)
        elif event.is_outcome:
            outcomes[key] = outcomes.get(key, 0) + 1
    assert set(outcomes.values()) <= {1}, outcomes
    logger = logging.getLogger("agent_adapter")
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        executor = await Executor.open(Registry(), ledger=reopen(), verify=True)
        await executor.close()
    finally:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in seen if r.levelno >= logging.WARNING] == []


def budget(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=True,
    )


@budget(150)
@given(CALLS)
def test_any_public_values_leave_a_readable_ledger_in_memory(calls: list[dict[str, Any]]) -> None:
    """On a MemoryLedger."""
    ledger = MemoryLedger()

    async def main() -> None:
        await run_calls(ledger, calls)
        await check_ledger(ledger, lambda: ledger)

    asyncio.run(main())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@budget(25)
@given(CALLS)
def test_any_public_values_leave_a_readable_sqlite_ledger(calls: list[dict[str, Any]]) -> None:
    """On a SQLiteLedger file (fewer examples: each is a new file)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.db"

        async def main() -> None:
            ledger = SQLiteLedger(path, synchronous="NORMAL")
            try:
                await run_calls(ledger, calls)
                await check_ledger(ledger, lambda: SQLiteLedger(path))
            finally:
                await ledger.close()

        asyncio.run(main())
