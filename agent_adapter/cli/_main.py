"""The parser of every subcommand, and ``main``: where expected failures become one line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from ..errors import AdapterError, LedgerError, ToolUsageError
from ._ledger import (
    cmd_ledger_audit,
    cmd_ledger_export,
    cmd_ledger_show,
    cmd_ledger_tail,
    cmd_ledger_verify,
)
from ._logging import configure_logging
from ._opening import CliError, sqlite_message
from ._render import Style
from ._review import (
    cmd_approvals_approve,
    cmd_approvals_deny,
    cmd_approvals_list,
    cmd_approvals_show,
    cmd_effects_list,
    cmd_effects_resolve,
)

__all__ = ["PROG", "build_parser", "main"]

PROG = "agent-adapter"


# -- demo ----------------------------------------------------------------------------


async def cmd_demo(args: argparse.Namespace, out: IO[str]) -> int:
    """The scripted support agent: lookup, refund approval, duplicate refusal, audit."""
    try:
        from .. import demo
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
        help=(
            "the ledger file to write (default: %(default)s); a ledger an earlier demo "
            "run wrote is replaced, any other file is refused and left unchanged"
        ),
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
    verify.add_argument(
        "--deep",
        action="store_true",
        help="also check the file's structure and indexes (PRAGMA integrity_check; slower)",
    )
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


def _check_text(args: argparse.Namespace) -> None:
    """Refuse an argument whose bytes are not UTF-8 (argv decoded with surrogateescape).

    Every id, name and value in a ledger is UTF-8 text, and SQLite takes UTF-8 file
    names: such an argument can match nothing and cannot be recorded, so it is refused
    here, before any file is opened, instead of failing deep inside a command.
    """
    for dest, value in vars(args).items():
        if dest in _READ_BY_PYTHON:
            continue
        for text in value if isinstance(value, list) else [value]:
            if not isinstance(text, str):
                continue
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                name = dest.upper() if dest in _POSITIONAL else "--" + dest.replace("_", "-")
                what = "the file name " if dest == "db" else ""
                raise CliError(
                    f"argument {name}: {what}{os.fsencode(text)!r} is not valid UTF-8"
                ) from None


# Positional arguments, named as in the usage line (the others are options).
_POSITIONAL = frozenset({"request_id", "key"})
# Paths only Python opens (any bytes the file system takes are fine).
_READ_BY_PYTHON = frozenset({"key_file"})


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
        _check_text(args)
        return int(asyncio.run(handler(args, out)))
    except (CliError, LedgerError, ToolUsageError) as exc:
        return _error(str(exc))
    except AdapterError as exc:
        return _error(f"{exc.kind}: {exc}")
    except sqlite3.Error as exc:
        return _error(sqlite_message(Path(getattr(args, "db", "?")), exc))
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
