"""``agent-adapter demo``: a support agent on the real OpenAI Agents SDK, no network.

A scripted model (``agents.testing.ScriptedModel``) plays the LLM: it looks up an order
(a cached read tool) and asks to refund it (``confirm=True``, effect key
``refund:{order_id}``). The run pauses for approval; the person at the terminal (or
``--approve`` / ``--deny`` / ``--edit-amount``) decides through ``resolve_interruptions``
and the run resumes. A second turn asks for the same refund again: the lookup comes from
the cache and the refund is refused with ``DuplicateEffect`` although it was approved.
Then the audit of the SQLite ledger is printed.

Without a terminal and without a decision flag the refund is denied (fail closed), so
the demo never waits for input nobody can give.

``--db`` is replaced on each run only when it is the demo's own ledger (it carries
``DEMO_MARK`` in its meta); any other file is refused and left as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import logging
import os
import select
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, Protocol

from agents import Agent, RunConfig
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from .bridges.openai_agents import function_tools, resolve_interruptions, review_interruptions
from .bridges.openai_agents import run as run_agent
from .engine import (
    CallbackApproval,
    Decision,
    DeferredApproval,
    Executor,
    Registry,
    current_call,
)
from .errors import AdapterError, DuplicateEffect, LedgerError, ToolError
from .ledger import Event, SQLiteLedger, replay

__all__ = [
    "AMOUNT_CENTS",
    "DEMO_MARK",
    "ORDER_ID",
    "PENDING_ORDER_ID",
    "PENDING_RUN_ID",
    "RUN_ID",
    "DemoRefused",
    "Style",
    "build_registry",
    "run",
]


class Style(Protocol):
    """How the demo colours its lines: the CLI's ``Style`` (the CLI passes it in
    ``args.style``; the demo never imports the CLI, which imports the demo)."""

    def paint(self, text: str, *styles: str) -> str:
        """``text`` in ``styles``."""
        ...

    def tag(self, tag: str) -> str:
        """An event tag coloured by what it means."""
        ...


class DemoRefused(Exception):
    """The demo will not run as asked (a ``--db`` it must not replace); one line, the CLI
    prints it as an expected failure."""


RUN_ID = "demo-run"
#: The meta row that marks a ledger file as the demo's own (written in the transaction
#: that creates the file): the only kind of file ``--db`` replaces.
DEMO_MARK = ("created_by", "agent-adapter demo")
ORDER_ID = "A1001"
AMOUNT_CENTS = 4250
#: Turn 3's run and refund, left pending for a reviewer (the inbox's request to try).
PENDING_RUN_ID = "demo-run-2"
PENDING_ORDER_ID = "A1002"
PENDING_REFUND: dict[str, Any] = {"order_id": PENDING_ORDER_ID, "amount_cents": 599}
ORDERS: dict[str, dict[str, Any]] = {
    ORDER_ID: {
        "order_id": ORDER_ID,
        "customer": "Ada Lovelace",
        "item": "mechanical keyboard",
        "total_cents": AMOUNT_CENTS,
        "status": "delivered",
    }
}


def build_registry(refunds: list[dict[str, Any]]) -> Registry:
    """The demo's tools; ``refunds`` collects every refund the payment "API" received."""
    registry = Registry()

    @registry.tool(cache=300)
    async def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order by its id (read-only; results are cached for five minutes)."""
        order = ORDERS.get(order_id)
        if order is None:
            raise ToolError(f"there is no order {order_id}")
        return dict(order)

    @registry.tool(confirm=True, effect="refund:{order_id}", timeout=10)
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order. Amounts are integer minor units (cents)."""
        call = current_call()
        key = call.effect_key if call is not None else None
        # The effect key doubles as the payment API's idempotency key.
        refunds.append({"order_id": order_id, "amount_cents": amount_cents, "key": key})
        return f"refunded {amount_cents} cents on order {order_id}"

    return registry


