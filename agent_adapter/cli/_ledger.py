"""``agent-adapter ledger show|tail|verify|audit|export``."""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import inspect
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from ..ledger import Event, Ledger, Verification

from ._exported import EXPORT_NOTE, export_events, is_export, read_export, verify_export
from ._opening import CliError, open_ledger, read_key
from ._progress import EVERY_EVENTS, Progress, showing
from ._render import (
    EventLayout,
    event_json,
    json_text,
    print_json_list,
    render_audit,
    verification_line,
)

__all__ = [
    "cmd_ledger_audit",
    "cmd_ledger_export",
    "cmd_ledger_show",
    "cmd_ledger_tail",
    "cmd_ledger_verify",
]


def _check_types(args: argparse.Namespace) -> None:
    """Refuse a ``--type`` that matches no event type: it could only ever print nothing,
    which reads as "no such events" when the tag was mistyped."""
    from ..ledger import EVENT_TAGS

    for pattern in args.type or ():
        if not any(fnmatch.fnmatchcase(tag, pattern) for tag in EVENT_TAGS):
            known = ", ".join(sorted(EVENT_TAGS))
            raise CliError(f"--type {pattern!r} matches no event type; the types are: {known}")


def _matches(event: Event, args: argparse.Namespace) -> bool:
    if args.run is not None and event.run_id != args.run:
        return False
    if args.call is not None and event.call_id != args.call:
        return False
    if args.tool is not None and event.tool != args.tool:
        return False
    if args.type and not any(fnmatch.fnmatchcase(event.type, t) for t in args.type):
        return False
    return True


async def _read(ledger: Ledger, args: argparse.Namespace, after: int = 0) -> list[Event]:
    return [
        e
        async for e in ledger.read(after=after, run_id=args.run, call_id=args.call)
        if _matches(e, args)
    ]


def _print_events(
    events: Sequence[Event], args: argparse.Namespace, out: IO[str], *, last_seq: int = 0
) -> EventLayout:
    """The header and a line per event (``--jsonl``: a JSON object per line; ``--json``: one
    JSON array); the layout, for more lines."""
    layout = EventLayout(events, args.style, last_seq=last_seq)
    if getattr(args, "json", False):
        print_json_list((event_json(e) for e in events), out)
        return layout
    if not args.jsonl:
        print(layout.header(), file=out)
    for e in events:
        print(_event_line(e, layout, args), file=out)
    return layout


def _event_line(event: Event, layout: EventLayout, args: argparse.Namespace) -> str:
    return event_json(event) if args.jsonl else layout.line(event)


async def cmd_ledger_show(args: argparse.Namespace, out: IO[str]) -> int:
    """Print the events that match the filters: a header and a line each, or JSON lines."""
    _check_types(args)
    async with open_ledger(args) as ledger:
        events = await _read(ledger, args)
    _print_events(events, args, out)
    return 0


async def cmd_ledger_tail(args: argparse.Namespace, out: IO[str]) -> int:
    """Print the last events as ``show`` does, then follow the ledger as another process
    appends to it, in the same layout.

    ``--duration`` bounds the whole command: no pause outlasts the time left.
    """
    _check_types(args)  # --interval and --duration are checked by their parser types
    async with open_ledger(args) as ledger:
        events = await _read(ledger, args)
        seen = max((e.seq for e in events), default=0)
        async for e in ledger.read(after=seen):
            seen = e.seq  # the newest seq, matching or not
        shown = events[-args.lines :] if args.lines > 0 else []
        layout = _print_events(shown, args, out, last_seq=seen)
        out.flush()
        if not args.follow:
            return 0
        deadline = None if args.duration is None else time.monotonic() + args.duration
        while True:
            pause = args.interval
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                # --duration bounds the whole command: the last pause ends at the
                # deadline, and the poll after it prints what arrived before it.
                pause = min(pause, left)
            wait = getattr(ledger, "wait_appended", None)
            if wait is not None:
                await wait(seen, pause)  # Postgres: woken by LISTEN at once, not per poll
            else:
                await asyncio.sleep(pause)
            async for e in ledger.read(after=seen):
                seen = e.seq
                if _matches(e, args):
                    print(_event_line(e, layout, args), file=out)
            out.flush()
    return 0


