"""The audit reports every effect key the executor holds ambiguous, and none it does not.

Each outcome kind of a call that claimed an effect key, through a real Executor on a
MemoryLedger and on an SQLiteLedger file, unresolved and resolved by an operator: the
audit's keys and problems, the projection of a reopened executor (they must agree: one
rule, ``ledger._effect_keys``), and the exit status of ``agent-adapter ledger audit``.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
import structlog

from agent_adapter import Executor, Registry, digest
from agent_adapter.cli import main
from agent_adapter.engine import host_identity
from agent_adapter.errors import GuardrailBlocked, ToolError, ToolFailed, ToolTimeout
from agent_adapter.ledger import (
    CallBlocked,
    CallCancelled,
    CallFailed,
    CallSucceeded,
    CallTimedOut,
    EffectClaimed,
    EffectRecord,
    EffectResolution,
    Event,
    MemoryLedger,
    Problem,
    SQLiteLedger,
    replay,
)
from agent_adapter.ledger._effect_keys import status_after_outcome

KEY = "pay:A1"
ARGS = {"order_id": "A1", "how": ""}


@pytest.fixture(autouse=True)
def _reset_structlog() -> Any:
    """main() configures structlog for its process; undo it after each in-process test."""
    yield
    structlog.reset_defaults()


class Tools:
    """One effect tool whose body does what ``how`` says; ``entered`` is set inside it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.body_task: asyncio.Task[Any] | None = None
        self.registry = Registry()
        never = asyncio.Event()

        def hide(call: Any, result: Any) -> None:
            if call.args["how"] == "blocked":
                raise GuardrailBlocked("not for the model")

        @self.registry.tool(effect="pay:{order_id}", timeout=0.05, output_guards=[hide])
        async def pay(order_id: str, how: str) -> str:
            # The body's own task: a started effect body is shielded from its caller's
            # cancel, so a test cancels this one (as a loop shutting down would).
            self.body_task = asyncio.current_task()
            self.entered.set()
            if how == "tool-error":
                raise ToolError("declined before charging")
            if how == "tool-failed":
                raise RuntimeError("connection reset after the request was sent")
            if how in ("timeout", "hang"):
                await never.wait()  # past the spec's timeout (or until cancelled)
            return "paid"


class Store:
    """Ledger objects on one store: the same MemoryLedger each time, or a new
    SQLiteLedger on the same file (each executor needs its own object)."""

    def __init__(self, kind: str, path: Path) -> None:
        self.kind = kind
        self.path = path
        self._memory = MemoryLedger()

    def ledger(self) -> Any:
        """A ledger object on this store."""
        return self._memory if self.kind == "memory" else SQLiteLedger(self.path)


def claimed(events: list[Event]) -> EffectClaimed:
    """The one ``effect.claimed`` among ``events``."""
    (claim,) = [e for e in events if isinstance(e, EffectClaimed)]
    return claim


async def run_outcome(store: Store, how: str) -> list[Event] | None:
    """Run one ``pay`` call that ends as ``how`` says. For ``died``, the events a killed
    process leaves (read while the body runs) are returned instead, for a new ledger."""
    tools = Tools()
    ledger = store.ledger()
    async with Executor(tools.registry, ledger=ledger, clock=lambda: 1_000.0) as executor:
        args = {**ARGS, "how": how}
        if how in ("succeeded", "blocked", "tool-error", "tool-failed", "timeout"):
            raised = {
                "blocked": GuardrailBlocked,
                "tool-error": ToolError,
                "tool-failed": ToolFailed,
                "timeout": ToolTimeout,
            }.get(how)
            if raised is None:
                assert await executor.call("pay", args, run_id="r", call_id="c") == "paid"
            else:
                with pytest.raises(raised):
                    await executor.call("pay", args, run_id="r", call_id="c")
            return None
        task = asyncio.create_task(
            executor.call("pay", {**args, "how": "hang"}, run_id="r", call_id="c")
        )
        await tools.entered.wait()  # the body started: call.started is durable
        left = [e async for e in ledger.read()] if how == "died" else None
        assert tools.body_task is not None
        tools.body_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return left


