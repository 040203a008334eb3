"""Operator decisions: ``agent-adapter approvals ...`` and ``agent-adapter effects ...``."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import shlex
from collections.abc import AsyncIterator, Sequence
from typing import IO, TYPE_CHECKING, Any

import msgspec

from ..errors import ToolArgsInvalid

if TYPE_CHECKING:
    from ..engine import PendingApproval
    from ..ledger import Ledger

from ._logging import log_hooks
from ._opening import CliError, open_ledger
from ._render import clock_text, compact, json_text, print_json_list, table

__all__ = [
    "cmd_approvals_approve",
    "cmd_approvals_deny",
    "cmd_approvals_list",
    "cmd_approvals_show",
    "cmd_effects_list",
    "cmd_effects_resolve",
    "parse_edits",
]


def _reviewer(args: argparse.Namespace) -> str:
    if args.reviewer:
        return str(args.reviewer)
    try:
        return f"{getpass.getuser()} (cli)"
    except Exception:
        return "cli"


def parse_edits(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs; a value that parses as JSON is that value, else the text.

    A value that no tool could take as an argument is refused (``CliError`` naming the
    key): one that nests deeper than arguments may (``MAX_ARGS_DEPTH``, the arguments
    object included), or a number JSON cannot hold (``NaN``, ``Infinity``, ``1e400``).
    """
    from ..engine import MAX_ARGS_DEPTH, json_problem, nests_deeper

    # The edited value sits inside the arguments object, one level down.
    limit = MAX_ARGS_DEPTH - 1
    edits: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--edit {pair!r}: expected key=value")
        # Measured on the text before it is parsed: the parser recurses once per level,
        # so a deep enough value would end the command in a RecursionError.
        if nests_deeper(raw.encode("utf-8", "surrogatepass"), limit):
            raise CliError(f"--edit {name}: the value must not nest deeper than {limit} levels")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        # json.loads takes NaN and Infinity, which the ledger would record as null: the
        # decision would then be about other arguments than the ones shown.
        problem = json_problem(value, limit)
        if problem is not None:
            raise CliError(f"--edit {name}: the value must not {problem}")
        edits[name] = value
    return edits


async def _request_status(ledger: Ledger, request_id: str) -> dict[str, Any]:
    from ..engine import Projection
    from ..ledger import ApprovalAnswered, ApprovalConsumed

    status: dict[str, Any] = {"answered": None, "consumed_by": None}
    effects = Projection()
    async for e in ledger.read():
        effects.apply(e)
        if isinstance(e, ApprovalAnswered) and e.request_id == request_id:
            if status["answered"] is None:
                status["answered"] = e
        elif isinstance(e, ApprovalConsumed) and e.request_id == request_id:
            if status["consumed_by"] is None:
                status["consumed_by"] = (e.run_id, e.call_id)
    status["effects"] = effects.effects
    return status


async def _effects_now(ledger: Ledger) -> dict[str, Any]:
    """Every effect key's state as the ledger has it now (``EffectState`` by key)."""
    from ..engine import Projection

    effects = Projection()
    async for e in ledger.read():
        effects.apply(e)
    return effects.effects


def _effect_now(request: PendingApproval, effects: dict[str, Any]) -> tuple[str, str | None, Any]:
    """The request's effect key as the ledger has it now: (state, notice, holder).

    State is "free", "claimed", "committed" or "ambiguous" ("" without a key); holder the
    ``EffectState`` (None when free). The ledger is folded without settling claims: a
    claim whose call has no outcome yet is "claimed" (it may still be running), never
    reported as something to resolve.
    """
    from ..engine import effect_notice

    key = request.effect_key
    if key is None:
        return "", None, None
    held = effects.get(key)
    if held is None:
        return "free", None, None
    return held.status, effect_notice(key, held.status, held.run_id, held.call_id), held


