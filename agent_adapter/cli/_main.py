"""The parser of every subcommand, and ``main``: where expected failures become one line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import math
import os
import sqlite3
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from ..errors import AdapterError, LedgerError, ToolUsageError
from ..ledger import LOCK_TIMEOUT_S
from ._inbox import cmd_approvals_serve
from ._ledger import (
    cmd_ledger_audit,
    cmd_ledger_export,
    cmd_ledger_show,
    cmd_ledger_tail,
    cmd_ledger_verify,
)
from ._logging import configure_logging, log_hooks
from ._mcp import cmd_mcp_serve
from ._opening import CliError, sqlite_message
from ._render import Style, render_audit
from ._review import (
    cmd_approvals_approve,
    cmd_approvals_deny,
    cmd_approvals_list,
    cmd_approvals_show,
    cmd_effects_list,
    cmd_effects_resolve,
)

__all__ = ["DB_ENV", "PROG", "build_parser", "main"]

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
    try:
        return await demo.run(args, out)
    except demo.DemoRefused as exc:
        raise CliError(str(exc)) from None


# -- argument parsing ------------------------------------------------------------------

# The environment variable that names the ledger when --db is not given. The demo never
# reads it: the demo replaces its file, and this one names a real ledger.
DB_ENV = "AGENT_ADAPTER_DB"

_GLOBAL_NOTE = (
    "--db defaults to $AGENT_ADAPTER_DB. Global options (--log-format, --log-level, "
    "--no-color, --lock-timeout) go before or after the command; see agent-adapter --help."
)


class _Formatter(argparse.HelpFormatter):
    """Wraps prose paragraphs; keeps a paragraph with indented lines (examples) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for block in text.split("\n\n"):
            if "\n " in block:
                paragraphs.append("\n".join(indent + line for line in block.splitlines()))
            else:
                # Not at a hyphen: "agent-adapter" stays one word.
                text = " ".join(block.split())
                paragraphs.append(
                    textwrap.fill(
                        text,
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                        break_on_hyphens=False,
                    )
                )
        return "\n\n".join(paragraphs)


def _epilog(*examples: str, note: str | None = _GLOBAL_NOTE) -> str:
    """The examples paragraph of a command's help (each line must parse: a test runs it)."""
    text = "examples:\n" + "\n".join(f"  {PROG} {example}" for example in examples)
    return f"{text}\n\n{note}" if note else text


def _version() -> str:
    try:
        return importlib.metadata.version(PROG)
    except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
        return "(not installed)"


def _add_db(parser: argparse.ArgumentParser, *, key: bool = True) -> None:
    parser.add_argument(
        "--db",
        metavar="FILE",
        help=(
            f"the SQLite ledger file, or a postgresql://user@host:port/db URL (default: ${DB_ENV})"
        ),
    )
    parser.add_argument(
        "--schema",
        metavar="NAME",
        help=(
            "the schema of a postgresql:// ledger (default: the URL's ?schema=, else agent_adapter)"
        ),
    )
    if key:
        parser.add_argument(
            "--key-file",
            metavar="FILE",
            help="HMAC key of a keyed chain (the file's bytes, trailing newline removed)",
        )


def _add_filters(parser: argparse.ArgumentParser, *, stream: bool = False) -> None:
    parser.add_argument("--run", metavar="RUN_ID", help="only events of this run")
    parser.add_argument("--call", metavar="CALL_ID", help="only events of this call")
    parser.add_argument("--tool", metavar="NAME", help="only events of this tool")
    parser.add_argument(
        "--type",
        action="append",
        metavar="TAG",
        help="only events of this type: a tag or a glob ('approval.*'); repeatable; "
        "one that matches no event type is refused",
    )
    if stream:
        # A followed stream has no end to close an array at: JSON Lines only.
        parser.add_argument(
            "--jsonl",
            action="store_true",
            help="print one JSON object per line (JSON Lines) instead of text",
        )
        parser.add_argument("--json", action=_StreamJson, nargs=0, help=argparse.SUPPRESS)
        return
    json_flags = parser.add_mutually_exclusive_group()
    _add_json(json_flags, listing=True)
    json_flags.add_argument(
        "--jsonl",
        action="store_true",
        help="print one JSON object per line (JSON Lines) instead of text",
    )


