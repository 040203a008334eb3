"""Never write what cannot be read back: user values at the boundary of the ledger (issue 10,
items 1-3). Every test runs on a MemoryLedger and on a SQLiteLedger file, and ends with the
ledger read back, replayed, verified and reopened by a new executor."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _helpers import recorded

from agent_adapter import (
    CallbackApproval,
    CallContext,
    Decision,
    DeferredApproval,
    Executor,
    Registry,
)
from agent_adapter.errors import (
    AmbiguousEffect,
    ApprovalDenied,
    LedgerError,
    ToolArgsInvalid,
    ToolError,
    ToolFailed,
    ToolUsageError,
)
from agent_adapter.ledger import (
    ApprovalRejected,
    CallRequested,
    CallStarted,
    GuardChecked,
    GuardVerdict,
    MemoryLedger,
    SQLiteLedger,
    decode_event,
    replay,
)
from agent_adapter.ledger._recordable import UnrecordableEvent, recordable, text

LONE = "\ud800"  # a lone surrogate: a Python str no UTF-8 encoder accepts


def deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


@pytest.fixture(params=["memory", "sqlite"])
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A MemoryLedger, or a SQLiteLedger on a fresh file."""
    if request.param == "memory":
        yield MemoryLedger()
        return
    store = SQLiteLedger(tmp_path / "ledger.db")
    try:
        yield store
    finally:
        await store.close()


async def read_back(ledger: Any, registry: Registry) -> Any:
    """The ledger reads back, verifies, replays with no problem and reopens: the audit."""
    events = [event async for event in ledger.read()]
    verification = await ledger.verify()
    assert verification.ok, verification
    audit = replay(events, verification)
    assert [p.kind for p in audit.problems()] == []
    counts: dict[tuple[str, str], int] = {}
    for event in events:
        if event.type == "call.requested":
            counts.setdefault((event.run_id, event.call_id), 0)
        if event.is_outcome:
            counts[(event.run_id, event.call_id)] = counts.get((event.run_id, event.call_id), 0) + 1
    assert set(counts.values()) <= {1}, counts
    reopened = await reopen(ledger, registry)
    assert reopened.state.outcomes.keys() == {(e.run_id, e.call_id) for e in events if e.is_outcome}
    await reopened.close()
    return audit


async def reopen(ledger: Any, registry: Registry) -> Executor:
    """A new executor replaying ``ledger`` (a new SQLiteLedger object on its file)."""
    if isinstance(ledger, SQLiteLedger):
        return await Executor.open(registry, ledger=SQLiteLedger(ledger.path))
    return await Executor.open(registry, ledger=ledger)


# -- 1. decisions and contexts -----------------------------------------------------------


async def test_a_denial_without_a_reason_is_recorded_and_reads_back(ledger: Any) -> None:
    """A port's Decision(reason=None) is recorded with reason "" (it made every later read
    of the ledger fail before)."""
    registry = Registry()

    @registry.tool(confirm=True)
    async def refund(order_id: str) -> str:
        return order_id

    port = CallbackApproval(lambda r: Decision(approved=False, reviewer="alice", reason=None))  # type: ignore[arg-type]
    executor = Executor(registry, ledger=ledger, approval=port)
    with pytest.raises(ApprovalDenied):
        await executor.call("refund", {"order_id": "A1"}, run_id="r1", call_id="c1")
    audit = await read_back(ledger, registry)
    approval = audit.call("r1", "c1").approvals[0]
    assert (approval.approved, approval.reviewer, approval.reason) == (False, "alice", "")


async def test_a_carried_decision_without_a_reason_is_recorded(ledger: Any) -> None:
    """``CallContext.approval`` with ``reason=None`` approves, and the grant reads back."""
    registry = Registry()

    @registry.tool(confirm=True)
    async def refund(order_id: str) -> str:
        return order_id

    executor = Executor(registry, ledger=ledger)
    decision = Decision(approved=True, reviewer=None, reason=None)  # type: ignore[arg-type]
    ctx = CallContext(run_id="r1", call_id="c1", approval=decision)
    assert await executor.run_spec(registry.get("refund"), {"order_id": "A1"}, ctx) == "A1"
    audit = await read_back(ledger, registry)
    assert [(a.approved, a.reviewer, a.reason) for a in audit.call("r1", "c1").approvals] == [
        (True, "", "")
    ]


