"""The bridge conformance kit: shared scenarios a bridge's driver runs, checked on the ledger.

A driver says how to make one tool call through its framework (the person's answer given
through the framework's own approval mechanism) and what the caller got back. The kit
builds the registry, the executor and the ledger, runs each scenario through the driver
and checks what the ledger proves (DESIGN.md, "Bridge conformance kit").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from ..engine import Decision, DeferredApproval, Executor, Registry, digest
from ..errors import ToolError
from ..ledger import MemoryLedger, replay

__all__ = [
    "Approve",
    "Attempt",
    "BridgeDriver",
    "Channel",
    "ConformanceFailure",
    "Deny",
    "Edit",
    "Leave",
    "Reply",
    "SCENARIOS",
    "Scenario",
    "Tools",
    "decision_of",
    "run_scenario",
    "scenarios_for",
]


@dataclass(frozen=True)
class Approve:
    """The person approves the call as asked."""


@dataclass(frozen=True)
class Deny:
    """The person denies the call."""

    reason: str = "no"


@dataclass(frozen=True)
class Edit:
    """The person approves other arguments (a complete replacement)."""

    args: dict[str, Any]


@dataclass(frozen=True)
class Leave:
    """Nobody answers now: the call is left to the executor's deferred port (pending)."""


Answer = Approve | Deny | Edit | Leave


def decision_of(answer: Answer | None, *, reviewer: str = "kit") -> Decision:
    """The ``Decision`` a person's answer stands for, for a driver whose framework asks an
    approval port: approve, approve an edit (complete arguments), or deny (``Leave`` and
    no answer deny too: nobody answered)."""
    if isinstance(answer, Approve):
        return Decision(approved=True, reviewer=reviewer)
    if isinstance(answer, Edit):
        return Decision(approved=True, reviewer=reviewer, edits=dict(answer.args))
    reason = answer.reason if isinstance(answer, Deny) else "nobody answered"
    return Decision(approved=False, reviewer=reviewer, reason=reason)


@dataclass(frozen=True)
class Attempt:
    """One tool call a driver makes through its framework.

    ``args`` is what the model sends (a dict). ``answer`` is what the person says if the
    framework asks (None: nobody is there to ask). ``run_id``/``call_id``, when given, must
    reach the executor as those ids (a repeat of a call under the same ids).
    """

    tool: str
    args: dict[str, Any]
    answer: Answer | None = None
    run_id: str | None = None
    call_id: str | None = None


#: Where a refusal went: shown to the model as the tool's output, raised to the host,
#: or (a protocol boundary such as MCP) returned to the client as an error result.
Channel = Literal["model", "host", "result"]


@dataclass(frozen=True)
class Reply:
    """What the caller got back from one attempt, as the framework delivered it.

    ``value`` is the tool's value (decoded JSON) when it succeeded; ``kind`` and
    ``channel`` name a refusal and where it went; ``asked`` counts how many times the
    framework asked the person (or a port) about the call.
    """

    value: Any = None
    kind: str | None = None
    channel: Channel | None = None
    asked: int = 0


@runtime_checkable
class BridgeDriver(Protocol):
    """How a bridge makes one call through its framework.

    ``name`` is the bridge's target name (tools are registered with ``targets=[name]``).
    ``supports_edit`` says whether the framework can carry an edited approval (MCP's
    approval form cannot). ``channel(kind)`` is the bridge's table: where a refusal of
    that kind goes. ``call`` makes the attempt through the real framework and reports
    what came back; it raises only for a failure of the driver itself.
    """

    name: str
    supports_edit: bool

    def channel(self, kind: str) -> Channel:
        """Where the bridge sends a refusal of ``kind``."""
        ...

    async def call(self, executor: Executor, attempt: Attempt) -> Reply:
        """Make ``attempt`` through the framework, with ``executor`` behind it."""
        ...


class ConformanceFailure(AssertionError):
    """A scenario found the bridge breaking the contract; the message says what."""


class Tools:
    """The kit's registry (exported to one bridge) and what each body did."""

    def __init__(self, target: str) -> None:
        self.registry = Registry()
        self.ran: list[tuple[str, dict[str, Any]]] = []
        ran = self.ran

        @self.registry.tool(confirm=True, effect="refund:{order_id}", targets=[target])
        async def refund(order_id: str, amount_cents: int) -> dict[str, Any]:
            """Refund an order (integer cents)."""
            ran.append(("refund", {"order_id": order_id, "amount_cents": amount_cents}))
            return {"refunded": amount_cents, "order_id": order_id}

        @self.registry.tool(targets=[target])
        async def lookup(order_id: str) -> dict[str, Any]:
            """Look an order up."""
            ran.append(("lookup", {"order_id": order_id}))
            return {"order_id": order_id, "status": "shipped"}

        @self.registry.tool(targets=[target])
        async def cancel(order_id: str) -> dict[str, Any]:
            """Cancel an order; this one always refuses, on purpose."""
            ran.append(("cancel", {"order_id": order_id}))
            raise ToolError(f"order {order_id} has shipped")

        @self.registry.tool(targets=[target])
        async def explode(order_id: str) -> dict[str, Any]:
            """Fail unexpectedly."""
            ran.append(("explode", {"order_id": order_id}))
            raise RuntimeError("the database went away")


