"""The ``agent-adapter`` command: the demo, and tools for a ledger file.

A thin layer: the library decides (``replay``, ``verify``, ``DeferredApproval``,
``resolve_effect``), this module parses arguments, opens the file safely and prints.
Expected failures (a missing file, a file that is not a ledger, a locked or read-only
file, an unknown id) are one line on stderr and exit status 1, never a traceback, and
never a modified file: reading commands refuse to create a ledger that does not exist.

structlog is configured here and only here (``--log-format``, ``--log-level``): the
library never configures logging, its host does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fnmatch
import getpass
import json
import logging
import os
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgspec

from .errors import AdapterError, LedgerError, ToolUsageError

if TYPE_CHECKING:
    from .ledger import Audit, Event, Ledger, Verification

__all__ = [
    "CliError",
    "Style",
    "build_parser",
    "configure_logging",
    "event_details",
    "event_json",
    "log_hooks",
    "main",
    "parse_edits",
    "render_audit",
    "table",
    "verification_line",
]

PROG = "agent-adapter"
_SQLITE_HEADER = b"SQLite format 3\x00"
_BASE_FIELDS = frozenset({"seq", "ts", "run_id", "call_id", "tool", "prev", "hash"})
_GOOD = frozenset({"call.succeeded", "call.cached", "call.replayed", "approval.granted"})
_WAIT = frozenset({"call.pending", "approval.pending", "call.ambiguous"})
_BAD = frozenset(
    {
        "call.failed",
        "call.timed_out",
        "call.cancelled",
        "call.invalid",
        "call.blocked",
        "call.limited",
        "call.denied",
        "call.duplicate",
        "approval.denied",
        "hook.failed",
    }
)


_ALWAYS_SHOWN = ("approved", "same_args")
_ANSI = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


class CliError(Exception):
    """An expected failure: printed as one line on stderr, exit status 1."""


# -- output --------------------------------------------------------------------------


class Style:
    """ANSI colour, on only for a terminal and only when ``NO_COLOR`` is unset."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: IO[str], *, force_off: bool = False) -> Style:
        """Colour when ``stream`` is a TTY, ``NO_COLOR`` is unset and not ``force_off``."""
        isatty = getattr(stream, "isatty", None)
        tty = bool(isatty and isatty())
        return cls(tty and not force_off and "NO_COLOR" not in os.environ)

    def paint(self, text: str, *styles: str) -> str:
        """``text`` wrapped in the codes of ``styles`` (unchanged when colour is off)."""
        if not self.enabled or not styles:
            return text
        codes = ";".join(_ANSI[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def tag(self, tag: str) -> str:
        """An event tag coloured by what it means: green done, red refused, yellow open."""
        if tag in _GOOD:
            return self.paint(tag, "green")
        if tag in _BAD:
            return self.paint(tag, "red")
        if tag in _WAIT:
            return self.paint(tag, "yellow")
        return tag


def _visible_len(text: str) -> int:
    # Column widths ignore ANSI codes so that coloured tables still line up.
    width, skipping = 0, False
    for ch in text:
        if ch == "\x1b":
            skipping = True
        elif skipping:
            skipping = ch != "m"
        else:
            width += 1
    return width


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], style: Style) -> list[str]:
    """Rows as left-aligned columns under a dim header; the last column is not padded."""
    rows = [list(r) for r in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], _visible_len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [c + " " * (widths[i] - _visible_len(c)) for i, c in enumerate(cells[:-1])]
        return "  ".join([*parts, cells[-1]]).rstrip()

    return [style.paint(line(headers), "dim"), *(line(r) for r in rows)]


def short(digest: str | None, n: int = 12) -> str:
    """A digest shortened for display ("-" for none)."""
    return digest[:n] if digest else "-"