def test_decision_fields_are_normalised_or_refused_when_built() -> None:
    """None becomes ""; a lone surrogate its escape; a value of another type is refused."""
    decision = Decision(approved=True, reviewer=None, reason=f"ok{LONE}")  # type: ignore[arg-type]
    assert (decision.reviewer, decision.reason) == ("", "ok\\ud800")
    for bad in (
        {"approved": "yes"},
        {"approved": 1},
        {"approved": True, "reviewer": 5},
        {"approved": True, "reason": b"bytes"},
        {"approved": True, "edits": ["not", "a", "mapping"]},
        {"approved": True, "digest": 7},
    ):
        with pytest.raises(ToolUsageError):
            Decision(**bad)


async def test_a_port_returning_a_badly_typed_decision_denies(ledger: Any) -> None:
    """A Decision a port cannot build (a reviewer that is not text) fails the port: the
    call is denied (fail closed), with the port's error recorded."""
    registry = Registry()

    @registry.tool(confirm=True)
    async def refund(order_id: str) -> str:
        return order_id

    port = CallbackApproval(lambda r: Decision(approved=True, reviewer=42))  # type: ignore[arg-type]
    executor = Executor(registry, ledger=ledger, approval=port)
    with pytest.raises(ApprovalDenied, match=r"Decision\.reviewer must be text"):
        await executor.call("refund", {"order_id": "A1"}, run_id="r1", call_id="c1")
    await read_back(ledger, registry)


async def test_context_ids_and_metadata_are_recordable(ledger: Any) -> None:
    """Ids with a lone surrogate are recorded as their escape; metadata that is not JSON
    (objects, lone surrogates, deep nesting) as an encodable copy; non-text ids refused."""
    registry = Registry()

    @registry.tool()
    async def echo(x: str) -> str:
        return x

    executor = Executor(registry, ledger=ledger)
    metadata = {"who": f"a{LONE}", "deep": deep(2000), 7: object(), f"k{LONE}": 1}
    assert await executor.call("echo", {"x": "hi"}, run_id=f"r{LONE}", metadata=metadata) == "hi"
    await read_back(ledger, registry)
    requested = next(e for e in await recorded(ledger) if isinstance(e, CallRequested))
    assert requested.run_id == "r\\ud800"
    assert (requested.metadata["who"], requested.metadata["7"], requested.metadata["k\\ud800"]) == (
        "a\\ud800",
        "<unencodable object>",
        1,
    )
    with pytest.raises(ToolUsageError, match="run_id must be text"):
        CallContext(run_id=None, call_id="c1")  # type: ignore[arg-type]
    with pytest.raises(ToolUsageError, match="metadata must be a mapping"):
        CallContext(run_id="r", call_id="c", metadata=[1])  # type: ignore[arg-type]


async def test_answers_and_resolutions_normalise_their_texts(ledger: Any) -> None:
    """DeferredApproval.answer(reason=None) and resolve_effect(reason=None) are recorded;
    edits that cannot be recorded are refused with nothing written."""
    registry = Registry()
    released = asyncio.Event()

    @registry.tool(confirm=True, effect="pay:{ref}")
    async def pay(ref: str) -> str:
        await released.wait()
        raise RuntimeError("the PSP timed out")

    deferred = DeferredApproval(ledger)
    executor = Executor(registry, ledger=ledger, approval=deferred)
    with pytest.raises(Exception, match="pending"):
        await executor.call("pay", {"ref": "A"}, run_id="r1", call_id="c1")
    [request] = await deferred.pending()
    before = len(await recorded(ledger))
    with pytest.raises(ToolUsageError, match="cannot be recorded"):
        await deferred.answer(
            request.request_id, approved=True, reviewer="bob", edits={"ref": deep(5000)}
        )
    with pytest.raises(ToolUsageError, match="reviewer must be text"):
        await deferred.answer(request.request_id, approved=True, reviewer=3)  # type: ignore[arg-type]
    assert len(await recorded(ledger)) == before
    await deferred.answer(request.request_id, approved=True, reviewer="bob", reason=None)  # type: ignore[arg-type]
    released.set()
    with pytest.raises(ToolFailed):
        await executor.call("pay", {"ref": "A"}, run_id="r1", call_id="c2")
    with pytest.raises(ToolUsageError, match="reviewer"):
        await executor.resolve_effect("pay:A", outcome="failed", reviewer=None)  # type: ignore[arg-type]
    await executor.resolve_effect("pay:A", outcome="failed", reviewer=f"ops{LONE}", reason=None)
    audit = await read_back(ledger, registry)
    assert audit.call("r1", "c2").outcome == "call.failed"
    resolved = [e for e in await recorded(ledger) if e.type == "effect.resolved"]
    assert [(e.reviewer, e.reason) for e in resolved] == [("ops\\ud800", "")]  # type: ignore[attr-defined]


# -- 2. arguments the pipeline cannot encode ---------------------------------------------