async def cmd_ledger_verify(args: argparse.Namespace, out: IO[str]) -> int:
    """Check the hash chain (``--deep``: and the file's indexes); exit 0 only when intact.

    ``--db`` is an SQLite ledger, or a file ``ledger export`` wrote (told by content).
    """
    path = Path(args.db)
    if is_export(path):
        key = read_key(getattr(args, "key_file", None))
        with showing("verify (reading)") as progress:
            records = read_export(path, progress)
            if progress is not None:
                progress.phase("verify")
            verification = verify_export(records, key, progress)
        print(verification_line(verification, args.style), file=out)
        print(EXPORT_NOTE, file=out)
        return 0 if verification.ok else 1
    async with open_ledger(args) as ledger:
        with showing("verify") as progress:
            verification = await _verified(ledger, progress, deep=args.deep)
    if args.json:
        print(json_text(verification), file=out)
    else:
        print(verification_line(verification, args.style), file=out)
    return 0 if verification.ok else 1


async def cmd_ledger_audit(args: argparse.Namespace, out: IO[str]) -> int:
    """Replay the ledger into the per-call audit; exit 1 when it has problems.

    ``--db`` is an SQLite ledger, or a file ``ledger export`` wrote (told by content).
    """
    from ..ledger import replay

    path = Path(args.db)
    exported = is_export(path)
    if exported:
        key = read_key(getattr(args, "key_file", None))
        with showing("audit (reading)") as progress:
            records = read_export(path, progress)
            if progress is not None:
                progress.phase("audit (verifying)")
            verification = verify_export(records, key, progress)
            events = export_events(path, records)
            if progress is not None:
                progress.phase("audit (replaying)")
                progress.update(len(events))
            audit = replay(events, verification)
    else:
        with showing("audit (reading)") as progress:
            async with open_ledger(args) as ledger:
                if progress is None:
                    events = [e async for e in ledger.read()]
                else:
                    events = await _read_all(ledger, progress)
                    progress.phase("audit (verifying)")
                verification = await _verified(ledger, progress)
            if progress is not None:
                progress.phase("audit (replaying)")
                progress.update(len(events))
            audit = replay(events, verification)
    problems = audit.problems()
    if args.json:
        calls = [
            {
                "run_id": r.run_id,
                "call_id": r.call_id,
                "tool": r.tool,
                "digest": r.digest,
                "ran_digest": r.ran_digest,
                "approvals": msgspec.to_builtins(r.approvals),
                "outcome": r.outcome,
                "duration_ms": r.duration_ms,
                "effect_key": r.effect.key if r.effect is not None else None,
            }
            for r in audit.calls.values()
        ]
        report = {
            "calls": calls,
            "effects": [msgspec.to_builtins(e) for e in audit.effects.values()],
            "chain": msgspec.to_builtins(audit.chain),
            "problems": [msgspec.to_builtins(p) for p in problems],
        }
        if exported:
            report["note"] = EXPORT_NOTE.removeprefix("note: ")
        print(json_text(report), file=out)
    else:
        for line in render_audit(audit, args.style):
            print(line, file=out)
            if exported and line.startswith("chain:"):
                print(EXPORT_NOTE, file=out)
    return 1 if problems else 0


async def cmd_ledger_export(args: argparse.Namespace, out: IO[str]) -> int:
    """Every stored record as a JSON line (with seq, prev and hash), for other tools and
    for ``audit``/``verify`` of the file: written from the stored bytes, so the file
    checks exactly (``agent_adapter.ledger.export_line``)."""
    from ..ledger import export_line

    async with open_ledger(args) as ledger:
        with showing("export", output=out) as progress:
            read_records = getattr(ledger, "read_records", None)
            done = 0
            if read_records is None:  # a store without stored bytes to give: decoded events
                async for e in ledger.read():
                    print(event_json(e), file=out)
                    done += 1
                    if progress is not None and not done % EVERY_EVENTS:
                        progress.update(done)
                return 0
            async for record in read_records():
                try:
                    line = export_line(record)
                except ValueError as exc:
                    raise CliError(f"{args.db}: {exc}; the export stops before it") from None
                print(line.decode(), file=out)
                done += 1
                if progress is not None and not done % EVERY_EVENTS:
                    progress.update(done)
    return 0


async def _verified(
    ledger: Ledger, progress: Progress | None, *, deep: bool = False
) -> Verification:
    """``ledger.verify(deep=...)``, telling ``progress`` how far it is when there is one
    (and the store takes it: a store of another kind verifies without)."""
    if progress is None or "progress" not in inspect.signature(ledger.verify).parameters:
        return await ledger.verify(deep=deep)
    return await ledger.verify(deep=deep, progress=progress.update)  # type: ignore[call-arg]


async def _read_all(ledger: Ledger, progress: Progress) -> list[Event]:
    """Every event of ``ledger``, telling ``progress`` every ``EVERY_EVENTS``."""
    events: list[Event] = []
    async for e in ledger.read():
        events.append(e)
        if not len(events) % EVERY_EVENTS:
            progress.update(len(events))
    return events