def _last_tool_output(call: ModelCall) -> str:
    items = call.input if isinstance(call.input, list) else []
    for item in reversed(items):
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            return str(item.get("output", ""))
    return ""


def _reply(call: ModelCall) -> Any:
    """The scripted model's last message of turn 1: it reads what the refund tool said."""
    output = _last_tool_output(call)
    try:
        error = json.loads(output).get("error")
    except (ValueError, AttributeError):
        error = None
    if error:
        text = f"I could not refund order {ORDER_ID}: {error.get('message', 'refused')}."
    else:
        text = f"Done: {output}. You will see it on your statement in a few days."
    return [assistant_message(text)]


def _script() -> list[Any]:
    refund_args = {"order_id": ORDER_ID, "amount_cents": AMOUNT_CENTS}
    return [
        # turn 1
        [function_call("lookup_order", {"order_id": ORDER_ID}, call_id="call_lookup_1")],
        [function_call("refund", refund_args, call_id="call_refund_1")],
        ModelStep.respond(_reply),
        # turn 2: the customer asks again; the model looks up and refunds again
        [function_call("lookup_order", {"order_id": ORDER_ID}, call_id="call_lookup_2")],
        [function_call("refund", refund_args, call_id="call_refund_2")],
    ]


class _Narrator:
    """A hook that prints each call's outcome and each approval as the ledger records them."""

    name = "demo-narrator"

    def __init__(self, out: IO[str], style: Style) -> None:
        self._out = out
        self._style = style
        self._args: dict[tuple[str, str], Any] = {}

    def before_tool(self, call: Any) -> None:
        # Runs again after an approved edit: the outcome line shows what actually ran.
        self._args[(call.ctx.run_id, call.ctx.call_id)] = call.args

    def on_event(self, event: Event) -> None:
        key = (event.run_id, event.call_id)
        style = self._style
        if event.type == "call.requested" and key not in self._args:
            args = getattr(event, "args", None)
            if isinstance(args, str):  # the SDK passes the model's JSON text
                try:
                    args = json.loads(args)
                except ValueError:
                    pass
            self._args[key] = args
        elif event.type in ("approval.granted", "approval.denied"):
            who = getattr(event, "reviewer", "")
            how = getattr(event, "source", "")
            edited = " (edited arguments)" if getattr(event, "edited", False) else ""
            if who:
                print(f"  {style.tag(event.type)} by {who} via {how}{edited}", file=self._out)
            else:  # failing closed: nobody decided
                why = getattr(event, "reason", "")
                print(f"  {style.tag(event.type)}: no reviewer ({why})", file=self._out)
        elif event.is_outcome:
            args = json.dumps(self._args.pop(key, None), separators=(",", ":"))
            detail = ""
            if event.type in ("call.succeeded", "call.cached"):
                detail = json.dumps(getattr(event, "result", None), separators=(",", ":"))
            elif event.type == "call.duplicate":
                detail = f"effect {getattr(event, 'key', '')} was already committed"
            elif hasattr(event, "reason"):
                detail = str(event.reason)
            elif hasattr(event, "error"):
                detail = str(event.error)
            if len(detail) > 100:
                detail = detail[:97] + "..."
            print(
                f"  tool {style.paint(event.tool, 'bold')} {args} -> {style.tag(event.type)}"
                + (f" {detail}" if detail else ""),
                file=self._out,
            )


def _reviewer(args: argparse.Namespace) -> str:
    if getattr(args, "reviewer", None):
        return str(args.reviewer)
    try:
        return getpass.getuser()
    except Exception:
        return "operator"