def arguments_cases() -> list[tuple[str, Any]]:
    return [
        ("text with a lone surrogate", f'{{"x": "{LONE}"}}'),
        ("a key with a lone surrogate", {LONE: "a"}),
        ("a nested string with a lone surrogate", {"x": "a", "y": [LONE]}),
        ("a value with a lone surrogate", {"x": LONE}),
        ("invalid and unencodable", {"x": 1, "z": deep(3000)}),
        ("invalid and deep text", "[" * 100_000),
        ("a huge integer", {"x": 10**400}),
        ("NaN", {"x": float("nan")}),
        ("bytes that are not UTF-8", b'{"x": "\xff"}'),
    ]


@pytest.mark.parametrize(("case", "args"), arguments_cases(), ids=[c for c, _ in arguments_cases()])
@pytest.mark.parametrize("redact", [False, True], ids=["plain", "redact"])
async def test_arguments_that_cannot_be_encoded_are_invalid(
    ledger: Any, case: str, args: Any, redact: bool
) -> None:
    """ToolArgsInvalid, recorded as call.invalid: exactly one outcome, and the ledger reads
    back (a UnicodeEncodeError, RecursionError or LedgerError escaped before)."""
    registry = Registry()

    @registry.tool(redact=["x"] if redact else ())
    async def echo(x: str) -> str:
        return x

    executor = Executor(registry, ledger=ledger)
    with pytest.raises(ToolArgsInvalid):
        await executor.call("echo", args, run_id="r1", call_id="c1")
    audit = await read_back(ledger, registry)
    assert audit.call("r1", "c1").outcome == "call.invalid"


# -- 3. results and texts the ledger cannot encode ----------------------------------------


@pytest.mark.parametrize(
    "result",
    [f"refunded{LONE}", {"ok": [LONE]}, {LONE: 1}, deep(5000)],
    ids=["str", "nested-str", "key", "deep"],
)
async def test_a_result_that_cannot_be_encoded_fails_the_call(ledger: Any, result: Any) -> None:
    """call.failed ("returned a value that cannot be encoded"), and the effect key is
    ambiguous as after any failure once the body ran (the body may have done its effect)."""
    registry = Registry()
    ran: list[str] = []

    @registry.tool(effect="refund:{order_id}")
    async def refund(order_id: str) -> Any:
        ran.append(order_id)
        return result

    executor = Executor(registry, ledger=ledger)
    with pytest.raises(ToolFailed, match="returned a value that cannot be encoded"):
        await executor.call("refund", {"order_id": "A1"}, run_id="r1", call_id="c1")
    with pytest.raises(AmbiguousEffect):
        await executor.call("refund", {"order_id": "A1"}, run_id="r1", call_id="c2")
    assert ran == ["A1"]
    events = [event async for event in ledger.read()]
    verification = await ledger.verify()
    assert verification.ok
    failed = [e for e in events if e.type == "call.failed"]
    assert [(e.call_id, e.error_kind) for e in failed] == [("c1", "tool-failed")]  # type: ignore[attr-defined]
    # The key left ambiguous is the audit's to report (a problem, not a crash).
    replay(events, verification).problems()
    reopened = await reopen(ledger, registry)
    assert reopened.ambiguous_effects() == {"refund:A1": ("r1", "c1")}
    await reopened.close()


async def test_error_texts_and_names_with_lone_surrogates_are_recorded(ledger: Any) -> None:
    """A tool's error message, a guard's name and reason and a hook's failure holding lone
    surrogates are recorded as their escapes; every call has its one outcome."""
    registry = Registry()

    class Guard:
        name = f"guard{LONE}"

        def __call__(self, call: Any) -> None:
            if call.args["x"] == "block":
                raise RuntimeError(f"no{LONE}")

    class Hook:
        name = f"hook{LONE}"

        def on_event(self, event: Any) -> None:
            raise ValueError(f"broken{LONE}")

    @registry.tool(guards=[Guard()])
    async def echo(x: str) -> str:
        if x == "fail":
            raise ToolError(f"bad{LONE}")
        return x

    executor = Executor(registry, ledger=ledger, hooks=[Hook()])
    with pytest.raises(ToolError):
        await executor.call("echo", {"x": "fail"}, run_id="r1", call_id="c1")
    with pytest.raises(Exception, match="guard"):
        await executor.call("echo", {"x": "block"}, run_id="r1", call_id="c2")
    await read_back(ledger, registry)
    events = await recorded(ledger)
    assert [e.error for e in events if e.type == "call.failed"] == ["bad\\ud800"]  # type: ignore[attr-defined]
    checked = [e for e in events if isinstance(e, GuardChecked) and e.call_id == "c2"]
    assert checked[0].verdicts == [
        GuardVerdict(
            name="guard\\ud800",
            ok=False,
            reason="guard guard\\ud800 failed: RuntimeError: no\\ud800",
        )
    ]
    hooks = {e.hook for e in events if e.type == "hook.failed"}  # type: ignore[attr-defined]
    assert hooks == {"hook\\ud800"}