def _compact(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def event_details(event: Event, *, limit: int = 60) -> str:
    """The type-specific fields of ``event`` as ``name=value`` (digests shortened)."""
    # Fields at their defaults are left out, except the yes/no answers whose default
    # (False) is itself the news: a denial must not read as a blank.
    fields = msgspec.to_builtins(event)
    for name in _ALWAYS_SHOWN:
        if hasattr(event, name):
            fields[name] = getattr(event, name)
    parts = []
    for name, value in fields.items():
        if name in _BASE_FIELDS or name == "type":
            continue
        if name in ("digest", "result_digest") and isinstance(value, str):
            value = short(value)
        elif name == "duration_ms":
            value = f"{value:.1f}"
        else:
            value = _compact(msgspec.to_builtins(value), limit)
        parts.append(f"{name}={value}")
    return " ".join(parts)


def event_json(event: Event) -> str:
    """One event as a JSON line: its tag, every field, and always seq, prev and hash."""
    data = msgspec.to_builtins(event)
    head = {"type": event.type, "seq": event.seq, "prev": event.prev, "hash": event.hash}
    return msgspec.json.encode({**head, **data}).decode()


def _clock_text(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}"


def event_rows(events: Iterable[Event], style: Style) -> list[list[str]]:
    """Table rows for ``events``: seq, time (UTC), type, run, call, tool, details."""
    return [
        [
            str(e.seq),
            _clock_text(e.ts),
            style.tag(e.type),
            e.run_id or "-",
            e.call_id or "-",
            e.tool or "-",
            event_details(e),
        ]
        for e in events
    ]


EVENT_HEADERS = ("seq", "time (UTC)", "type", "run", "call", "tool", "details")


def _approval_text(record: Any) -> str:
    if not record.approval_requested and not record.approvals:
        return "-"
    if not record.approvals:
        return "requested, no decision"
    texts = []
    for a in record.approvals:
        verb = "approved" if a.approved else "denied"
        who = a.reviewer or "nobody"
        texts.append(f"{verb} by {who} via {a.source}" + (" (edited)" if a.edited else ""))
    return "; ".join(texts)


def verification_line(verification: Verification, style: Style) -> str:
    """One line: the chain is intact, broken at a named seq, or cannot be checked."""
    if verification.ok:
        return style.paint("chain: intact", "green") + f" ({verification.checked} events verified)"
    if verification.first_bad_seq is None:
        return style.paint("chain: cannot be checked", "yellow") + f": {verification.reason}"
    return (
        style.paint(f"chain: broken at seq {verification.first_bad_seq}", "red")
        + f": {verification.reason}"
    )


def render_audit(audit: Audit, style: Style) -> list[str]:
    """The audit as lines: one row per call, the chain's verification, then the problems."""
    rows = []
    for record in audit.calls.values():
        digest = short(record.digest)
        if record.ran_digest and record.ran_digest != record.digest:
            digest += " -> " + short(record.ran_digest)
        rows.append(
            [
                record.run_id,
                record.call_id,
                record.tool or "-",
                digest,
                _approval_text(record),
                style.tag(record.outcome) if record.outcome else style.paint("(none)", "yellow"),
            ]
        )
    lines = [f"calls: {len(audit.calls)}, events: {audit.events}"]
    headers = ("run", "call", "tool", "args digest", "approval", "outcome")
    lines += ["  " + row for row in table(headers, rows, style)]
    if audit.chain is not None:
        lines.append(verification_line(audit.chain, style))
    problems = audit.problems()
    if not problems:
        lines.append(style.paint("problems: none", "green"))
    else:
        lines.append(style.paint(f"problems: {len(problems)}", "red", "bold"))
        for p in problems:
            where = f"seq {p.seq}" if p.seq is not None else "-"
            lines.append(f"  {p.kind} ({where}): {p.message}")
    return lines


# -- logging -------------------------------------------------------------------------


def configure_logging(log_format: str | None, log_level: str | None) -> bool:
    """Configure structlog for this process; True when logging is on.

    Off unless ``--log-format`` or ``--log-level`` is given, so that command output stays
    readable. Logs go to stderr (stdout carries the command's output).
    """
    import structlog

    enabled = (log_format is not None or log_level is not None) and log_level != "off"
    # Off is CRITICAL only (structlog's filtering loggers know no higher level); nothing
    # in agent-adapter logs at CRITICAL.
    name = (log_level or "info").upper() if enabled else "CRITICAL"
    level = logging.getLevelNamesMapping()[name]
    if log_format == "json":
        renderer: Any = structlog.processors.JSONRenderer()
    else:
        colors = Style.for_stream(sys.stderr).enabled
        renderer = structlog.dev.ConsoleRenderer(colors=colors)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    return enabled


def log_hooks(enabled: bool) -> list[Any]:
    """The executor hooks for the chosen logging: the structlog hook, or none."""
    if not enabled:
        return []
    from .hooks import StructlogHook

    return [StructlogHook()]


# -- opening a ledger safely -----------------------------------------------------------


def check_ledger_file(path: Path, *, write: bool) -> None:
    """Refuse, with one clear message, a file a command must not open.

    Reading commands never create a file, so a missing one is an error; a file that is
    not an SQLite database is refused before SQLite sees it (an empty file would
    otherwise become a new ledger). Writing commands refuse a read-only file.
    """
    if not path.exists():
        raise CliError(f"{path}: no such file")
    if path.is_dir():
        raise CliError(f"{path} is a directory, not a ledger file")
    try:
        with path.open("rb") as fh:
            header = fh.read(len(_SQLITE_HEADER))
    except PermissionError:
        raise CliError(f"{path}: permission denied (cannot read it)") from None
    if not header:
        raise CliError(f"{path} is empty, not a ledger")
    if header != _SQLITE_HEADER:
        raise CliError(f"{path} is not a ledger (not an SQLite database)")
    if write:
        # No write permission bit at all counts as read-only even for root, who could
        # write anyway: the owner marked the file read-only on purpose.
        mode = path.stat().st_mode
        if not os.access(path, os.W_OK) or not mode & 0o222:
            raise CliError(
                f"{path} is read-only; this command records a decision and needs to write"
            )
        if not os.access(path.parent, os.W_OK):
            raise CliError(f"{path.parent} is not writable (SQLite needs it for its journal)")


def read_key(key_file: str | None) -> bytes | None:
    """The HMAC key from ``--key-file``: the file's bytes, trailing newline removed."""
    if key_file is None:
        return None
    try:
        key = Path(key_file).read_bytes().rstrip(b"\r\n")
    except FileNotFoundError:
        raise CliError(f"key file {key_file}: no such file") from None
    except OSError as exc:
        raise CliError(f"key file {key_file}: {exc.strerror or exc}") from None
    if not key:
        raise CliError(f"key file {key_file} is empty")
    return key


def _sqlite_message(path: Path, exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"{path} is locked by another process ({text}); try again when it is released"
    if "readonly" in text or "read-only" in text:
        return f"{path} cannot be written ({text})"
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a ledger or is corrupt ({text})"
    return f"{path}: {text}"


@contextlib.asynccontextmanager
async def open_ledger(args: argparse.Namespace, *, write: bool = False) -> AsyncIterator[Ledger]:
    """An opened ``SQLiteLedger`` on ``--db``, after the checks of ``check_ledger_file``."""
    path = Path(args.db)
    check_ledger_file(path, write=write)
    key = read_key(getattr(args, "key_file", None))
    from .ledger._sqlite import SQLiteLedger

    ledger = SQLiteLedger(str(path), key=key, busy_timeout_s=args.lock_timeout)
    try:
        try:
            await ledger.open()
            yield ledger
        except sqlite3.Error as exc:
            raise CliError(_sqlite_message(path, exc)) from None
    finally:
        with contextlib.suppress(Exception):
            await ledger.close()


# -- ledger commands -------------------------------------------------------------------


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


def _print_events(events: Sequence[Event], args: argparse.Namespace, out: IO[str]) -> None:
    if args.json:
        for e in events:
            print(event_json(e), file=out)
        return
    for line in table(EVENT_HEADERS, event_rows(events, args.style), args.style):
        print(line, file=out)


async def cmd_ledger_show(args: argparse.Namespace, out: IO[str]) -> int:
    """Print the events that match the filters, as a table or JSON lines."""
    async with open_ledger(args) as ledger:
        events = await _read(ledger, args)
    _print_events(events, args, out)
    return 0


async def cmd_ledger_tail(args: argparse.Namespace, out: IO[str]) -> int:
    """Print the last events, then follow the ledger as another process appends to it."""
    async with open_ledger(args) as ledger:
        events = await _read(ledger, args)
        seen = max((e.seq for e in events), default=0)
        async for e in ledger.read(after=seen):
            seen = e.seq  # the newest seq, matching or not
        shown = events[-args.lines :] if args.lines > 0 else []
        for e in shown:
            print(_tail_line(e, args), file=out)
        out.flush()
        if not args.follow:
            return 0
        deadline = None if args.duration is None else time.monotonic() + args.duration
        while deadline is None or time.monotonic() < deadline:
            await asyncio.sleep(args.interval)
            async for e in ledger.read(after=seen):
                seen = e.seq
                if _matches(e, args):
                    print(_tail_line(e, args), file=out)
            out.flush()
    return 0


def _tail_line(event: Event, args: argparse.Namespace) -> str:
    if args.json:
        return event_json(event)
    style = args.style
    ids = "/".join(x for x in (event.run_id, event.call_id) if x) or "-"
    return (
        f"{event.seq:>5} {_clock_text(event.ts)} {style.tag(event.type)} "
        f"{ids} {event.tool or '-'} {event_details(event)}".rstrip()
    )


async def cmd_ledger_verify(args: argparse.Namespace, out: IO[str]) -> int:
    """Check the hash chain; exit 0 only when it is intact."""
    async with open_ledger(args) as ledger:
        verification = await ledger.verify()
    print(verification_line(verification, args.style), file=out)
    return 0 if verification.ok else 1


async def cmd_ledger_audit(args: argparse.Namespace, out: IO[str]) -> int:
    """Replay the ledger into the per-call audit; exit 1 when it has problems."""
    from .ledger import replay

    async with open_ledger(args) as ledger:
        events = [e async for e in ledger.read()]
        verification = await ledger.verify()
    audit = replay(events, verification)
    if args.json:
        problems = [msgspec.to_builtins(p) for p in audit.problems()]
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
            }
            for r in audit.calls.values()
        ]
        report = {"calls": calls, "chain": msgspec.to_builtins(audit.chain), "problems": problems}
        print(json.dumps(report), file=out)
    else:
        for line in render_audit(audit, args.style):
            print(line, file=out)
    return 1 if audit.problems() else 0