def _decider(
    args: argparse.Namespace, out: IO[str], style: Style, stdin: IO[str]
) -> Callable[[Any], Any]:
    """The approval callback: the flags, else the terminal, else deny (fail closed)."""
    reviewer = _reviewer(args)

    async def decide(request: Any) -> Decision:
        amount = request.args.get("amount_cents")
        order = request.args.get("order_id")
        print(
            style.paint(f"  approval needed: refund {amount} cents on order {order}", "yellow"),
            file=out,
        )
        if args.approve:
            print(f"  --approve: approved as {reviewer}", file=out)
            return Decision(approved=True, reviewer=reviewer, reason="--approve")
        if args.deny:
            print(f"  --deny: denied as {reviewer}", file=out)
            return Decision(approved=False, reviewer=reviewer, reason="--deny")
        if args.edit_amount is not None:
            print(f"  --edit-amount: approved for {args.edit_amount} cents as {reviewer}", file=out)
            return _edit(request, args.edit_amount, reviewer)
        if not stdin.isatty():
            print(
                "  no terminal to ask (and no --approve, --deny or --edit-amount): "
                "denied, failing closed",
                file=out,
            )
            # Nobody decided: no reviewer is recorded (the OS user is not one), only why.
            return Decision(approved=False, reviewer="", reason="no terminal to ask")
        return _ask(request, reviewer, out, stdin)

    return decide


def _edit(request: Any, amount: int, reviewer: str) -> Decision:
    edits = {**request.args, "amount_cents": amount}
    return Decision(approved=True, reviewer=reviewer, reason="amount edited", edits=edits)


def _ask(request: Any, reviewer: str, out: IO[str], stdin: IO[str]) -> Decision:
    # Read in the loop's own thread: nothing else runs while the run waits for a person.
    # asyncio.run's SIGINT handler only schedules a cancellation, which a blocked read
    # never lets run, so ^C gets Python's default handler back for the read itself.
    def read(prompt: str) -> str | None:
        if threading.current_thread() is not threading.main_thread():
            out.write(prompt)
            out.flush()
            line = stdin.readline()
        else:
            # The handler is in place before the prompt shows: a ^C typed the moment it
            # appears must not reach asyncio's handler, which a blocked read never runs.
            previous = signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                with _signal_wakeup() as wakeup:
                    out.write(prompt)
                    out.flush()
                    _wait_for_line(stdin, wakeup)
                    line = stdin.readline()
            finally:
                signal.signal(signal.SIGINT, previous)
        return line.strip() if line else None  # "" is an empty answer, None is EOF

    while True:
        answer = read("  approve? [y]es / [n]o / [e]dit amount: ")
        if answer is None:
            print("\n  end of input: denied, failing closed", file=out)
            return Decision(approved=False, reviewer="", reason="end of input")
        choice = answer.lower()[:1]
        if choice == "y":
            return Decision(approved=True, reviewer=reviewer, reason="approved at the terminal")
        if choice == "n":
            return Decision(approved=False, reviewer=reviewer, reason="denied at the terminal")
        if choice == "e":
            text = read("  new amount in cents: ")
            if text is not None and text.isdigit() and int(text) > 0:
                return _edit(request, int(text), reviewer)
            print("  an amount is a whole number of cents, 1 or more", file=out)


@contextlib.contextmanager
def _signal_wakeup() -> Iterator[int]:
    """A pipe that gets a byte for every signal that arrives while it is installed (as
    ``signal.set_wakeup_fd``); yields its read end. Main thread only."""
    wake_r, wake_w = os.pipe()
    try:
        # Written by the C-level handler: it must never block, even with nobody reading.
        os.set_blocking(wake_w, False)
        previous = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        try:
            yield wake_r
        finally:
            signal.set_wakeup_fd(previous)
    finally:
        os.close(wake_r)
        os.close(wake_w)


def _wait_for_line(stdin: IO[str], wakeup: int) -> None:
    """Block until ``stdin`` has input, or until a signal arrives: the ^C handler
    (``default_int_handler``) then raises ``KeyboardInterrupt`` here.

    A blocking ``readline`` alone can sleep through a ^C: the signal's C handler only
    marks it, and Python runs the handler between bytecodes. A ^C that lands after the
    last of those and before the read starts, or in another thread (the ledger's), does
    not interrupt the read, which then waits for a line nobody types. The wakeup pipe
    gets the signal's byte whenever it came, so the select returns either way.
    """
    try:
        fd = stdin.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream
        return  # never blocks: nothing to wait for
    while True:
        ready, _, _ = select.select([fd, wakeup], [], [])
        if fd in ready:
            return
        # A signal whose handler did not raise (not ^C): drain its byte, keep waiting.
        os.read(wakeup, 512)