async def cmd_approvals_list(args: argparse.Namespace, out: IO[str]) -> int:
    """The open (unanswered) approval requests, oldest first."""
    from ..engine import DeferredApproval

    async with open_ledger(args) as ledger:
        pending = await DeferredApproval(ledger).pending()
        effects = await _effects_now(ledger) if pending else {}
    notices = [_effect_now(p, effects)[1] for p in pending]
    if args.json:
        print_json_list(
            (
                json_text({**msgspec.to_builtins(p), "effect_notice": notice})
                for p, notice in zip(pending, notices, strict=True)
            ),
            out,
        )
        return 0
    if not pending:
        print("no pending approval requests", file=out)
        return 0
    rows = [
        [p.request_id, clock_text(p.ts), p.run_id, p.call_id, p.tool, compact(p.args)]
        for p in pending
    ]
    headers = ("request", "asked (UTC)", "run", "call", "tool", "arguments")
    for line in table(headers, rows, args.style):
        print(line, file=out)
    # After the table, so that its columns stay the same: the requests a reviewer would
    # approve for nothing.
    for p, notice in zip(pending, notices, strict=True):
        if notice is not None:
            print(args.style.paint(f"request {p.request_id}: {notice}", "yellow"), file=out)
    return 0


async def cmd_approvals_show(args: argparse.Namespace, out: IO[str]) -> int:
    """One request: what was asked, and whether it was answered and used."""
    from ..engine import DeferredApproval

    async with open_ledger(args) as ledger:
        request = await DeferredApproval(ledger).get(args.request_id)
        status = await _request_status(ledger, args.request_id)
    answered, consumed = status["answered"], status["consumed_by"]
    effect_state, notice, held = _effect_now(request, status["effects"])
    if answered is not None:
        notice = None  # decided already: nobody is about to approve it
    if args.json:
        data = msgspec.to_builtins(request)
        data["answer"] = msgspec.to_builtins(answered) if answered else None
        data["consumed_by"] = list(consumed) if consumed else None
        data["effect_notice"] = notice
        print(json_text(data), file=out)
        return 0
    style = args.style
    if answered is None:
        state = style.paint("pending", "yellow")
    else:
        verb = "approved" if answered.approved else "denied"
        state = style.paint(verb, "green" if answered.approved else "red")
        state += f" by {answered.reviewer}"
        if answered.reason:
            state += f": {answered.reason}"
        if answered.edits is not None:
            state += f" (edited to {compact(answered.edits, 200)})"
        state += "; " + (
            f"used by call {consumed[1]} (run {consumed[0]})" if consumed else "not used yet"
        )
    lines = [
        ("request", request.request_id),
        ("status", state),
        ("asked (UTC)", clock_text(request.ts)),
        ("run", request.run_id),
        ("call", request.call_id),
        ("tool", request.tool),
        ("arguments", compact(request.args, 400)),
        ("digest", request.digest),
        ("effect", _effect_text(request, effect_state, notice, held, style)),
        ("metadata", compact(request.metadata, 400)),
    ]
    for name, value in lines:
        print(f"{style.paint(f'{name:<12}', 'dim')}{value}", file=out)
    return 0


def _effect_text(
    request: PendingApproval, now: str, notice: str | None, held: Any, style: Any
) -> str:
    """The request's effect key for ``approvals show``: why approving cannot make the call
    run (an open request), else its state now; and its state when the request was asked,
    when that was different."""
    key = request.effect_key
    if key is None:
        return "none"
    if notice is not None:
        text = str(style.paint(notice, "yellow"))
    elif held is not None:
        text = f"{key} ({now} by call {held.call_id}, run {held.run_id})"
    else:
        text = f"{key} ({now})"
    asked = request.effect_state or "free"
    if asked != now:
        text += f"; when asked it was {asked}"
        if request.effect_state:
            text += f" (by call {request.effect_by_call_id}, run {request.effect_by_run_id})"
    return text


def _quote_hint(pairs: Sequence[str], problem: str) -> str:
    """How to give text where an ``--edit`` value was read as JSON (``order_id=7`` is the
    number 7) and the tool wants a string; "" when that is not what went wrong."""
    if "'string'" not in problem and "`str`" not in problem:
        return ""
    for pair in pairs:
        name, _, raw = pair.partition("=")
        try:
            value = json.loads(raw)
        except ValueError:
            continue  # taken as text already
        if not isinstance(value, str) and name in problem:
            quoted = shlex.quote(f"{name}={json.dumps(raw)}")
            return (
                f" (--edit {name}={raw} is read as JSON; to give the text, quote it: "
                f"--edit {quoted})"
            )
    return ""


