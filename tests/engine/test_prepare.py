"""The bridge contract's decision point: ``Executor.prepare`` and ``ask_port``."""

from __future__ import annotations

from typing import Any

import pytest

from agent_adapter import CallbackApproval, CallContext, Decision, Executor, Registry
from agent_adapter.engine import ApprovalRequest, ask_port
from agent_adapter.errors import ApprovalDenied, ApprovalPending
from agent_adapter.ledger import MemoryLedger

REFUND = {"order_id": "A1", "amount_cents": 500}


def _registry(confirm: Any = True) -> Registry:
    registry = Registry()

    @registry.tool(confirm=confirm, effect="refund:{order_id}")
    async def refund(order_id: str, amount_cents: int) -> str:
        return f"refunded {amount_cents} on {order_id}"

    return registry


async def test_prepare_says_a_call_is_on_record_and_who_holds_its_key() -> None:
    """Before a call: not on record, key free. After it: the same (run, call) is on record
    (step 0 answers it), and another call of that key reads the key committed by it."""
    registry = _registry()
    ledger = MemoryLedger()
    spec = registry.get("refund")
    approve = CallbackApproval(lambda request: True)
    async with Executor(registry, ledger=ledger, approval=approve) as executor:
        first = CallContext(run_id="r1", call_id="c1")
        before = await executor.prepare(spec, REFUND, first)
        events_before = len([e async for e in ledger.read()])
        await executor.run_spec(spec, REFUND, first)
        again = await executor.prepare(spec, REFUND, first)
        other = await executor.prepare(spec, REFUND, CallContext(run_id="r1", call_id="c2"))
    assert (events_before, before.recorded, before.effect_state, before.effect_notice) == (
        0,
        False,
        None,
        "",
    )
    assert (again.recorded, other.recorded) == (True, False)
    assert (other.effect_state, other.effect_by_run_id, other.effect_by_call_id) == (
        "committed",
        "r1",
        "c1",
    )
    assert other.effect_notice == (
        "refund:A1 is already committed by call c1 (run r1): approving cannot make it run"
    )


async def test_prepare_recalls_a_cold_run_before_it_answers() -> None:
    """With a bounded history the run of a finished call may have gone cold; prepare
    brings it back, as run_spec does, so the call still reads as on record."""
    registry = _registry(confirm=False)
    spec = registry.get("refund")
    async with Executor(registry, ledger=MemoryLedger(), remember=1) as executor:
        await executor.run_spec(spec, REFUND, CallContext(run_id="r1", call_id="c1"))
        await executor.run_spec(
            spec, {"order_id": "B2", "amount_cents": 1}, CallContext(run_id="r2", call_id="c1")
        )
        cold = "r1" in executor.state.cold
        prepared = await executor.prepare(spec, REFUND, CallContext(run_id="r1", call_id="c1"))
    assert (cold, prepared.recorded) == (True, True)


def _broken(call: Any, ctx: Any) -> bool:
    raise RuntimeError("rule broke")


@pytest.mark.parametrize(
    ("confirm", "needs"),
    [(False, False), (True, True), (lambda call, ctx: call.args["amount_cents"] > 100, True),
     (lambda call, ctx: False, False), (_broken, True)],
    ids=["false", "true", "rule-yes", "rule-no", "rule-raises"],
)  # fmt: skip
async def test_prepare_and_step_6_share_the_confirm_rule(confirm: Any, needs: bool) -> None:
    """``needs_approval`` is the rule step 6 runs: where it says yes, a call with no port
    and no decision is denied; where it says no, the call runs. A rule that raises asks
    (fail closed) in both."""
    registry = _registry(confirm=confirm)
    spec = registry.get("refund")
    async with Executor(registry, ledger=MemoryLedger()) as executor:
        ctx = CallContext(run_id="r1", call_id="c1")
        prepared = await executor.prepare(spec, REFUND, ctx)
        try:
            await executor.run_spec(spec, REFUND, ctx)
            denied = False
        except ApprovalDenied:
            denied = True
    assert (prepared.needs_approval, denied) == (needs, needs)


async def test_a_decision_bound_to_the_prepared_digest_is_the_approval() -> None:
    """A bridge's answer, bound to ``prepared.digest``, approves exactly those arguments;
    bound to another digest it is ignored and (no port) the call is denied."""
    registry = _registry()
    spec = registry.get("refund")
    async with Executor(registry, ledger=MemoryLedger()) as executor:
        ctx = CallContext(run_id="r1", call_id="c1")
        prepared = await executor.prepare(spec, REFUND, ctx)
        good = Decision(approved=True, reviewer="alice", digest=prepared.digest)
        value = await executor.run_spec(
            spec, REFUND, CallContext(run_id="r1", call_id="c1", approval=good)
        )
        stale = Decision(approved=True, reviewer="alice", digest=prepared.digest)
        with pytest.raises(ApprovalDenied):
            await executor.run_spec(
                spec,
                {"order_id": "A1", "amount_cents": 900},
                CallContext(run_id="r1", call_id="c2", approval=stale),
            )
    assert value == "refunded 500 on A1"


def _request() -> ApprovalRequest:
    return ApprovalRequest(
        request_id="q1", run_id="r1", call_id="c1", tool="refund", args=REFUND, digest="d"
    )


class _Port:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def decide(self, request: ApprovalRequest) -> Any:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (True, (Decision(approved=True), "")),
        (False, (Decision(approved=False), "")),
        (Decision(approved=True, reviewer="bob"), (Decision(approved=True, reviewer="bob"), "")),
        (None, (None, "q1")),
        (ApprovalPending(request_id="q0"), (None, "q0")),
        (
            RuntimeError("inbox down"),
            (Decision(approved=False, reason="approval port failed: RuntimeError: inbox down"), ""),
        ),
    ],
    ids=["true", "false", "decision", "none", "pending", "raises"],
)
async def test_ask_port_answers_as_step_6_would(answer: Any, expected: Any) -> None:
    """A bool is a Decision; None or ApprovalPending holds the request open (under the id
    the port holds); a port that raises denies, naming the error (fail closed)."""
    assert await ask_port(_Port(answer), _request()) == expected


async def test_prepare_hears_what_another_writer_recorded(tmp_path: Any) -> None:
    """Two executors on one SQLite file (two processes' ledgers): a call one of them
    finished reads as on record in the other's prepare, with its key committed, though the
    other made no append since (it catches up first)."""
    from agent_adapter.ledger import SQLiteLedger

    registry = _registry()
    spec = registry.get("refund")
    path = tmp_path / "shared.db"
    approve = CallbackApproval(lambda request: True)
    async with (
        Executor(registry, ledger=SQLiteLedger(path), approval=approve) as first,
        Executor(registry, ledger=SQLiteLedger(path), approval=approve) as second,
    ):
        ctx = CallContext(run_id="r1", call_id="c1")
        await first.run_spec(spec, REFUND, ctx)
        same = await second.prepare(spec, REFUND, ctx)
        other = await second.prepare(spec, REFUND, CallContext(run_id="r1", call_id="c2"))
    assert (same.recorded, other.recorded, other.effect_state, other.effect_by_call_id) == (
        True,
        False,
        "committed",
        "c1",
    )