def _refuse(path: Path, what: str) -> DemoRefused:
    # Never "remove it": a ledger holds the effect keys that stop a second refund.
    return DemoRefused(
        f"the demo replaces only a ledger it wrote itself: {path} {what}; it was left "
        "unchanged (pass --db with a new file name)"
    )


def _fresh_ledger_path(path: Path) -> str:
    """Make room for a fresh demo ledger at ``path``: remove the demo's own earlier one.
    Returns the line that says where the ledger is.

    A file is the demo's when it is a regular file, an agent-adapter ledger, and carries
    ``DEMO_MARK`` (read with the ledger's read-only probe, which changes nothing). Anything
    else (another ledger, another program's database, a text file, a directory, a link)
    raises ``DemoRefused`` and is left as it was: ``--db`` names a file that may matter.
    """
    if path.is_symlink():
        raise _refuse(path, "is a symbolic link")
    if path.is_dir():
        raise DemoRefused(f"{path} is a directory; pass --db FILE")
    removed = False
    if not path.exists():
        # A WAL or journal without its database would be read into the new one.
        for suffix in ("-wal", "-journal"):
            if Path(f"{path}{suffix}").exists():
                raise _refuse(path, f"does not exist, but {path}{suffix} does")
    else:
        if not path.is_file():
            raise _refuse(path, "is not a regular file")
        if path.stat().st_size == 0:
            raise _refuse(path, "is an empty file")
        try:
            meta = SQLiteLedger.probe(path)
        except LedgerError as exc:
            raise _refuse(path, _reason(exc, path)) from None
        if meta is None:
            raise _refuse(path, "is an empty SQLite database")
        if meta.get(DEMO_MARK[0]) != DEMO_MARK[1]:
            raise _refuse(path, "is an agent-adapter ledger that the demo did not write")
        # The mark too (first: it sits beside the file a link points to): it is the old
        # ledger's, and would refuse a new one in its place.
        parts = [Path(part) for part in SQLiteLedger.files(path)]
        for part in parts:
            if part.exists():
                part.unlink()
                removed = True
    note = " (removed the previous one, so every run starts fresh)" if removed else ""
    return f"ledger: {path.resolve()}{note}"


def _reason(exc: LedgerError, path: Path) -> str:
    """What the probe found (``is not an SQLite database ...``), without the path and the
    "left unchanged" that the demo's own message says."""
    reason = str(exc).replace("; it was left unchanged", "")
    for prefix in (f"ledger {path} ", f"{path} "):
        if reason.startswith(prefix):
            return reason[len(prefix) :]
    return f"cannot be read as a ledger ({reason})"


async def run(args: argparse.Namespace, out: IO[str], *, stdin: IO[str] | None = None) -> int:
    """Run the demo; returns the exit status (0 when it ran to the end)."""
    style: Style = args.style
    stdin = stdin if stdin is not None else sys.stdin
    sdk_logger = logging.getLogger("openai.agents")
    sdk_level = sdk_logger.level
    if not getattr(args, "logging", False):
        # The SDK logs a tool error that reaches the host (our DuplicateEffect) at ERROR;
        # the demo prints it itself. With --log-format the host's logging shows it.
        sdk_logger.setLevel(logging.CRITICAL)
    try:
        return await _run(args, out, stdin, style)
    finally:
        sdk_logger.setLevel(sdk_level)