OUTCOMES = {
    # how: (outcome tag, key status after it)
    "succeeded": ("call.succeeded", "committed"),
    "blocked": ("call.blocked", "committed"),
    "tool-error": ("call.failed", "free"),
    "tool-failed": ("call.failed", "ambiguous"),
    "timeout": ("call.timed_out", "ambiguous"),
    "cancelled": ("call.cancelled", "ambiguous"),
    "died": (None, "ambiguous"),
}
WHY = {
    "tool-failed": "failed with tool-failed (an exception, not a ToolError) after its body started",
    "timeout": "timed out after its body started",
    "cancelled": "was cancelled after its body started",
    # (The holder's id and its pid and host are filled in from the claim.)
    "died": "started and has no outcome: its holder, executor {holder} (pid {pid} on host "
    "{host}), leased the key until 1970-01-01 00:17:10 UTC; until then it may still be "
    "running, after that its process died",
}
CASES = [(how, None) for how in OUTCOMES] + [
    (how, resolved) for how in WHY for resolved in ("failed", "committed")
]


def case_id(case: tuple[str, str | None]) -> str:
    """``how`` and how the key was resolved."""
    how, resolved = case
    return how if resolved is None else f"{how}-resolved-{resolved}"


async def scenario(kind: str, tmp_path: Path, how: str, resolved: str | None) -> Store:
    """The store after one call ending as ``how``, resolved as ``resolved`` if given."""
    store = Store(kind, tmp_path / "ledger.db")
    left = await run_outcome(store, how)
    if left is not None:
        # A new store holding only what the killed process had written.
        store = Store(kind, tmp_path / "crashed.db")
        ledger = store.ledger()
        await ledger.append_many(left)
        await ledger.close()
    if resolved is not None:
        ledger = store.ledger()
        async with await Executor.open(Tools().registry, ledger=ledger) as executor:
            await executor.resolve_effect(KEY, outcome=resolved, reviewer="ops", reason="checked")
    return store


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
async def test_each_outcome_resolved_or_not(
    tmp_path: Path, kind: str, case: tuple[str, str | None]
) -> None:
    """The audit's key status and problems for each outcome, as the executor sees the key."""
    how, resolved = case
    store = await scenario(kind, tmp_path, how, resolved)
    ledger = store.ledger()
    events = [e async for e in ledger.read()]
    audit = replay(events, await ledger.verify())
    await ledger.close()
    outcome, status = OUTCOMES[how]
    resolution = None
    if resolved is not None:
        status = "free" if resolved == "failed" else "committed"
        resolution = EffectResolution(
            outcome=resolved, reviewer="ops", reason="checked", seq=6 if outcome else 5
        )
    expected_effect = EffectRecord(
        key=KEY,
        run_id="r",
        call_id="c",
        tool="pay",
        digest=digest({**ARGS, "how": "hang" if how in ("cancelled", "died") else how}),
        seq=3,
        outcome=outcome,
        status=status,
        resolution=resolution,
        # The claim names its holder (the executor that ran the call, in this process)
        # and its lease: lease_s (30 s) past the injected clock.
        holder=claimed(events).holder,
        pid=os.getpid(),
        host=host_identity(),
        lease_until=1_030.0,
    )
    assert len(expected_effect.holder) == 12
    problems = []
    if status == "ambiguous":
        problems = [
            Problem(
                kind="ambiguous",
                message=f"effect {KEY}: call c (pay) "
                + WHY[how].format(
                    holder=expected_effect.holder, pid=os.getpid(), host=host_identity()
                )
                + "; the effect may or may not "
                "have happened, and no effect.resolved says which",
                run_id="r",
                call_id="c",
                seq=1,
                key=KEY,
            )
        ]
    assert (audit.effects, audit.problems(), audit.call("r", "c").outcome) == (
        {KEY: expected_effect},
        problems,
        outcome,
    )
    # The same ledger without the store's verification: the same verdict on the key.
    assert replay(events).problems() == problems
    # A restarted executor holds the key exactly as the audit reports it.
    async with await Executor.open(Tools().registry, ledger=store.ledger()) as executor:
        projected = {k: executor.effect_status(k) for k in executor.state.effects}
    assert projected == ({} if status == "free" else {KEY: status})
    if kind == "sqlite":
        argv = ["--no-color", "ledger", "audit", "--db", str(store.path)]
        code = await asyncio.to_thread(main, argv)
        assert code == (1 if status == "ambiguous" else 0)