async def _answer(args: argparse.Namespace, out: IO[str], *, approved: bool) -> int:
    from ..engine import DeferredApproval

    edits = parse_edits(getattr(args, "edit", None) or ())
    reviewer = _reviewer(args)
    async with open_ledger(args, write=True) as ledger:
        deferred = DeferredApproval(ledger)
        request = await deferred.get(args.request_id)
        full_edits = None
        if edits:
            # An edit replaces the arguments entirely: start from the ones asked about. A
            # redacted argument stays "[redacted]", which keeps its requested value.
            base = dict(request.args) if isinstance(request.args, dict) else {}
            full_edits = {**base, **edits}
        try:
            await deferred.answer(
                args.request_id,
                approved=approved,
                reviewer=reviewer,
                reason=args.reason or "",
                edits=full_edits,
            )
        except ToolArgsInvalid as exc:  # the edits do not fit the tool's recorded schema
            hint = _quote_hint(getattr(args, "edit", None) or (), str(exc))
            raise CliError(f"cannot approve request {args.request_id}: {exc}{hint}") from None
    verb = "approved" if approved else "denied"
    text = f"{verb} request {args.request_id} ({request.tool}, run {request.run_id}) as {reviewer}"
    if full_edits is not None:
        text += f" with arguments {compact(full_edits, 200)}"
    print(args.style.paint(text, "green" if approved else "red"), file=out)
    if full_edits is not None and request.json_schema is None:
        print(
            "note: this request was recorded without the tool's schema (by an older "
            "agent-adapter), so the edits could not be checked here; the executor "
            "validates them when the call runs, and refuses the call if they do not fit",
            file=out,
        )
    return 0


async def cmd_approvals_approve(args: argparse.Namespace, out: IO[str]) -> int:
    """Approve an open request (optionally with edited arguments)."""
    return await _answer(args, out, approved=True)


async def cmd_approvals_deny(args: argparse.Namespace, out: IO[str]) -> int:
    """Deny an open request."""
    return await _answer(args, out, approved=False)


# -- effects -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _executor(args: argparse.Namespace, *, write: bool) -> AsyncIterator[Any]:
    from ..engine import Executor

    async with open_ledger(args, write=write) as ledger:
        executor = Executor(ledger=ledger, hooks=log_hooks(args.logging))
        await executor.start()
        yield executor


async def cmd_effects_list(args: argparse.Namespace, out: IO[str]) -> int:
    """Ambiguous effect keys, and keys in flight with their holder and lease (or, with
    ``--all``, every key and its status)."""
    from ..ledger import lease_text

    async with _executor(args, write=False) as executor:
        effects = []
        for key, state in executor.state.effects.items():
            status = executor.effect_status(key)
            if args.all or status in ("ambiguous", "in flight", "claimed"):
                effects.append((key, status, state))
    if args.json:
        records: list[str] = []
        for key, status, s in effects:
            record: dict[str, Any] = {
                "key": key,
                "status": status,
                "run_id": s.run_id,
                "call_id": s.call_id,
            }
            # Every record has the same keys, those of the audit's effect keys: a claim an
            # older version wrote has no holder ("", 0) and no lease (0.0).
            record.update(holder=s.holder, pid=s.pid, host=s.host, lease_until=s.lease_until)
            records.append(json_text(record))
        print_json_list(records, out)
        return 0
    if not effects:
        print("no ambiguous effects" if not args.all else "no effect keys", file=out)
        return 0
    style = args.style
    colors = {"ambiguous": "yellow", "in flight": "cyan", "claimed": "cyan"}
    rows = []
    for key, status, s in effects:
        # An in-flight key says who holds it and until when: its body may be running, so
        # it is to wait for, never to resolve.
        held = (
            f"{s.holder_text()}, lease until {lease_text(s.lease_until)}"
            if status == "in flight"
            else ""
        )
        rows.append(
            [key, style.paint(status, colors.get(status, "green")), s.run_id, s.call_id, held]
        )
    for line in table(("key", "status", "run", "call", "holder"), rows, style):
        print(line, file=out)
    return 0


async def cmd_effects_resolve(args: argparse.Namespace, out: IO[str]) -> int:
    """Resolve an ambiguous key: ``--committed`` (it happened) or ``--failed`` (it did not).

    A key in flight (its holder's lease is live) is refused unless ``--force``."""
    outcome = "committed" if args.committed else "failed"
    reviewer = _reviewer(args)
    async with _executor(args, write=True) as executor:
        await executor.resolve_effect(
            args.key,
            outcome=outcome,
            reviewer=reviewer,
            reason=args.reason,
            force=bool(getattr(args, "force", False)),
        )
    meaning = "committed (later calls are refused)" if args.committed else "failed (key is free)"
    print(f"resolved effect {args.key} as {meaning} by {reviewer}", file=out)
    return 0
