"""The command line follows the usual conventions: ``--version``, ``AGENT_ADAPTER_DB``,
help with examples, ``--json`` in one style, one event layout, ``--type`` checked, one
lock-timeout default, and a wrong key named as such."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import inspect
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import structlog
from test_cli import KEY, Built, build, cli, columns, read_events, run_main, tamper

from agent_adapter.cli import build_parser, main
from agent_adapter.ledger import SQLiteLedger
from agent_adapter.ledger._events import EffectClaimed

GLOBAL_OPTIONS = ("--log-format", "--log-level", "--no-color", "--lock-timeout")


@pytest.fixture(autouse=True)
def _reset_structlog() -> Any:
    """main() configures structlog for its process; undo it after each in-process test."""
    yield
    structlog.reset_defaults()


@pytest.fixture
def built(tmp_path: Path, clock: Any) -> Built:
    """A real ledger file with five calls and one open request (``test_cli.build``)."""
    path = tmp_path / "ledger.db"
    request_id = asyncio.run(build(path, clock))
    return Built(path, request_id, asyncio.run(read_events(path)))


@pytest.fixture
def no_env_db(monkeypatch: pytest.MonkeyPatch) -> None:
    """AGENT_ADAPTER_DB unset, whatever the environment running the tests holds."""
    monkeypatch.delenv("AGENT_ADAPTER_DB", raising=False)


def subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (sub)command parser below ``parser``, with its command words."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for words, deeper in subparsers(sub):
                    yield f"{name} {words}", deeper


def leaves(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """The parsers that run a command (they set a handler)."""
    return [(w, p) for w, p in subparsers(parser) if p.get_default("handler") is not None]


def examples(parser: argparse.ArgumentParser) -> list[list[str]]:
    """The example command lines of a parser's epilog (``agent-adapter ...``), as argv."""
    found = []
    for line in (parser.epilog or "").splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["agent-adapter"]:
            # The command ends where the shell's redirection or pipe starts.
            cut = next((i for i, w in enumerate(words) if w in (">", "|")), len(words))
            found.append(words[1:cut])
    return found


# -- --version -------------------------------------------------------------------------


def test_version_prints_the_installed_package_version() -> None:
    """`agent-adapter --version` prints the distribution's version and exits 0."""
    done = cli("--version")
    version = importlib.metadata.version("agent-adapter")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"agent-adapter {version}\n", "")


# -- AGENT_ADAPTER_DB ------------------------------------------------------------------


