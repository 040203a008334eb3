"""The documentation can be followed: every link and anchor resolves, and every
``agent-adapter`` command line it shows is one the command line accepts."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
from _docs import DOCS, README, REPO, page, pages

from agent_adapter.cli import build_parser

FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
COMMAND = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?agent-adapter(?: |$)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links() -> list[tuple[Path, str]]:
    found = []
    for path in pages():
        prose = FENCE.sub("", path.read_text())
        prose = re.sub(r"`[^`\n]*`", "", prose)  # a link inside inline code is not a link
        found += [(path, target) for target in LINK.findall(prose)]
    return found


def _command_lines() -> list[tuple[Path, str, bool]]:
    """Command lines shown: whole lines in shell blocks, and names of commands in inline
    code (``agent-adapter ledger show --call``: the command and its options must exist)."""
    found = []
    for path in pages():
        text = path.read_text()
        for block in re.findall(
            r"^```(?:bash|sh|console|shell)\n(.*?)^```", text, flags=re.S | re.M
        ):
            body = re.sub(r"\\\n\s*", " ", block)  # continued lines are one line
            found += [(path, line.strip(), True) for line in body.splitlines()]
        prose = FENCE.sub("", text)
        found += [(path, span, False) for span in re.findall(r"`([^`\n]+)`", prose)]
    shown = []
    for path, line, whole in found:
        if not COMMAND.match(line):
            continue
        # A synopsis ([--db FILE], a|b, ...) or a list of commands (list/show) is not one line.
        if re.search(r"[\[\]|…]|\.\.\.|\w/\w", line.split(" #")[0]):
            continue
        shown.append((path, line, whole))
    return shown


def _known(argv: list[str]) -> str:
    """What is wrong with the command named by ``argv`` (subcommands, then options), or ""."""
    parser = build_parser()
    words = list(argv)
    while words and not words[0].startswith("-"):
        subs = [a for a in parser._actions if isinstance(getattr(a, "choices", None), dict)]
        if not subs:
            break
        choices = subs[0].choices
        if words[0] not in choices:
            return f"no command {words[0]!r} (choices: {', '.join(choices)})"
        parser = choices[words.pop(0)]
    options = parser._option_string_actions
    unknown = [
        w.split("=")[0] for w in words if w.startswith("-") and w.split("=")[0] not in options
    ]
    return f"no option {unknown[0]}" if unknown else ""


def test_the_docs_exist_where_the_readme_says() -> None:
    """The README is the way in: short, and every page under docs/ is reachable from it."""
    assert len(README.read_text().splitlines()) <= 300
    linked = {
        (README.parent / target.split("#")[0]).resolve()
        for p, target in _links()
        if p == README and not target.startswith(("http:", "https:", "#"))
    }
    for path in DOCS.rglob("*.md"):
        reached = path.resolve() in linked or any(
            (p.parent / t.split("#")[0]).resolve() == path.resolve()
            for p, t in _links()
            if p.resolve() in linked
        )
        assert reached, (
            f"{path.relative_to(REPO)} is linked from neither README.md nor a page it links"
        )


def test_every_link_and_anchor_resolves() -> None:
    broken = []
    for path, target in _links():
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, anchor = target.partition("#")
        goal = (path.parent / file_part).resolve() if file_part else path
        if not goal.exists():
            broken.append(f"{path.relative_to(REPO)}: {target} (no such file)")
        elif anchor and goal.suffix == ".md" and anchor not in _anchors(goal):
            broken.append(f"{path.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []
    assert len(_links()) > 30  # the pages link to each other: the check saw them


@pytest.mark.parametrize(
    "where, line, whole", _command_lines(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_command_line_shown_parses(where: Path, line: str, whole: bool) -> None:
    argv = shlex.split(COMMAND.sub("", line, count=1), comments=True)
    assert _known(argv) == "", f"{where.relative_to(REPO)}: {line!r}"
    if not whole:
        return  # inline code names a command; a shell block shows one to type
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            assert exc.code == 0, f"{where.relative_to(REPO)}: {line!r}: {err.getvalue()}"


def _leaves(parser: object, path: tuple[str, ...] = ()) -> list[str]:
    subs = [
        a
        for a in getattr(parser, "_actions", [])
        if hasattr(a, "choices") and isinstance(a.choices, dict)
    ]
    if not subs:
        return [" ".join(path)]
    return [leaf for name, sub in subs[0].choices.items() for leaf in _leaves(sub, (*path, name))]


def test_the_synopsis_names_every_command() -> None:
    synopsis = FENCE.findall(page("cli.md"))[0]
    missing = [c for c in _leaves(build_parser()) if f"agent-adapter {c}" not in synopsis]
    assert missing == []
    assert len(_command_lines()) > 20