async def _run(args: argparse.Namespace, out: IO[str], stdin: IO[str], style: Style) -> int:
    path = Path(args.db)
    where = _fresh_ledger_path(path)  # first: a refusal is the only line the demo prints
    title = "agent-adapter demo: a support agent on the OpenAI Agents SDK"
    print(style.paint(title, "bold") + " (scripted model: no API key, no network)", file=out)
    print(where, file=out)

    refunds: list[dict[str, Any]] = []
    registry = build_registry(refunds)
    # What the CLI gives the demo (build_parser's defaults for the demo command): its
    # name, its audit renderer and its logging hooks; the demo never imports the CLI.
    prog: str = args.prog
    hooks = [_Narrator(out, style), *args.log_hooks(getattr(args, "logging", False))]
    # A file it creates carries DEMO_MARK from its first commit.
    ledger = SQLiteLedger(str(path), created_meta=(DEMO_MARK,))
    executor = await Executor.open(registry, ledger=ledger, hooks=hooks)
    try:
        model = ScriptedModel(_script())
        agent = Agent(
            name="support",
            instructions="Help customers with their orders. Refunds need a human's approval.",
            tools=list(function_tools(registry, executor=executor)),
            model=model,
        )
        config = RunConfig(tracing_disabled=True)
        context = {"run_id": RUN_ID}

        section = style.paint("turn 1", "cyan", "bold")
        print(f"\n{section}", file=out)
        first = "My keyboard (order A1001) arrived broken. Please refund it."
        print(f"customer: {first}", file=out)
        result = await run_agent(agent, first, run_config=config, context=context)
        decide = CallbackApproval(_decider(args, out, style, stdin), reviewer=_reviewer(args))
        while result.interruptions:
            paused = ", ".join(i.tool_name or "?" for i in result.interruptions)
            print(f"  run paused: {paused} needs approval", file=out)
            state = await resolve_interruptions(result, decide, run_id=RUN_ID)
            result = await run_agent(agent, state, run_config=config, context=context)
        print(f"agent: {result.final_output}", file=out)

        section = style.paint("turn 2: the same refund again", "cyan", "bold")
        print(f"\n{section}", file=out)
        committed = executor.state.effects.get(f"refund:{ORDER_ID}")
        if committed is None or committed.status != "committed":
            print(
                "  the refund was denied: the SDK rejected the call and the tool never ran\n"
                "  (the ledger records who denied it); nothing a retry could duplicate; skipped",
                file=out,
            )
        else:
            await _retry(agent, config, context, out, style)
        pending = await _leave_pending(registry, executor, ledger, out, style)
        print(f"\nrefunds the payment API received: {len(refunds)}", file=out)
        for r in refunds:
            print(f"  {r['amount_cents']} cents on {r['order_id']} (key {r['key']})", file=out)

        section = style.paint(f"audit of {path}", "cyan", "bold")
        print(f"\n{section}", file=out)
        events = [e async for e in ledger.read()]
        audit = replay(events, await ledger.verify())
        for line in args.render_audit(audit, style):
            print(line, file=out)
        print(file=out)
        for line in _hints(path, prog, pending):
            print(line, file=out)
    finally:
        await executor.close()
    return 0


def _hints(path: Path, prog: str, pending: str) -> list[str]:
    """Commands that explore the ledger, as they run from this directory (a test runs
    each), and how to put the command on PATH when it is not. ``pending`` is the request
    id turn 3 left open."""
    prefix, path_advice = _command(prog)
    db = shlex.quote(str(path))
    lines = ["explore the ledger (from this directory):"]
    lines += [f"  {prefix} ledger {action} --db {db}" for action in _HINTED]
    # What a reviewer runs to answer deferred requests (DeferredApproval): turn 3's is open.
    lines.append("decide turn 3's open request in a browser (the approval inbox; Ctrl-C stops it):")
    lines.append(f"  {prefix} approvals serve --db {db}")
    lines.append("or at the terminal:")
    lines.append(f"  {prefix} approvals list --db {db}")
    lines.append(f"  {prefix} approvals approve {pending} --db {db} --reason 'shipping was late'")
    if path_advice is not None:
        lines.append(f"to type {prog} alone, put it on PATH: {path_advice}")
    return lines


_HINTED = ("show", "audit", "verify", "export")