@dataclass(frozen=True)
class Scenario:
    """One shared check: its name, what it proves, and the function that runs it."""

    name: str
    proves: str
    run: Callable[[BridgeDriver, Executor, Tools], Awaitable[None]]
    needs_edit: bool = False


def _fail(scenario: str, message: str) -> ConformanceFailure:
    return ConformanceFailure(f"{scenario}: {message}")


async def _audit(executor: Executor, scenario: str) -> Any:
    events = [e async for e in executor.ledger.read()]
    audit = replay(events, await executor.ledger.verify())
    problems = audit.problems()
    if problems:
        raise _fail(scenario, f"the audit finds problems: {problems}")
    for record in audit.calls.values():
        # (A deferred request recorded before any call reached the executor is no call.)
        requested = any(e.type == "call.requested" for e in record.events)
        if requested and record.outcomes != 1:
            raise _fail(scenario, f"call {record.call_id} has {record.outcomes} outcomes, not 1")
    return audit


def _expect(scenario: str, what: str, got: Any, want: Any) -> None:
    if got != want:
        raise _fail(scenario, f"{what}: got {got!r}, expected {want!r}")


def _refused(driver: BridgeDriver, scenario: str, reply: Reply, kind: str) -> None:
    _expect(scenario, "the refusal's kind", reply.kind, kind)
    _expect(scenario, f"where {kind} went", reply.channel, driver.channel(kind))


REFUND = {"order_id": "A1", "amount_cents": 500}


async def _approved_runs_once(driver: BridgeDriver, executor: Executor, tools: Tools) -> None:
    name = "approved"
    reply = await driver.call(executor, Attempt("refund", dict(REFUND), Approve()))
    _expect(name, "the value", reply.value, {"refunded": 500, "order_id": "A1"})
    _expect(name, "bodies that ran", tools.ran, [("refund", REFUND)])
    audit = await _audit(executor, name)
    (record,) = [r for r in audit.calls.values() if r.ran_digest is not None]
    _expect(name, "the digest that ran", record.ran_digest, digest(REFUND))
    approvals = [(a.approved, a.digest) for a in record.approvals]
    _expect(name, "the approvals of the call", approvals, [(True, digest(REFUND))])


async def _denied_never_starts(driver: BridgeDriver, executor: Executor, tools: Tools) -> None:
    name = "denied"
    reply = await driver.call(executor, Attempt("refund", dict(REFUND), Deny("too much")))
    _refused(driver, name, reply, "approval-denied")
    _expect(name, "bodies that ran", tools.ran, [])
    audit = await _audit(executor, name)
    started = [r.call_id for r in audit.calls.values() if r.started]
    _expect(name, "calls that started", started, [])
    denials = [a.approved for r in audit.calls.values() for a in r.approvals]
    _expect(name, "the recorded decisions", denials, [False])


async def _edit_runs_the_edited(driver: BridgeDriver, executor: Executor, tools: Tools) -> None:
    name = "edited"
    edited = {"order_id": "A1", "amount_cents": 200}
    reply = await driver.call(executor, Attempt("refund", dict(REFUND), Edit(edited)))
    _expect(name, "the value", reply.value, {"refunded": 200, "order_id": "A1"})
    _expect(name, "bodies that ran", tools.ran, [("refund", edited)])
    audit = await _audit(executor, name)
    (record,) = [r for r in audit.calls.values() if r.ran_digest is not None]
    _expect(name, "the digest that ran", record.ran_digest, digest(edited))
    _expect(name, "the approved digest", record.approvals[-1].digest, digest(edited))


async def _pending_never_starts(driver: BridgeDriver, executor: Executor, tools: Tools) -> None:
    name = "pending"
    reply = await driver.call(executor, Attempt("refund", dict(REFUND), Leave()))
    _expect(name, "the refusal's kind", reply.kind, "approval-pending")
    _expect(name, "bodies that ran", tools.ran, [])
    events = [e async for e in executor.ledger.read()]
    pending = [e.digest for e in events if e.type == "approval.pending"]  # type: ignore[attr-defined]
    _expect(name, "the pending requests' digests", pending, [digest(REFUND)])
    _expect(name, "calls that started", [e for e in events if e.type == "call.started"], [])
    await _audit(executor, name)