class _StreamJson(argparse.Action):
    """``--json`` on a stream (``ledger tail``): a usage error that names ``--jsonl``."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        parser.error(
            "--json prints one JSON document, which a followed stream never finishes: "
            "use --jsonl (one JSON object per line)"
        )


def _add_json(parser: Any, *, listing: bool) -> None:
    # One JSON style (compact, UTF-8): one document, an array for a list ([] when empty).
    what = "one JSON array" if listing else "one JSON object"
    parser.add_argument("--json", action="store_true", help=f"print {what} instead of text")


def _add_common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The global options: listed in the top help; accepted, unlisted, after a command."""

    def default(value: Any) -> Any:
        # SUPPRESS keeps a command from resetting what was given before it.
        return value if top else argparse.SUPPRESS

    def shown(text: str) -> str:
        return text if top else argparse.SUPPRESS

    group: Any = parser.add_argument_group("global options") if top else parser
    group.add_argument(
        "--log-format",
        choices=("console", "json"),
        default=default(None),
        help=shown("turn structlog logging on, to stderr, in this format (default: off)"),
    )
    group.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error", "off"),
        default=default(None),
        help=shown("log level when logging is on (default: info)"),
    )
    group.add_argument(
        "--no-color",
        action="store_true",
        default=default(False),
        help=shown("never colour the output (colour is used on a terminal, without NO_COLOR)"),
    )
    group.add_argument(
        "--lock-timeout",
        type=_seconds,
        default=default(LOCK_TIMEOUT_S),
        metavar="SECONDS",
        help=shown(
            "how long a command that records a decision waits for a ledger another "
            f"process holds locked (default: {LOCK_TIMEOUT_S:g})"
        ),
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="An event-sourced executor for AI-agent tool calls: demo and ledger tools.",
        formatter_class=_Formatter,
        epilog=_epilog(
            "demo --approve",
            "ledger audit --db agent-adapter-demo.db",
            "approvals list --db ledger.db --json",
            note=(
                f"Commands on a ledger take --db FILE, or ${DB_ENV} when --db is not "
                "given. --json prints one JSON document: an array for a list ([] when "
                "empty), an object for a single result; --jsonl (ledger show, ledger tail) "
                "one JSON object per line. Exit status: 0 ok, 1 "
                "a failed check or an error (one line on stderr), 2 a usage error, 130 "
                "interrupted."
            ),
        ),
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    _add_common(parser, top=True)
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, top=False)

    def command(group: Any, name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser:
        # The help of a command is its description too, unless it has its own.
        kwargs.setdefault("description", help[:1].upper() + help[1:] + ".")
        sub: argparse.ArgumentParser = group.add_parser(
            name, help=help, formatter_class=_Formatter, **kwargs
        )
        return sub

    def leaf(group: Any, name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser:
        sub = command(group, name, help, parents=[common], **kwargs)
        # For a usage error found after parsing (no --db): its own usage line.
        sub.set_defaults(command_parser=sub)
        return sub

    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, help="what to do"
    )
    demo = leaf(
        commands,
        "demo",
        "run the scripted support agent (no API key, no network)",
        description=(
            "A support agent on the OpenAI Agents SDK, driven by a scripted model, looks up "
            "an order and asks to refund it; you approve, deny or edit the refund; the "
            "same refund is retried and refused; the audit of the ledger is printed."
        ),
        epilog=_epilog(
            "demo                     # asks you at the terminal",
            "demo --approve --reviewer alice",
            "demo --edit-amount 2000 --db /tmp/demo.db",
            note=(
                "The demo replaces its --db file on each run, so it never reads "
                f"${DB_ENV}. Global options go before or after the command; see "
                "agent-adapter --help."
            ),
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
        type=_cents,
        metavar="CENTS",
        help="approve with this amount (integer cents) instead of the one asked for",
    )
    demo.add_argument("--reviewer", metavar="NAME", help="the approver's name in the ledger")
    # What the demo prints with, handed over here: the demo never imports the CLI.
    demo.set_defaults(handler=cmd_demo, prog=PROG, render_audit=render_audit, log_hooks=log_hooks)

    _ledger_commands(commands, command, leaf)
    _approvals_commands(commands, command, leaf)
    _effects_commands(commands, command, leaf)
    _mcp_commands(commands, command, leaf)
    return parser


_Maker = Callable[..., argparse.ArgumentParser]


def _ledger_commands(commands: Any, command: _Maker, leaf: _Maker) -> None:
    ledger = command(
        commands,
        "ledger",
        "read, follow, verify, audit or export a ledger",
        epilog=_epilog(
            "ledger show --db ledger.db --run r1",
            "ledger verify --db ledger.db",
        ),
    )
    actions = ledger.add_subparsers(
        dest="ledger_command", metavar="ACTION", required=True, help="what to do with it"
    )
    show = leaf(
        actions,
        "show",
        "print events: a header, then one line per event (or a JSON array, or JSON lines)",
        epilog=_epilog(
            "ledger show --db ledger.db",
            "ledger show --db ledger.db --run r1 --type 'approval.*'",
            "ledger show --db ledger.db --call c2 --json",
        ),
    )
    _add_db(show)
    _add_filters(show)
    show.set_defaults(handler=cmd_ledger_show)
    tail = leaf(
        actions,
        "tail",
        "print the last events as `show` does, then follow new ones",
        epilog=_epilog(
            "ledger tail --db ledger.db                # until Ctrl-C",
            "ledger tail --db ledger.db -n 50 --no-follow",
            "ledger tail --db ledger.db --type 'call.*' --duration 60",
            "ledger tail --db ledger.db --jsonl",
        ),
    )
    _add_db(tail)
    _add_filters(tail, stream=True)
    tail.add_argument(
        "-n", "--lines", type=_count, default=10, metavar="N", help="events shown first (10)"
    )
    tail.add_argument("--no-follow", dest="follow", action="store_false", help="print and exit")
    tail.add_argument(
        "--interval",
        type=_interval,
        default=0.25,
        metavar="SECONDS",
        help="how often to look for new events (0.25)",
    )
    tail.add_argument(
        "--duration", type=_seconds, metavar="SECONDS", help="stop following after this long"
    )
    tail.set_defaults(handler=cmd_ledger_tail)
    verify = leaf(
        actions,
        "verify",
        "check the hash chain (exit 1 unless it is intact)",
        epilog=_epilog(
            "ledger verify --db ledger.db",
            "ledger verify --db ledger.db --key-file ledger.key --json",
        ),
    )
    _add_db(verify)
    verify.add_argument(
        "--deep",
        action="store_true",
        help="also check the file's structure and indexes (PRAGMA integrity_check; slower)",
    )
    _add_json(verify, listing=False)
    verify.set_defaults(handler=cmd_ledger_verify)
    audit = leaf(
        actions,
        "audit",
        "per-call audit and its problems (exit 1 if there are any)",
        epilog=_epilog("ledger audit --db ledger.db", "ledger audit --db ledger.db --json"),
    )
    _add_db(audit)
    _add_json(audit, listing=False)
    audit.set_defaults(handler=cmd_ledger_audit)
    export = leaf(
        actions,
        "export",
        "print every event as JSON lines, with seq, prev and hash",
        epilog=_epilog("ledger export --db ledger.db > ledger.jsonl"),
    )
    _add_db(export)
    export.set_defaults(handler=cmd_ledger_export)


def _approvals_commands(commands: Any, command: _Maker, leaf: _Maker) -> None:
    approvals = command(
        commands,
        "approvals",
        "answer deferred approval requests",
        epilog=_epilog(
            "approvals list --db ledger.db",
            "approvals approve REQUEST_ID --db ledger.db --reviewer alice",
        ),
    )
    actions = approvals.add_subparsers(
        dest="approvals_command", metavar="ACTION", required=True, help="what to do"
    )
    listing = leaf(
        actions,
        "list",
        "the open (unanswered) requests, oldest first",
        epilog=_epilog("approvals list --db ledger.db", "approvals list --db ledger.db --json"),
    )
    _add_db(listing)
    _add_json(listing, listing=True)
    listing.set_defaults(handler=cmd_approvals_list)
    show_one = leaf(
        actions,
        "show",
        "one request and its status",
        epilog=_epilog("approvals show REQUEST_ID --db ledger.db --json"),
    )
    show_one.add_argument("request_id", metavar="REQUEST_ID", help=_REQUEST_ID_HELP)
    _add_db(show_one)
    _add_json(show_one, listing=False)
    show_one.set_defaults(handler=cmd_approvals_show)
    for name, handler, examples in (
        (
            "approve",
            cmd_approvals_approve,
            (
                "approvals approve REQUEST_ID --db ledger.db --reviewer alice",
                "approvals approve REQUEST_ID --db ledger.db --edit amount_cents=2000",
            ),
        ),
        (
            "deny",
            cmd_approvals_deny,
            ("approvals deny REQUEST_ID --db ledger.db --reason 'over the limit'",),
        ),
    ):
        answer = leaf(actions, name, f"{name} an open request", epilog=_epilog(*examples))
        answer.add_argument("request_id", metavar="REQUEST_ID", help=_REQUEST_ID_HELP)
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
    serve = leaf(
        actions,
        "serve",
        "the approval inbox: a web page to approve, deny or edit open requests",
        description=(
            "Serve one web page of the open requests (tool, run, call, arguments with "
            "redactions, digest, age) and the recent decisions; a reviewer approves, "
            "denies or edits them, and new requests appear without a reload. Every "
            "request needs the token printed at start (or the one in --token-file)."
        ),
        epilog=_epilog(
            "approvals serve --db ledger.db",
            "approvals serve --db ledger.db --port 9000 --token-file inbox.token",
            note=(
                "Binds 127.0.0.1 unless --host says otherwise: anyone who can reach the "
                "port and has the token can decide. Needs the web extra (pip install "
                "'agent-adapter[web]'). " + _GLOBAL_NOTE
            ),
        ),
    )
    _add_db(serve)
    serve.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)"
    )
    serve.add_argument(
        "--port",
        type=_port,
        default=8765,
        help="the port to listen on, 0 for any free one (default: %(default)s)",
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="read the bearer token from FILE (one word, 16 characters or more) "
        "instead of making one up and printing it",
    )
    serve.set_defaults(handler=cmd_approvals_serve)