def _command(prog: str) -> tuple[str, str | None]:
    """How to run this command again from this directory, and how to put it on PATH
    (None when ``agent-adapter`` already finds it there).

    ``make demo`` runs ``.venv/bin/agent-adapter``, which is not on PATH: a bare
    ``agent-adapter`` would not be found, or would be another installation's.
    """
    typed = Path(sys.argv[0])
    if typed.name == prog:  # run as the script: the path as typed works from here
        script = typed
    else:  # python -m agent_adapter.cli, or in-process: the script of this environment
        script = Path(sys.executable).parent / prog
        if not script.is_file():
            return f"{shlex.quote(sys.executable)} -m agent_adapter.cli", None
        with contextlib.suppress(ValueError):
            script = script.relative_to(Path.cwd())
    found = shutil.which(prog)
    if found is not None and Path(found).resolve() == script.resolve():
        return prog, None
    text = str(script) if script.is_absolute() or script.parent != Path() else f"./{script}"
    bin_dir = script.parent
    activate = bin_dir / "activate"
    if activate.is_file():
        advice = f"source {shlex.quote(str(activate))}"
    else:
        advice = f'export PATH="{bin_dir.resolve()}:$PATH"'
    return shlex.quote(text), advice


async def _leave_pending(
    registry: Registry, executor: Executor, ledger: SQLiteLedger, out: IO[str], style: Style
) -> str:
    """Turn 3: another customer's refund, asked of a ``DeferredApproval`` (requests and
    answers in the ledger) and left open, so the inbox has a request to try; its id.

    Its run stays paused: deciding it later records the decision (``approval.answered``,
    shown by ``ledger audit`` and ``approvals list``); the demo has ended, so nothing runs
    the refund.
    """
    section = style.paint("turn 3: another refund, left for a reviewer", "cyan", "bold")
    print(f"\n{section}", file=out)
    ask = f"Order {PENDING_ORDER_ID} was late. Please refund the shipping."
    print(f"customer: {ask}", file=out)
    model = ScriptedModel([[function_call("refund", PENDING_REFUND, call_id="call_refund_3")]])
    agent = Agent(
        name="support",
        instructions="Help customers with their orders. Refunds need a human's approval.",
        tools=list(function_tools(registry, executor=executor)),
        model=model,
    )
    context = {"run_id": PENDING_RUN_ID}
    config = RunConfig(tracing_disabled=True)
    result = await run_agent(agent, ask, run_config=config, context=context)
    review = await review_interruptions(result, DeferredApproval(ledger), run_id=PENDING_RUN_ID)
    [request_id] = review.pending
    amount, order = PENDING_REFUND["amount_cents"], PENDING_REFUND["order_id"]
    print(f"  run paused: refund {amount} cents on order {order} needs approval", file=out)
    print(f"  asked a DeferredApproval (it lives in the ledger): {request_id} pending", file=out)
    return request_id


async def _retry(
    agent: Agent[Any], config: RunConfig, context: dict[str, Any], out: IO[str], style: Style
) -> None:
    again = "I got no confirmation. Refund order A1001 again, please."
    print(f"customer: {again}", file=out)
    policy = CallbackApproval(
        lambda request: Decision(
            approved=True, reviewer="auto-policy", reason="repeat of an approved refund"
        )
    )
    try:
        result = await run_agent(agent, again, run_config=config, context=context)
        while result.interruptions:
            print("  run paused: refund needs approval; an automatic policy approves it", file=out)
            state = await resolve_interruptions(result, policy, run_id=RUN_ID)
            result = await run_agent(agent, state, run_config=config, context=context)
        print(f"agent: {result.final_output}", file=out)
    except DuplicateEffect as exc:
        verdict = style.paint("refused: DuplicateEffect", "red", "bold")
        print(f"host: {verdict}: {exc}", file=out)
        print("  the approval did not matter: the refund did not run a second time", file=out)
    except AdapterError as exc:  # pragma: no cover - any other refusal is printed, not raised
        print(f"host: {type(exc).__name__}: {exc}", file=out)