async def cmd_ledger_export(args: argparse.Namespace, out: IO[str]) -> int:
    """Every event as a JSON line (with seq, prev and hash), for other tools."""
    async with open_ledger(args) as ledger:
        async for e in ledger.read():
            print(event_json(e), file=out)
    return 0


# -- approvals -----------------------------------------------------------------------


def _reviewer(args: argparse.Namespace) -> str:
    if args.reviewer:
        return str(args.reviewer)
    try:
        return f"{getpass.getuser()} (cli)"
    except Exception:
        return "cli"


def parse_edits(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs; a value that parses as JSON is that value, else the text."""
    edits: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--edit {pair!r}: expected key=value")
        try:
            edits[name] = json.loads(raw)
        except ValueError:
            edits[name] = raw
    return edits


async def _request_status(ledger: Ledger, request_id: str) -> dict[str, Any]:
    from .ledger import ApprovalAnswered, ApprovalConsumed

    status: dict[str, Any] = {"answered": None, "consumed_by": None}
    async for e in ledger.read():
        if isinstance(e, ApprovalAnswered) and e.request_id == request_id:
            if status["answered"] is None:
                status["answered"] = e
        elif isinstance(e, ApprovalConsumed) and e.request_id == request_id:
            if status["consumed_by"] is None:
                status["consumed_by"] = (e.run_id, e.call_id)
    return status


async def cmd_approvals_list(args: argparse.Namespace, out: IO[str]) -> int:
    """The open (unanswered) approval requests, oldest first."""
    from .engine import DeferredApproval

    async with open_ledger(args) as ledger:
        pending = await DeferredApproval(ledger).pending()
    if args.json:
        for p in pending:
            print(msgspec.json.encode(p).decode(), file=out)
        return 0
    if not pending:
        print("no pending approval requests", file=out)
        return 0
    rows = [
        [p.request_id, _clock_text(p.ts), p.run_id, p.call_id, p.tool, _compact(p.args)]
        for p in pending
    ]
    headers = ("request", "asked (UTC)", "run", "call", "tool", "arguments")
    for line in table(headers, rows, args.style):
        print(line, file=out)
    return 0


async def cmd_approvals_show(args: argparse.Namespace, out: IO[str]) -> int:
    """One request: what was asked, and whether it was answered and used."""
    from .engine import DeferredApproval

    async with open_ledger(args) as ledger:
        request = await DeferredApproval(ledger).get(args.request_id)
        status = await _request_status(ledger, args.request_id)
    answered, consumed = status["answered"], status["consumed_by"]
    if args.json:
        data = msgspec.to_builtins(request)
        data["answer"] = msgspec.to_builtins(answered) if answered else None
        data["consumed_by"] = list(consumed) if consumed else None
        print(json.dumps(data), file=out)
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
            state += f" (edited to {_compact(answered.edits, 200)})"
        state += "; " + (
            f"used by call {consumed[1]} (run {consumed[0]})" if consumed else "not used yet"
        )
    lines = [
        ("request", request.request_id),
        ("status", state),
        ("asked (UTC)", _clock_text(request.ts)),
        ("run", request.run_id),
        ("call", request.call_id),
        ("tool", request.tool),
        ("arguments", _compact(request.args, 400)),
        ("digest", request.digest),
        ("metadata", _compact(request.metadata, 400)),
    ]
    for name, value in lines:
        print(f"{style.paint(f'{name:<12}', 'dim')}{value}", file=out)
    return 0


async def _answer(args: argparse.Namespace, out: IO[str], *, approved: bool) -> int:
    from .engine import DeferredApproval

    edits = parse_edits(getattr(args, "edit", None) or ())
    reviewer = _reviewer(args)
    async with open_ledger(args, write=True) as ledger:
        deferred = DeferredApproval(ledger)
        request = await deferred.get(args.request_id)
        full_edits = None
        if edits:
            # An edit replaces the arguments entirely: start from the ones asked about.
            base = dict(request.args) if isinstance(request.args, dict) else {}
            full_edits = {**base, **edits}
            hidden = sorted(k for k, v in full_edits.items() if v == "[redacted]")
            if hidden:
                raise CliError(
                    f"cannot edit request {args.request_id}: argument(s) {', '.join(hidden)} "
                    "are redacted in the ledger; give their values with --edit"
                )
        await deferred.answer(
            args.request_id,
            approved=approved,
            reviewer=reviewer,
            reason=args.reason or "",
            edits=full_edits,
        )
    verb = "approved" if approved else "denied"
    text = f"{verb} request {args.request_id} ({request.tool}, run {request.run_id}) as {reviewer}"
    if full_edits is not None:
        text += f" with arguments {_compact(full_edits, 200)}"
    print(args.style.paint(text, "green" if approved else "red"), file=out)
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
    from .engine import Executor

    async with open_ledger(args, write=write) as ledger:
        executor = Executor(ledger=ledger, hooks=log_hooks(args.logging))
        await executor.start()
        yield executor


async def cmd_effects_list(args: argparse.Namespace, out: IO[str]) -> int:
    """Ambiguous effect keys (or, with ``--all``, every key and its status)."""
    async with _executor(args, write=False) as executor:
        if args.all:
            effects = {
                k: (s.status, s.run_id, s.call_id) for k, s in executor.state.effects.items()
            }
        else:
            effects = {k: ("ambiguous", r, c) for k, (r, c) in executor.ambiguous_effects().items()}
    if args.json:
        for key, (status, run_id, call_id) in effects.items():
            record = {"key": key, "status": status, "run_id": run_id, "call_id": call_id}
            print(json.dumps(record), file=out)
        return 0
    if not effects:
        print("no ambiguous effects" if not args.all else "no effect keys", file=out)
        return 0
    style = args.style
    rows = [
        [key, style.paint(status, "yellow" if status == "ambiguous" else "green"), run, call]
        for key, (status, run, call) in effects.items()
    ]
    for line in table(("key", "status", "run", "call"), rows, style):
        print(line, file=out)
    return 0


async def cmd_effects_resolve(args: argparse.Namespace, out: IO[str]) -> int:
    """Resolve an ambiguous key: ``--committed`` (it happened) or ``--failed`` (it did not)."""
    outcome = "committed" if args.committed else "failed"
    reviewer = _reviewer(args)
    async with _executor(args, write=True) as executor:
        await executor.resolve_effect(
            args.key, outcome=outcome, reviewer=reviewer, reason=args.reason
        )
    meaning = "committed (later calls are refused)" if args.committed else "failed (key is free)"
    print(f"resolved effect {args.key} as {meaning} by {reviewer}", file=out)
    return 0


# -- demo ----------------------------------------------------------------------------


async def cmd_demo(args: argparse.Namespace, out: IO[str]) -> int:
    """The scripted support agent: lookup, refund approval, duplicate refusal, audit."""
    try:
        from . import demo
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise CliError(
            f"the demo needs the openai-agents extra ({exc}); "
            "install it with: pip install 'agent-adapter[openai-agents]'"
        ) from None
    return await demo.run(args, out)


# -- argument parsing ------------------------------------------------------------------


def _add_db(parser: argparse.ArgumentParser, *, key: bool = True) -> None:
    parser.add_argument("--db", required=True, metavar="FILE", help="the SQLite ledger file")
    if key:
        parser.add_argument(
            "--key-file",
            metavar="FILE",
            help="HMAC key of a keyed chain (the file's bytes, trailing newline removed)",
        )


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", metavar="RUN_ID", help="only events of this run")
    parser.add_argument("--call", metavar="CALL_ID", help="only events of this call")
    parser.add_argument("--tool", metavar="NAME", help="only events of this tool")
    parser.add_argument(
        "--type",
        action="append",
        metavar="TAG",
        help="only events of this type; a glob like 'approval.*'; repeatable",
    )
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")


def _add_common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    parser.add_argument(
        "--log-format",
        choices=("console", "json"),
        default=default(None),
        help="turn structlog logging on, to stderr, in this format (default: off)",
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error", "off"),
        default=default(None),
        help="log level when logging is on (default: info)",
    )
    parser.add_argument(
        "--no-color",
        action="store_true",
        default=default(False),
        help="never colour the output",
    )
    parser.add_argument(
        "--lock-timeout",
        type=float,
        default=default(5.0),
        metavar="SECONDS",
        help="how long to wait for a ledger another process holds locked (default: 5)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="An event-sourced executor for AI-agent tool calls: demo and ledger tools.",
    )
    _add_common(parser, top=True)
    # The same options after the subcommand (`agent-adapter demo --log-format json`);
    # SUPPRESS keeps a subcommand from resetting what was given before it.
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, top=False)

    def leaf(group: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = group.add_parser(name, parents=[common], **kwargs)
        return parser

    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="run the scripted support agent (no API key, no network)",
        description=(
            "A support agent on the OpenAI Agents SDK, driven by a scripted model, looks up "
            "an order and asks to refund it; you approve, deny or edit the refund; the "
            "same refund is retried and refused; the audit of the ledger is printed."
        ),
    )
    demo.add_argument(
        "--db",
        default="agent-adapter-demo.db",
        metavar="FILE",
        help="the ledger file to write, replaced on each run (default: %(default)s)",
    )
    decision = demo.add_mutually_exclusive_group()
    decision.add_argument("--approve", action="store_true", help="approve without asking")
    decision.add_argument("--deny", action="store_true", help="deny without asking")
    decision.add_argument(
        "--edit-amount",
        type=int,
        metavar="CENTS",
        help="approve with this amount (integer cents) instead of the one asked for",
    )
    demo.add_argument("--reviewer", metavar="NAME", help="the approver's name in the ledger")
    demo.set_defaults(handler=cmd_demo)

    ledger = commands.add_parser("ledger", help="read, follow, verify, audit or export a ledger")
    ledger_cmds = ledger.add_subparsers(dest="ledger_command", metavar="ACTION", required=True)
    show = leaf(ledger_cmds, "show", help="print events (filters, table or JSON lines)")
    _add_db(show)
    _add_filters(show)
    show.set_defaults(handler=cmd_ledger_show)
    tail = leaf(ledger_cmds, "tail", help="print the last events and follow new ones")
    _add_db(tail)
    _add_filters(tail)
    tail.add_argument("-n", "--lines", type=int, default=10, help="events shown first (10)")
    tail.add_argument("--no-follow", dest="follow", action="store_false", help="print and exit")
    tail.add_argument("--interval", type=float, default=0.25, help="poll interval, seconds")
    tail.add_argument(
        "--duration", type=float, metavar="SECONDS", help="stop following after this long"
    )
    tail.set_defaults(handler=cmd_ledger_tail)
    verify = leaf(ledger_cmds, "verify", help="check the hash chain (exit 1 if broken)")
    _add_db(verify)
    verify.set_defaults(handler=cmd_ledger_verify)
    audit = leaf(ledger_cmds, "audit", help="per-call audit and problems (exit 1 if any)")
    _add_db(audit)
    audit.add_argument("--json", action="store_true", help="one JSON report")
    audit.set_defaults(handler=cmd_ledger_audit)
    export = leaf(ledger_cmds, "export", help="every event as JSON lines")
    _add_db(export)
    export.set_defaults(handler=cmd_ledger_export)

    approvals = commands.add_parser("approvals", help="answer deferred approval requests")
    approval_cmds = approvals.add_subparsers(
        dest="approvals_command", metavar="ACTION", required=True
    )
    listing = leaf(approval_cmds, "list", help="open requests")
    _add_db(listing)
    listing.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    listing.set_defaults(handler=cmd_approvals_list)
    show_one = leaf(approval_cmds, "show", help="one request and its status")
    show_one.add_argument("request_id", metavar="REQUEST_ID")
    _add_db(show_one)
    show_one.add_argument("--json", action="store_true", help="JSON instead of text")
    show_one.set_defaults(handler=cmd_approvals_show)
    for name, handler in (("approve", cmd_approvals_approve), ("deny", cmd_approvals_deny)):
        answer = leaf(approval_cmds, name, help=f"{name} an open request")
        answer.add_argument("request_id", metavar="REQUEST_ID")
        _add_db(answer)
        answer.add_argument("--reviewer", metavar="NAME", help="who decides (default: $USER)")
        answer.add_argument("--reason", metavar="TEXT", help="why, recorded in the ledger")
        if name == "approve":
            answer.add_argument(
                "--edit",
                action="append",
                metavar="KEY=VALUE",
                help="approve other arguments: VALUE is JSON or text; repeatable",
            )
        answer.set_defaults(handler=handler)

    effects = commands.add_parser("effects", help="list and resolve ambiguous effect keys")
    effect_cmds = effects.add_subparsers(dest="effects_command", metavar="ACTION", required=True)
    elist = leaf(effect_cmds, "list", help="ambiguous effect keys")
    _add_db(elist)
    elist.add_argument("--all", action="store_true", help="every key with its status")
    elist.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    elist.set_defaults(handler=cmd_effects_list)
    resolve = leaf(effect_cmds, "resolve", help="resolve an ambiguous key")
    resolve.add_argument("key", metavar="KEY")
    _add_db(resolve)
    how = resolve.add_mutually_exclusive_group(required=True)
    how.add_argument("--committed", action="store_true", help="the effect happened")
    how.add_argument("--failed", action="store_true", help="the effect did not happen")
    resolve.add_argument("--reviewer", metavar="NAME", help="who decides (default: $USER)")
    resolve.add_argument("--reason", metavar="TEXT", help="why, recorded in the ledger")
    resolve.set_defaults(handler=cmd_effects_resolve)
    return parser


def _error(message: str) -> int:
    # One line, whatever the message holds: the contract of every expected failure.
    text = " ".join(str(message).split())
    print(f"{PROG}: error: {text}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failed, 2 usage, 130 ^C)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    out = sys.stdout
    args.style = Style.for_stream(out, force_off=args.no_color)
    args.logging = configure_logging(args.log_format, args.log_level)
    handler: Callable[[argparse.Namespace, IO[str]], Any] = args.handler
    try:
        return int(asyncio.run(handler(args, out)))
    except (CliError, LedgerError, ToolUsageError) as exc:
        return _error(str(exc))
    except AdapterError as exc:
        return _error(f"{exc.kind}: {exc}")
    except sqlite3.Error as exc:
        return _error(_sqlite_message(Path(getattr(args, "db", "?")), exc))
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            # The reader (e.g. `| head`) went away: not an error of ours.
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        where = f"{exc.filename}: " if exc.filename else ""
        return _error(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: the demo imports
    # agent_adapter.cli, and its CliError must be the class main() catches.
    from agent_adapter.cli import main as _main

    raise SystemExit(_main())