_REQUEST_ID_HELP = (
    "the request's id: the ApprovalPending the agent got carries it; `approvals list` shows it"
)


def _effects_commands(commands: Any, command: _Maker, leaf: _Maker) -> None:
    effects = command(
        commands,
        "effects",
        "list and resolve ambiguous effect keys",
        epilog=_epilog("effects list --db ledger.db", "effects list --db ledger.db --all"),
    )
    actions = effects.add_subparsers(
        dest="effects_command", metavar="ACTION", required=True, help="what to do"
    )
    elist = leaf(
        actions,
        "list",
        "ambiguous and in-flight effect keys (--all: every key with its status)",
        epilog=_epilog("effects list --db ledger.db", "effects list --db ledger.db --all --json"),
    )
    _add_db(elist)
    elist.add_argument("--all", action="store_true", help="every key with its status")
    _add_json(elist, listing=True)
    elist.set_defaults(handler=cmd_effects_list)
    resolve = leaf(
        actions,
        "resolve",
        "record whether an ambiguous key's effect happened",
        epilog=_epilog(
            "effects resolve refund:A1001 --committed --db ledger.db --reason 'seen in the PSP'",
            "effects resolve refund:A1001 --failed --db ledger.db --reason 'not in the PSP'",
            note=(
                "Check the outside world first (the payment provider, with the key as the "
                "idempotency key): --failed frees the key, and the next call with it runs "
                "the effect again. " + _GLOBAL_NOTE
            ),
        ),
    )
    resolve.add_argument(
        "key", metavar="KEY", help="the effect key, as `effects list` shows it (refund:A1001)"
    )
    _add_db(resolve)
    how = resolve.add_mutually_exclusive_group(required=True)
    how.add_argument("--committed", action="store_true", help="the effect happened")
    how.add_argument("--failed", action="store_true", help="the effect did not happen")
    resolve.add_argument("--reviewer", metavar="NAME", help="who decides (default: $USER)")
    resolve.add_argument("--reason", metavar="TEXT", help="why, recorded in the ledger")
    resolve.add_argument(
        "--force",
        action="store_true",
        help="resolve a key whose holder's lease is still live (only for a holder known to "
        "be gone: its body may be running; recorded, and reported by the audit)",
    )
    resolve.set_defaults(handler=cmd_effects_resolve)