def test_db_defaults_to_agent_adapter_db(
    built: Built, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --db, reading and writing commands use $AGENT_ADAPTER_DB."""
    monkeypatch.setenv("AGENT_ADAPTER_DB", built.db)
    assert run_main(capsys, "ledger", "verify") == (0, "chain: intact (26 events verified)\n", "")
    code, _, err = run_main(capsys, "approvals", "deny", built.request_id, "--reviewer", "bob")
    assert (code, err) == (0, "")
    answered = asyncio.run(read_events(built.path))[-1]
    assert (answered.type, answered.request_id, answered.approved, answered.reviewer) == (
        "approval.answered",
        built.request_id,
        False,
        "bob",
    )


def test_db_option_wins_over_agent_adapter_db(
    built: Built,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--db is used when given, even when $AGENT_ADAPTER_DB names another file."""
    monkeypatch.setenv("AGENT_ADAPTER_DB", str(tmp_path / "missing.db"))
    assert run_main(capsys, "ledger", "verify", "--db", built.db) == (
        0,
        "chain: intact (26 events verified)\n",
        "",
    )


@pytest.mark.parametrize("env", [None, ""])
def test_no_db_and_no_agent_adapter_db_names_both(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: str | None
) -> None:
    """Neither --db nor $AGENT_ADAPTER_DB (unset or empty): a usage error saying both."""
    if env is None:
        monkeypatch.delenv("AGENT_ADAPTER_DB", raising=False)
    else:
        monkeypatch.setenv("AGENT_ADAPTER_DB", env)
    with pytest.raises(SystemExit) as exited:
        main(["ledger", "show"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.splitlines()[-1] == (
        "agent-adapter ledger show: error: no ledger given: pass --db FILE or set AGENT_ADAPTER_DB"
    )


# -- help ------------------------------------------------------------------------------


def test_global_options_are_listed_once_at_the_top(no_env_db: None) -> None:
    """The global options are listed in `agent-adapter --help` only, once each; a
    command's help names them in one line and still accepts them after the command."""
    parser = build_parser()
    entries = [line.split()[0] for line in parser.format_help().splitlines() if line[:4] == "  --"]
    assert [entries.count(option) for option in GLOBAL_OPTIONS] == [1, 1, 1, 1]
    for words, sub in subparsers(parser):
        text = sub.format_help()
        listed = [line.split()[0] for line in text.splitlines() if line[:4] == "  --"]
        assert not set(listed) & set(GLOBAL_OPTIONS), words
    args = parser.parse_args(["ledger", "verify", "--db", "x", "--log-format", "json"])
    assert args.log_format == "json"


def test_every_command_has_examples_that_parse(no_env_db: None) -> None:
    """The top help and every (sub)command's help end with examples, each of which parses."""
    parser = build_parser()
    helps = [("agent-adapter", parser), *subparsers(parser)]
    assert all(examples(p) for _, p in helps), [w for w, p in helps if not examples(p)]
    for words, sub in helps:
        assert "examples:" in sub.format_help(), words
        for argv in examples(sub):
            args = build_parser().parse_args(argv)
            assert args.handler is not None, argv


def test_every_positional_argument_is_described() -> None:
    """Every positional argument (commands, request ids, keys) has a description."""
    parser = build_parser()
    undescribed = [
        (words, action.dest)
        for words, sub in [("", parser), *subparsers(parser)]
        for action in sub._actions
        if not action.option_strings and action.help in (None, "", argparse.SUPPRESS)
    ]
    assert undescribed == []


# -- --json ----------------------------------------------------------------------------


def test_verify_json_is_one_object(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    """`ledger verify --json` prints the Verification as one JSON object; exit as without."""
    intact = run_main(capsys, "ledger", "verify", "--db", built.db, "--json")
    tamper(built.path, 5)
    broken = run_main(capsys, "ledger", "verify", "--db", built.db, "--json")
    assert (intact, broken) == (
        (0, '{"ok":true,"checked":26,"first_bad_seq":null,"reason":""}\n', ""),
        (
            1,
            '{"ok":false,"checked":4,"first_bad_seq":5,'
            '"reason":"seq 5 does not match its hash (altered)"}\n',
            "",
        ),
    )


def compact_objects(text: str) -> list[dict[str, Any]]:
    """The lines of ``text``, each checked to be one JSON object in the compact style."""
    objects = []
    for line in text.splitlines():
        value = json.loads(line)
        assert isinstance(value, dict), line
        # Compact (no spaces after separators) and UTF-8 (no \\u escapes): re-encoding
        # the parsed value with the CLI's encoder gives the line back.
        assert msgspec.json.encode(value).decode() == line
        objects.append(value)
    return objects


def json_array(text: str) -> list[dict[str, Any]]:
    """``text`` checked to be one JSON array of objects, each compact on its own line."""
    value = json.loads(text)
    assert isinstance(value, list), text
    if not value:
        assert text == "[]\n"
        return value
    lines = text.splitlines()
    assert (lines[0], lines[-1]) == ("[", "]")
    items = [line.removesuffix(",") for line in lines[1:-1]]
    assert compact_objects("\n".join(items)) == value
    return value


@pytest.mark.parametrize(
    "command",
    [
        ["ledger", "show", "--json"],
        ["approvals", "list", "--json"],
        ["effects", "list", "--json"],
        ["effects", "list", "--all", "--json"],
    ],
    ids=" ".join,
)
def test_json_lists_are_one_json_array(
    built: Built, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """A list's ``--json`` is one JSON document (``json.load`` and ``python -m json.tool``
    read it): an array with a compact object per line."""
    code, out, err = run_main(capsys, *command, "--db", built.db)
    assert (code, err) == (0, "")
    assert json_array(out)


@pytest.mark.parametrize(
    "command",
    [
        ["ledger", "show", "--run", "nope", "--json"],
        ["approvals", "list", "--json"],
        ["effects", "list", "--json"],
    ],
    ids=" ".join,
)
def test_an_empty_json_list_is_an_empty_array(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Nothing to list is ``[]``, not an empty output that no JSON reader takes."""
    db = str(tmp_path / "empty.db")

    async def create() -> None:  # a ledger with no event
        ledger = SQLiteLedger(db)
        await ledger.open()
        await ledger.close()

    asyncio.run(create())
    code, out, err = run_main(capsys, *command, "--db", db)
    assert (code, out, err) == (0, "[]\n", "")


@pytest.mark.parametrize(
    "command",
    [
        ["ledger", "show", "--jsonl"],
        ["ledger", "tail", "--no-follow", "-n", "30", "--jsonl"],
        ["ledger", "export"],
    ],
    ids=" ".join,
)
def test_json_lines_are_one_compact_object_per_line(
    built: Built, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """A stream (``--jsonl``, and the export) is JSON Lines: one compact object per event."""
    code, out, err = run_main(capsys, *command, "--db", built.db)
    assert (code, err) == (0, "")
    assert compact_objects(out)


def test_tail_json_is_a_usage_error_naming_jsonl(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """A followed tail never ends an array: ``--json`` there is refused (exit 2) for
    ``--jsonl``, before anything is printed."""
    with pytest.raises(SystemExit) as stopped:
        main(["--no-color", "ledger", "tail", "--json", "--db", built.db])
    captured = capsys.readouterr()
    assert (stopped.value.code, captured.out) == (2, "")
    assert captured.err.splitlines()[-1] == (
        "agent-adapter ledger tail: error: --json prints one JSON document, which a followed "
        "stream never finishes: use --jsonl (one JSON object per line)"
    )


@pytest.mark.parametrize(
    ("command", "status"),
    # (The fixture's timed-out call leaves its effect key ambiguous: the audit's problem.)
    [(["ledger", "verify", "--json"], 0), (["ledger", "audit", "--json"], 1)],
    ids=["ledger verify --json", "ledger audit --json"],
)
def test_json_single_results_are_one_compact_object(
    built: Built, capsys: pytest.CaptureFixture[str], command: list[str], status: int
) -> None:
    """A single result is one compact JSON object on one line."""
    code, out, err = run_main(capsys, *command, "--db", built.db)
    assert (code, err) == (status, "")
    assert len(compact_objects(out)) == 1


def test_effects_list_json_values(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    """`effects list --all --json`: one object per key, whole values."""
    code, out, _ = run_main(capsys, "effects", "list", "--all", "--json", "--db", built.db)
    claims = {e.key: e for e in built.events if isinstance(e, EffectClaimed)}

    def holder(key: str) -> str:
        c = claims[key]
        return (
            f'"holder":"{c.holder}","pid":{c.pid},"host":"{c.host}",'
            f'"lease_until":{c.lease_until!r}}}'
        )

    assert (code, out.splitlines()) == (
        0,
        [
            "[",
            '{"key":"refund:A1","status":"committed","run_id":"r1","call_id":"c2",'
            + holder("refund:A1")
            + ",",
            '{"key":"ship:A1","status":"ambiguous","run_id":"r1","call_id":"c4",'
            + holder("ship:A1"),
            "]",
        ],
    )
    assert claims["refund:A1"].holder and claims["refund:A1"].lease_until > 0


# -- show and tail: one layout ---------------------------------------------------------


def test_show_and_tail_print_the_same_lines(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ledger tail --no-follow` prints what `ledger show` prints for the same events:
    one header, then one line per event with the same columns."""
    show = run_main(capsys, "ledger", "show", "--db", built.db, "--run", "r1")
    tail = run_main(
        capsys, "ledger", "tail", "--db", built.db, "--run", "r1", "-n", "30", "--no-follow"
    )
    assert tail == show
    code, out, err = show
    assert (code, err) == (0, "")
    header, *rows = out.splitlines()
    assert columns(header) == ["seq", "time (UTC)", "type", "run", "call", "tool", "details"]
    r1 = [e for e in built.events if e.run_id == "r1"]
    assert [columns(r)[:6] for r in rows] == [
        [str(e.seq), "1970-01-01 00:16:40.000", e.type, e.run_id, e.call_id, e.tool] for e in r1
    ]
    # The type column fits the longest tag: lines printed later (tail following new
    # events of other types) line up with these.
    assert {r.index("1970") for r in rows} == {header.index("time")}
    assert {len(r.split("  r1  ")[0]) for r in rows} == {header.index("run") - 2}


def test_tail_prints_the_last_lines_under_the_header(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ledger tail -n 2 --no-follow`: the header of `show`, then its last two lines."""
    _, shown, _ = run_main(capsys, "ledger", "show", "--db", built.db)
    header, *rows = shown.splitlines()
    code, out, err = run_main(capsys, "ledger", "tail", "--db", built.db, "-n", "2", "--no-follow")
    assert (code, out.splitlines(), err) == (0, [header, *rows[-2:]], "")


# -- --type ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["ledger", "show"], ["ledger", "tail", "--no-follow"]])
@pytest.mark.parametrize("tag", ["aproval.*", "call.success", "Call.requested"])
def test_type_that_matches_no_known_tag_is_refused(
    built: Built, capsys: pytest.CaptureFixture[str], command: list[str], tag: str
) -> None:
    """A --type (tag or glob) that matches no event type is one line listing the types."""
    from agent_adapter.ledger import EVENT_TAGS

    code, out, err = run_main(capsys, *command, "--db", built.db, "--type", "call.*", "--type", tag)
    known = ", ".join(sorted(EVENT_TAGS))
    assert (code, out, err) == (
        1,
        "",
        f"agent-adapter: error: --type {tag!r} matches no event type; the types are: {known}\n",
    )


def test_event_tags_are_every_tag_of_the_ledger() -> None:
    """EVENT_TAGS is the tag of every event class, 'unknown' (a newer version's) included."""
    from agent_adapter import ledger
    from agent_adapter.ledger import EVENT_TAGS

    classes = [
        obj
        for obj in vars(ledger).values()
        if inspect.isclass(obj) and issubclass(obj, ledger.Event) and obj is not ledger.Event
    ]
    assert EVENT_TAGS == frozenset(c.__struct_config__.tag for c in classes)
    assert {"call.requested", "approval.pending", "effect.resolved", "unknown"} <= EVENT_TAGS


# -- one lock timeout ------------------------------------------------------------------


def test_one_lock_timeout_default_for_the_cli_and_the_library(no_env_db: None) -> None:
    """SQLiteLedger and --lock-timeout wait the same time by default: LOCK_TIMEOUT_S."""
    from agent_adapter.ledger import LOCK_TIMEOUT_S

    library = inspect.signature(SQLiteLedger).parameters["busy_timeout_s"].default
    parsed = build_parser().parse_args(["approvals", "deny", "x", "--db", "l.db"]).lock_timeout
    top = build_parser().format_help()
    assert (library, parsed, LOCK_TIMEOUT_S) == (30.0, 30.0, 30.0)
    assert "locked (default: 30)" in " ".join(top.split())


# -- a wrong key -----------------------------------------------------------------------


def test_verify_with_a_wrong_key_says_wrong_key_or_altered(
    tmp_path: Path, clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key under which no hash verifies is "wrong key, or the ledger was altered":
    the chain cannot be checked (exit 1), never "broken at seq 1 (altered)"."""
    path = tmp_path / "keyed.db"
    asyncio.run(build(path, clock, key=KEY))
    (tmp_path / "wrong").write_bytes(b"other\n")
    reason = "no event's hash verifies under this key: wrong key, or the ledger was altered"
    wrong = ["--db", str(path), "--key-file", str(tmp_path / "wrong")]
    assert run_main(capsys, "ledger", "verify", *wrong) == (
        1,
        f"chain: cannot be checked: {reason}\n",
        "",
    )
    assert run_main(capsys, "ledger", "verify", *wrong, "--json") == (
        1,
        json.dumps({"ok": False, "checked": 0, "first_bad_seq": None, "reason": reason},
                   separators=(",", ":")) + "\n",
        "",
    )  # fmt: skip


def test_verify_with_the_right_key_still_names_an_altered_first_event(
    tmp_path: Path, clock: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the right key the later hashes verify, so a bad seq 1 is named as altered."""
    path = tmp_path / "keyed.db"
    asyncio.run(build(path, clock, key=KEY))
    (tmp_path / "key").write_bytes(KEY)
    _alter_first(path)
    assert run_main(
        capsys, "ledger", "verify", "--db", str(path), "--key-file", str(tmp_path / "key")
    ) == (1, "chain: broken at seq 1: seq 1 does not match its hash (altered)\n", "")


def _alter_first(path: Path) -> None:
    import sqlite3

    conn = sqlite3.connect(path)
    with conn:
        (payload,) = conn.execute("SELECT payload FROM events WHERE seq = 1").fetchone()
        altered = bytes(payload).replace(b'"A1"', b'"A2"')
        assert altered != payload
        conn.execute("UPDATE events SET payload = ? WHERE seq = 1", (altered,))
    conn.close()