# -- the append path refuses what would not decode ---------------------------------------


async def test_the_append_path_refuses_an_event_that_would_not_decode(ledger: Any) -> None:
    """An event built with a field of the wrong type (a None where text is declared, a NaN
    time) or a value that cannot be encoded is refused whole: nothing stored, the chain
    intact, later appends fine."""
    good = CallStarted(run_id="r", call_id="c1", tool="t", digest="d")
    await ledger.append(good)
    for bad in (
        ApprovalRejected(run_id="r", call_id="c2", reason=None),  # type: ignore[arg-type]
        CallStarted(run_id=None, call_id="c2"),  # type: ignore[arg-type]
        CallStarted(ts=float("nan"), call_id="c2"),
        CallStarted(ts="noon", call_id="c2"),  # type: ignore[arg-type]
        GuardChecked(verdicts=[GuardVerdict(name=1, ok=True)]),  # type: ignore[arg-type]
        CallRequested(call_id="c2", args=f"x{LONE}"),
        CallRequested(call_id="c2", args=deep(5000)),
    ):
        with pytest.raises(UnrecordableEvent, match="was not recorded") as caught:
            await ledger.append_many([CallStarted(call_id="c2", tool="t"), bad])
        assert isinstance(caught.value, LedgerError)
        assert caught.value.event is bad
    await ledger.append(CallStarted(run_id="r", call_id="c3", tool="t"))
    events = [event async for event in ledger.read()]
    assert [(e.seq, e.call_id) for e in events] == [(1, "c1"), (2, "c3")]
    assert (await ledger.verify()).ok


def test_recordable_and_text() -> None:
    """``recordable`` returns the value itself when it encodes, else an encodable copy."""
    plain = {"a": [1, 2.5, None, True, "é"]}
    assert recordable(plain) is plain
    assert text("plain") == "plain"
    assert text("é") == "é"
    assert text(f"a{LONE}b") == "a\\ud800b"
    copy = recordable({"a": LONE, "b": deep(100), "c": (1, {2}), "d": object()})
    msgspec.json.encode(copy)
    assert copy["a"] == "\\ud800"
    assert copy["d"] == "<unencodable object>"


# -- a ledger that already holds such a record -------------------------------------------


BAD = b'{"type":"approval.denied","run_id":"r1","call_id":"c1","tool":"refund","reason":null}'


def test_decode_event_reads_a_record_that_does_not_fit_its_type() -> None:
    """The record is read with the field at its default and flagged; never an exception."""
    event = decode_event(BAD)
    assert isinstance(event, ApprovalRejected)
    assert (event.call_id, event.reason) == ("c1", "")
    assert event.malformed.startswith("reason was read as its default")
    for garbage in (b"not json", b"[1]", b'{"no": "type"}', b'{"type": 5}', b"\xff\xfe"):
        assert decode_event(garbage).malformed


async def test_a_ledger_holding_a_bad_record_opens_and_audits_it(tmp_path: Path) -> None:
    """A SQLite ledger written by an older version with ``"reason": null`` opens, reads,
    replays (the record flagged as a problem) and an executor opens on it."""
    registry = Registry()

    @registry.tool(confirm=True)
    async def refund(order_id: str) -> str:
        return order_id

    path = tmp_path / "old.db"
    port = CallbackApproval(lambda r: Decision(approved=False, reviewer="alice", reason="no"))
    async with Executor(registry, ledger=SQLiteLedger(path), approval=port) as executor:
        with pytest.raises(ApprovalDenied):
            await executor.call("refund", {"order_id": "A1"}, run_id="r1", call_id="c1")
    # What the old version wrote: the same record with "reason": null.
    with sqlite3.connect(path) as conn:
        (seq, payload) = conn.execute(
            "SELECT seq, payload FROM events WHERE type = 'approval.denied'"
        ).fetchone()
        conn.execute(
            "UPDATE events SET payload = ? WHERE seq = ?",
            (bytes(payload).replace(b'"reason":"no"', b'"reason":null'), seq),
        )
    conn.close()
    async with SQLiteLedger(path) as ledger:
        events = [event async for event in ledger.read()]
        audit = replay(events, await ledger.verify())
    async with await Executor.open(registry, ledger=SQLiteLedger(path)) as reopened:
        assert ("r1", "c1") in reopened.state.outcomes
    kinds = [(p.kind, p.seq) for p in audit.problems()]
    assert ("malformed", seq) in kinds
    assert audit.call("r1", "c1").outcome == "call.denied"