def _mcp_commands(commands: Any, command: _Maker, leaf: _Maker) -> None:
    mcp = command(
        commands,
        "mcp",
        "serve tools to MCP clients through the executor (the MCP gateway)",
        epilog=_epilog("mcp serve --db ledger.db --upstream 'python server.py'"),
    )
    actions = mcp.add_subparsers(
        dest="mcp_command", metavar="ACTION", required=True, help="what to do"
    )
    serve = leaf(
        actions,
        "serve",
        "serve a registry and/or an upstream MCP server's tools, over stdio or HTTP",
        description=(
            "An MCP server whose every tool call runs through the executor and is recorded "
            "in the --db ledger (created when missing). Tools that need approval are asked "
            "of the person through the client's elicitation; a client that cannot ask "
            "gets approval-pending, answered with `agent-adapter approvals approve`. "
            "Over stdio (the default) stdout is the protocol: messages go to stderr."
        ),
        epilog=_epilog(
            "mcp serve --db ledger.db --tools myapp.tools:registry",
            "mcp serve --db ledger.db --upstream 'npx -y @acme/mcp-server' --prefix acme.",
            "mcp serve --db ledger.db --upstream-url http://127.0.0.1:9000/mcp --policy p.toml",
            "mcp serve --db ledger.db --tools myapp.tools:registry --http 127.0.0.1:8765",
        ),
    )
    _add_db(serve)
    serve.add_argument(
        "--tools",
        metavar="MODULE:ATTR",
        help="a Registry to serve (its tools whose targets include mcp), e.g. myapp.tools:registry",
    )
    upstream = serve.add_mutually_exclusive_group()
    upstream.add_argument(
        "--upstream",
        metavar='"CMD ARGS"',
        help="an upstream MCP server to proxy, started as this command over stdio",
    )
    upstream.add_argument(
        "--upstream-url",
        metavar="URL",
        help="an upstream MCP server to proxy, over streamable HTTP",
    )
    serve.add_argument(
        "--upstream-open-timeout",
        type=_interval,
        metavar="S",
        help="how long opening an upstream connection (initialize, tools/list) may take, in "
        "seconds (30)",
    )
    serve.add_argument(
        "--prefix", default="", metavar="P", help="put P before every upstream tool's name"
    )
    serve.add_argument(
        "--policy",
        metavar="FILE",
        help="a TOML file of per-upstream-tool confirm, effect, cache, timeout, "
        "not_executed_on_error ([tools.NAME] tables)",
    )
    serve.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(':PORT' binds 127.0.0.1; port 0 picks a free one, printed on stderr)",
    )
    serve.add_argument(
        "--no-elicit",
        dest="elicit",
        action="store_false",
        help="never ask through the client (it may answer by itself): every approval is "
        "pending until `agent-adapter approvals` answers it",
    )
    serve.add_argument(
        "--run-id",
        metavar="ID",
        help="the run of calls whose client sends no io.agent-adapter/run-id (default: one "
        "run per process over stdio, a fresh run per call over HTTP)",
    )
    serve.add_argument(
        "--name", default="agent-adapter", metavar="NAME", help="the server's name (agent-adapter)"
    )
    serve.set_defaults(handler=cmd_mcp_serve)