async def _invalid_never_asked(driver: BridgeDriver, executor: Executor, tools: Tools) -> None:
    name = "invalid"
    bad = {"order_id": "A1", "amount_cents": "500"}
    reply = await driver.call(executor, Attempt("refund", bad, Approve()))
    _refused(driver, name, reply, "tool-args-invalid")
    _expect(name, "times the person was asked", reply.asked, 0)
    _expect(name, "bodies that ran", tools.ran, [])
    events = [e.type async for e in executor.ledger.read()]
    _expect(name, "approval events", [t for t in events if t.startswith("approval.")], [])
    await _audit(executor, name)


async def _repeat_runs_once(driver: BridgeDriver, executor: Executor, tools: Tools) -> None:
    name = "repeated"
    ids = {"run_id": "kit-run-1", "call_id": "kit-call-1"}
    first = await driver.call(executor, Attempt("refund", dict(REFUND), Approve(), **ids))
    again = await driver.call(executor, Attempt("refund", dict(REFUND), Approve(), **ids))
    _expect(name, "the first value", first.value, {"refunded": 500, "order_id": "A1"})
    _expect(name, "the repeated value", again.value, first.value)
    _expect(name, "bodies that ran", tools.ran, [("refund", REFUND)])
    events = [(e.type, e.run_id, e.call_id) async for e in executor.ledger.read()]
    replayed = [e for e in events if e[0] == "call.replayed"]
    _expect(name, "replays recorded", replayed, [("call.replayed", *ids.values())])
    await _audit(executor, name)


async def _duplicate_refused(driver: BridgeDriver, executor: Executor, tools: Tools) -> None:
    name = "duplicate"
    await driver.call(executor, Attempt("refund", dict(REFUND), Approve()))
    reply = await driver.call(executor, Attempt("refund", dict(REFUND), Approve()))
    _refused(driver, name, reply, "duplicate-effect")
    _expect(name, "bodies that ran", tools.ran, [("refund", REFUND)])
    await _audit(executor, name)


async def _tool_error_refused(driver: BridgeDriver, executor: Executor, tools: Tools) -> None:
    name = "tool-error"
    reply = await driver.call(executor, Attempt("cancel", {"order_id": "A1"}))
    _refused(driver, name, reply, "tool-error")
    await _audit(executor, name)


async def _failure_refused(driver: BridgeDriver, executor: Executor, tools: Tools) -> None:
    name = "tool-failed"
    reply = await driver.call(executor, Attempt("explode", {"order_id": "A1"}))
    _refused(driver, name, reply, "tool-failed")
    await _audit(executor, name)


async def _plain_call(driver: BridgeDriver, executor: Executor, tools: Tools) -> None:
    name = "plain"
    reply = await driver.call(executor, Attempt("lookup", {"order_id": "A1"}))
    _expect(name, "the value", reply.value, {"order_id": "A1", "status": "shipped"})
    _expect(name, "times the person was asked", reply.asked, 0)
    _expect(name, "bodies that ran", tools.ran, [("lookup", {"order_id": "A1"})])
    await _audit(executor, name)


#: Every shared scenario, in the order the kit runs them.
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("plain", "a call that needs no approval runs once, nobody asked", _plain_call),
    Scenario(
        "approved",
        "an approved call runs once, with exactly the approved digest",
        _approved_runs_once,
    ),
    Scenario("denied", "a denied call never starts; the denial is recorded", _denied_never_starts),
    Scenario(
        "edited",
        "an edit runs the edited arguments only, under their digest",
        _edit_runs_the_edited,
        needs_edit=True,
    ),
    Scenario(
        "pending",
        "a call left to a deferred port never starts; the request is pending",
        _pending_never_starts,
    ),
    Scenario("invalid", "invalid arguments are never sent for approval", _invalid_never_asked),
    Scenario("repeated", "a repeated (run, call) never runs the body twice", _repeat_runs_once),
    Scenario(
        "duplicate",
        "a second call with a committed effect key is refused, not run",
        _duplicate_refused,
    ),
    Scenario(
        "tool-error", "a tool's own refusal goes where the bridge's table says", _tool_error_refused
    ),
    Scenario(
        "tool-failed", "an unexpected failure goes where the bridge's table says", _failure_refused
    ),
)


def scenarios_for(driver: BridgeDriver) -> list[Scenario]:
    """The scenarios that apply to ``driver`` (the edit one only where edits can travel)."""
    return [s for s in SCENARIOS if driver.supports_edit or not s.needs_edit]


async def run_scenario(driver: BridgeDriver, scenario: Scenario) -> None:
    """Run one scenario on a fresh registry, executor and memory ledger.

    The executor's own approval port is a ``DeferredApproval`` on that ledger (the port a
    call left unanswered meets). Raises ConformanceFailure saying what broke.
    """
    tools = Tools(driver.name)
    ledger = MemoryLedger()
    executor = Executor(tools.registry, ledger=ledger, approval=DeferredApproval(ledger))
    try:
        await scenario.run(driver, executor, tools)
    finally:
        await executor.close()