def test_the_rule_for_every_outcome_event() -> None:
    """status_after_outcome, the rule both folds use: what each outcome makes of a key."""
    assert [
        status_after_outcome(e)
        for e in [
            CallSucceeded(),
            CallBlocked(stage="output"),
            CallFailed(error_kind="tool-error"),
            CallFailed(error_kind="tool-failed", ran=False),
            CallFailed(error_kind="tool-failed"),
            CallTimedOut(),
            CallCancelled(started=True),
        ]
    ] == ["committed", "committed", "free", "free", "ambiguous", "ambiguous", "ambiguous"]


async def test_cli_audit_shows_each_key_with_its_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ledger audit` lists the keys (status, claimer, outcome), a resolved one by whom;
    `--json` has them under "effects" and each call's "effect_key"; exit 1 for the open one."""
    path = tmp_path / "ledger.db"
    executor = Executor(Tools().registry, ledger=SQLiteLedger(path), clock=lambda: 1_000.0)
    await executor.call("pay", {"order_id": "A1", "how": "succeeded"}, run_id="r", call_id="c1")
    for call_id, order in (("c2", "B2"), ("c3", "C3")):
        with pytest.raises(ToolTimeout):
            await executor.call(
                "pay", {"order_id": order, "how": "timeout"}, run_id="r", call_id=call_id
            )
    await executor.resolve_effect("pay:B2", outcome="failed", reviewer="bob", reason="no charge")
    await executor.close()
    code = await asyncio.to_thread(main, ["--no-color", "ledger", "audit", "--db", str(path)])
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("effect keys: 3")
    assert (code, [line.split() for line in lines[start + 1 : start + 5]]) == (
        1,
        [
            ["key", "status", "run", "call", "outcome"],
            ["pay:A1", "committed", "r", "c1", "call.succeeded"],
            ["pay:B2", "resolved", "failed", "by", "bob", "r", "c2", "call.timed_out"],
            ["pay:C3", "ambiguous", "r", "c3", "call.timed_out"],
        ],
    )
    assert lines[-2:] == [
        "problems: 1",
        "  ambiguous (seq 12): effect pay:C3: call c3 (pay) timed out after its body started; "
        "the effect may or may not have happened, and no effect.resolved says which",
    ]
    code = await asyncio.to_thread(
        main, ["--no-color", "ledger", "audit", "--db", str(path), "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert (code, [c["effect_key"] for c in report["calls"]]) == (1, ["pay:A1", "pay:B2", "pay:C3"])
    assert [(e["key"], e["status"], e["call_id"], e["resolution"]) for e in report["effects"]] == [
        ("pay:A1", "committed", "c1", None),
        (
            "pay:B2",
            "free",
            "c2",
            {
                "outcome": "failed",
                "reviewer": "bob",
                "reason": "no charge",
                "seq": 17,
                "forced": False,
                "in_flight": False,
            },
        ),
        ("pay:C3", "ambiguous", "c3", None),
    ]
    assert [(p["kind"], p["key"], p["call_id"]) for p in report["problems"]] == [
        ("ambiguous", "pay:C3", "c3")
    ]