def _resolve_db(args: argparse.Namespace) -> None:
    """``--db`` from ``$AGENT_ADAPTER_DB`` when not given; a usage error without either."""
    if "db" not in vars(args) or args.db is not None:
        return
    # An empty variable counts as unset: it can name no file.
    args.db = os.environ.get(DB_ENV) or None
    if args.db is None:
        args.command_parser.error(f"no ledger given: pass --db FILE or set {DB_ENV}")


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
_READ_BY_PYTHON = frozenset({"key_file", "token_file", "policy"})


def _bounded(
    convert: Callable[[str], Any], not_one: str, fits: Callable[[Any], bool], too: str
) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text (else "'text' is not <not_one>"), then check
    ``fits`` (else ``too``, formatted with the text and the value): a usage error either way."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {not_one}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(too.format(text=text, value=value))
        return value

    return parse


# A number of events: 0 or more (Python's slicing would read -3 as "all but the first 3").
_count = _bounded(int, "a whole number", lambda n: n >= 0, "{value} is negative: give 0 or more")
# A refund amount in cents: 1 or more.
_cents = _bounded(
    int, "a whole number of cents", lambda c: c >= 1, "{value}: a refund is 1 cent or more"
)
# A wait in seconds: finite, 0 or more (NaN fails too).
_seconds = _bounded(
    float,
    "a number of seconds",
    lambda s: 0 <= s < math.inf,
    "{text} is not a wait: give 0 or more seconds",
)
# How often to poll: finite and more than 0 (0 would poll in a busy loop, inf never).
_interval = _bounded(
    float,
    "a number of seconds",
    lambda s: 0 < s < math.inf,
    "{text} is not an interval: give a positive number of seconds",
)


def _port(text: str) -> int:
    """A TCP port for argparse: 0 to 65535 (0: any free one), else a usage error."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        # The socket layer would take it modulo 65536 and serve somewhere else silently.
        raise argparse.ArgumentTypeError(f"{port} is not a port: give 0 to 65535 (0: any free one)")
    return port


def _error(message: str) -> int:
    # One line, whatever the message holds: the contract of every expected failure.
    text = " ".join(str(message).split())
    print(f"{PROG}: error: {text}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failed, 2 usage, 130 ^C)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _resolve_db(args)
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
