"""Output: colour for terminals, tables, one-line event details, the audit report."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from ..ledger import Audit, EffectRecord, Event, Verification

__all__ = [
    "EVENT_HEADERS",
    "EventLayout",
    "Style",
    "clock_text",
    "compact",
    "event_details",
    "event_json",
    "json_text",
    "print_json_list",
    "render_audit",
    "short",
    "table",
    "verification_line",
]

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


def compact(value: Any, limit: int = 60) -> str:
    """``value`` as compact JSON (text as is), cut to ``limit`` characters."""
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
            value = compact(msgspec.to_builtins(value), limit)
        parts.append(f"{name}={value}")
    return " ".join(parts)


def event_json(event: Event) -> str:
    """One event as a JSON line: its tag, every field, and always seq, prev and hash."""
    data = msgspec.to_builtins(event)
    head = {"type": event.type, "seq": event.seq, "prev": event.prev, "hash": event.hash}
    return msgspec.json.encode({**head, **data}).decode()


def clock_text(ts: float) -> str:
    """``ts`` (seconds) as a UTC date and time with milliseconds."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}"


EVENT_HEADERS = ("seq", "time (UTC)", "type", "run", "call", "tool", "details")


class EventLayout:
    """The one line layout of ``ledger show`` and ``ledger tail``: a header, then a line
    per event with the columns of ``EVENT_HEADERS``.

    Widths are fixed when the layout is made, from the events known then (and ``last_seq``
    for the seq column); the type column fits every tag this version knows. So the lines
    ``tail`` prints while following line up with the first ones, and a longer run, call
    or tool later widens only its own line.
    """

    def __init__(self, events: Sequence[Event], style: Style, *, last_seq: int = 0) -> None:
        from ..ledger import EVENT_TAGS

        self._style = style
        seq = max([last_seq, *(e.seq for e in events)])
        self._widths = [
            max(len(EVENT_HEADERS[0]), len(str(seq))),
            len(clock_text(0.0)),
            max(len(t) for t in (*EVENT_TAGS, EVENT_HEADERS[2])),
            max([len(EVENT_HEADERS[3]), *(len(_cell(e.run_id)) for e in events)]),
            max([len(EVENT_HEADERS[4]), *(len(_cell(e.call_id)) for e in events)]),
            max([len(EVENT_HEADERS[5]), *(len(_cell(e.tool)) for e in events)]),
        ]

    def _join(self, cells: Sequence[str], *, seq: str) -> str:
        widths = self._widths
        padded = [seq.rjust(widths[0])]
        padded += [c + " " * (w - _visible_len(c)) for c, w in zip(cells, widths[1:], strict=False)]
        return "  ".join([*padded, *cells[len(widths) - 1 :]]).rstrip()

    def header(self) -> str:
        """The header line (dim on a terminal)."""
        line = self._join(EVENT_HEADERS[1:], seq=EVENT_HEADERS[0])
        return self._style.paint(line, "dim")

    def line(self, event: Event) -> str:
        """One event: seq, time, type (coloured), run, call, tool, details."""
        cells = [
            clock_text(event.ts),
            self._style.tag(event.type),
            _cell(event.run_id),
            _cell(event.call_id),
            _cell(event.tool),
            event_details(event),
        ]
        return self._join(cells, seq=str(event.seq))


def _cell(text: str) -> str:
    return text or "-"


def json_text(value: Any) -> str:
    """``value`` as the command line's one JSON style: compact, UTF-8, one line."""
    # msgspec never writes NaN or Infinity (json.dumps does: not JSON), and a non-ASCII
    # character is itself, not an escape, as in event_json and the ledger's own bytes.
    return msgspec.json.encode(value).decode()


def print_json_list(items: Iterable[str], out: IO[str]) -> None:
    """``--json`` of a list: one JSON array (``[]`` when empty), an element per line.

    Written as it goes (a ledger's events are not held twice), and one document, so
    ``json.load`` and ``python -m json.tool`` read it; JSON Lines is ``--jsonl``.
    """
    first = True
    for item in items:
        out.write(("[\n" if first else ",\n") + item)
        first = False
    out.write("[]\n" if first else "\n]\n")


def _approval_text(record: Any) -> str:
    kinds = {e.type for e in record.events}
    if not record.approvals and "approval.pending" in kinds and "approval.consumed" not in kinds:
        # A deferred port holds the request (answered or not, no call has used it yet).
        return "answered, not used yet" if "approval.answered" in kinds else "pending at a reviewer"
    if not record.approval_requested and not record.approvals:
        return "-"
    if not record.approvals:
        return "requested, no decision"
    texts = []
    for a in record.approvals:
        verb = "approved" if a.approved else "denied"
        if not a.reviewer:  # nobody decided (the demo failing closed with no terminal)
            texts.append(f"{verb}, no reviewer" + (f" ({a.reason})" if a.reason else ""))
            continue
        texts.append(f"{verb} by {a.reviewer} via {a.source}" + (" (edited)" if a.edited else ""))
    return "; ".join(texts)


def verification_line(verification: Verification, style: Style) -> str:
    """One line: the chain is intact, broken at a named seq, or cannot be checked."""
    if verification.ok:
        # An intact chain may still come with a limit of the check (no mark file): said.
        note = f"; {verification.reason}" if verification.reason else ""
        return (
            style.paint("chain: intact", "green")
            + f" ({verification.checked} events verified{note})"
        )
    if verification.first_bad_seq is None:
        return style.paint("chain: cannot be checked", "yellow") + f": {verification.reason}"
    return (
        style.paint(f"chain: broken at seq {verification.first_bad_seq}", "red")
        + f": {verification.reason}"
    )


def _effect_status(effect: EffectRecord, style: Style) -> str:
    # A resolved key says who answered and how, not only what the key is now.
    if effect.resolution is not None:
        who = effect.resolution.reviewer or "nobody"
        return style.paint(f"resolved {effect.resolution.outcome} by {who}", "cyan")
    if effect.status == "ambiguous":
        return style.paint("ambiguous", "yellow")
    return effect.status


def render_audit(audit: Audit, style: Style) -> list[str]:
    """The audit as lines: one row per call, one per effect key with its status, the
    chain's verification, then the problems."""
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
    lines.append(f"effect keys: {len(audit.effects)}")
    if audit.effects:
        effect_rows = [
            [
                effect.key,
                _effect_status(effect, style),
                effect.run_id or "-",
                effect.call_id or "-",
                style.tag(effect.outcome) if effect.outcome else "(none)",
            ]
            for effect in audit.effects.values()
        ]
        effect_headers = ("key", "status", "run", "call", "outcome")
        lines += ["  " + row for row in table(effect_headers, effect_rows, style)]
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
