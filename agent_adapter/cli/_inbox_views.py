"""What the approval inbox shows beside a request, and its read-only view of one run.

For a request: what the tool does (the description recorded with the request), its
effect key and that key's status now (from the ledger), the fields of the tool's recorded
JSON Schema with their descriptions, and, for an edit, what changed from the requested
arguments. The inbox may run without the registry: everything here comes from the ledger,
and what a request does not hold (one recorded by an older version or a bridge that does
not record it) is shown as "not recorded", never guessed.

The run view (``run_page``) is the timeline of one run's calls, each event in ledger
order: requested, validated, asked, answered (by whom), approved for which digest,
claimed, started, outcome. Every value is HTML-escaped: arguments, reasons and even ids
come from a model or a caller.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ._render import event_details

if TYPE_CHECKING:
    from ..ledger import CallRecord, Event

__all__ = [
    "ABSENT",
    "MAX_RUN_EVENTS",
    "arg_changes",
    "changes_html",
    "changes_text",
    "description_html",
    "effect_html",
    "esc",
    "fields_html",
    "json_block",
    "json_line",
    "run_link",
    "run_page",
    "same_args",
    "status_now",
    "utc_clock",
]

#: The run view shows at most this many events (the CLI reads the rest).
MAX_RUN_EVENTS = 5000
#: Said wherever the ledger holds nothing to show.
NOT_RECORDED = "not recorded"
#: The side of an ``arg_changes`` entry that has no such argument.
ABSENT = object()


def esc(value: Any) -> str:
    """``value`` as text, HTML-escaped (quotes too: safe in an attribute)."""
    return html.escape(str(value), quote=True)


def json_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False, separators=(", ", ": "))


def json_block(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


def utc_clock(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def run_link(run_id: str, call_id: str = "") -> str:
    """The run view's address for ``run_id`` (at ``call_id``'s timeline when given)."""
    href = "/run?id=" + quote(run_id, safe="")
    return href + ("#call-" + quote(call_id, safe="") if call_id else "")


# -- one request ---------------------------------------------------------------------


def description_html(description: str) -> str:
    """The tool's description as recorded, or that none was."""
    if not description.strip():
        return (
            '<p class="description missing">what the tool does: not recorded with this request</p>'
        )
    return f'<p class="description">{esc(description.strip())}</p>'


def status_now(held: Any) -> str:
    """The status of an effect key's state now, as an executor on this host sees it:
    ``committed``, ``in flight`` (its holder's lease is live), ``ambiguous`` (a claim
    whose holder is gone or whose lease ran out, with no outcome) or ``free``."""
    from ..engine import host_identity
    from ..ledger import DEFAULT_SKEW_MARGIN_S

    if held is None:
        return "free"
    return str(held.status_at(time.time(), DEFAULT_SKEW_MARGIN_S, host_identity()))


def effect_html(key: str | None, effects: dict[str, Any]) -> str:
    """The request's effect key and its status now, with the call that holds it."""
    if key is None:
        # (A tool without an effect template, or a request recorded without its key.)
        return '<span class="effect none">no effect key recorded with this request</span>'
    held = effects.get(key)
    status = status_now(held)
    text = f"<code>{esc(key)}</code> "
    text += f'<span class="effect-status" data-status="{esc(status)}">{esc(status)}</span>'
    if held is not None and status != "free":
        text += (
            f' (by <a href="{esc(run_link(held.run_id, held.call_id))}">call '
            f"<code>{esc(held.call_id)}</code></a>, run <code>{esc(held.run_id)}</code>)"
        )
    return text


def _type_text(schema: Any) -> str:
    if not isinstance(schema, dict):
        return ""
    if "enum" in schema and isinstance(schema["enum"], list):
        return "one of " + ", ".join(json_line(v) for v in schema["enum"])
    if "const" in schema:
        return "= " + json_line(schema["const"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if isinstance(kind, str):
        items = schema.get("items")
        if kind == "array" and isinstance(items, dict) and _type_text(items):
            return f"array of {_type_text(items)}"
        return kind
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1]
    for word in ("anyOf", "oneOf"):
        options = schema.get(word)
        if isinstance(options, list):
            return " or ".join(t for t in map(_type_text, options) if t)
    return ""


def _resolved(schema: dict[str, Any], node: Any) -> Any:
    # A field typed by a $ref (a nested Struct) takes its description from the
    # definition when the field has none of its own.
    if not isinstance(node, dict) or "description" in node:
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = schema.get("$defs", {}).get(ref.removeprefix("#/$defs/"))
        if isinstance(target, dict):
            return {**target, **node}
    return node


def fields_html(schema: dict[str, Any] | None, args: Any) -> str:
    """A row per argument: its name, the value as recorded, its type (required or its
    default) and its description from the tool's recorded JSON Schema."""
    values = args if isinstance(args, dict) else {}
    if schema is None:
        names = list(values)
        props: dict[str, Any] = {}
        required: Sequence[Any] = ()
    else:
        found = schema.get("properties")
        props = found if isinstance(found, dict) else {}
        listed = schema.get("required")
        required = listed if isinstance(listed, list) else ()
        names = list(props) + [n for n in values if n not in props]
    if not names:
        return ""
    rows = []
    for name in names:
        node = _resolved(schema or {}, props.get(name))
        value = values.get(name, ABSENT)
        shown = "(not given)" if value is ABSENT else json_line(value)
        if schema is None:
            kind = about = f'<span class="missing">{NOT_RECORDED}</span>'
        elif node is None:
            kind, about = "", '<span class="missing">not in the schema</span>'
        else:
            kind = esc(_type_text(node))
            if name in required:
                kind += ", required"
            elif isinstance(node, dict) and "default" in node:
                kind += esc(f", default {json_line(node['default'])}")
            text = node.get("description") if isinstance(node, dict) else None
            about = (
                esc(text)
                if isinstance(text, str) and text.strip()
                else '<span class="missing">none in the schema</span>'
            )
        rows.append(
            f'<tr data-field="{esc(name)}"><td><code>{esc(name)}</code></td>'
            f'<td class="value"><code>{esc(shown)}</code></td><td>{kind}</td>'
            f'<td class="about">{about}</td></tr>'
        )
    note = (
        f'<p class="missing">the tool\'s schema: {NOT_RECORDED} with this request (field '
        "types and descriptions unknown here)</p>"
        if schema is None
        else ""
    )
    return (
        '<table class="fields"><thead><tr><th>field</th><th>as requested</th><th>type</th>'
        f"<th>description</th></tr></thead><tbody>{''.join(rows)}</tbody></table>{note}"
    )


def same_args(a: Any, b: Any) -> bool:
    """Equal as JSON values (1 and 1.0 differ, as they do for the digest)."""
    from ..engine import canonical

    try:
        return bool(canonical(a) == canonical(b))
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False


def arg_changes(before: Any, after: Any) -> list[tuple[str, Any, Any]]:
    """The top-level arguments an edit changed: (name, requested, edited), in the edit's
    order, then the ones it removed; a side without the argument is ``ABSENT``."""
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    names = list(new) + [n for n in old if n not in new]
    found = []
    for name in names:
        a, b = old.get(name, ABSENT), new.get(name, ABSENT)
        if a is ABSENT or b is ABSENT or not same_args(a, b):
            found.append((name, a, b))
    return found


def _side(value: Any, absent: str) -> str:
    if value is ABSENT:
        return f'<span class="missing">{esc(absent)}</span>'
    return f"<code>{esc(json_line(value))}</code>"


def changes_html(before: Any, after: Any) -> str:
    """A table of what an edit changed (requested -> edited), or that it changed nothing."""
    found = arg_changes(before, after)
    if not found:
        return '<p class="diff none">the same arguments as requested</p>'
    rows = []
    for name, a, b in found:
        kind = "added" if a is ABSENT else "removed" if b is ABSENT else "changed"
        rows.append(
            f'<tr class="{kind}" data-field="{esc(name)}"><td><code>{esc(name)}</code></td>'
            f"<td>{_side(a, '(not requested)')}</td>"
            f"<td>{_side(b, '(removed: its default applies)')}</td></tr>"
        )
    return (
        '<table class="diff"><thead><tr><th>field</th><th>requested</th><th>edited</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def changes_text(before: Any, after: Any) -> str:
    """What an edit changed, on one line (``amount_cents: 4250 -> 2000``)."""
    parts = []
    for name, a, b in arg_changes(before, after):
        left = "(not requested)" if a is ABSENT else json_line(a)
        right = "(removed)" if b is ABSENT else json_line(b)
        parts.append(f"{name}: {left} -> {right}")
    return "; ".join(parts) or "the same arguments as requested"


# -- one run ---------------------------------------------------------------------------


def _short(digest: str) -> str:
    return f'<code title="{esc(digest)}">{esc(digest[:12])}</code>' if digest else "-"


def _verdict(approved: bool) -> str:
    word = "approved" if approved else "denied"
    return f'<span class="{word}">{word}</span>'


def _step(event: Event, asked: dict[str, Any]) -> str:
    """What one event says, for a reader of the timeline (HTML)."""
    from ..ledger import (
        ApprovalAnswered,
        ApprovalConsumed,
        ApprovalDeferred,
        ApprovalGranted,
        ApprovalRejected,
        ApprovalRequested,
        CallExchanged,
        CallRequested,
        CallStarted,
        CallValidated,
        EffectClaimed,
    )

    if isinstance(event, CallRequested):
        return f"arguments <code>{esc(json_line(event.args))}</code>"
    if isinstance(event, CallValidated):
        return f"arguments valid, digest {_short(event.digest)}"
    if isinstance(event, ApprovalRequested):
        return f"approval needed for digest {_short(event.digest)}"
    if isinstance(event, ApprovalDeferred):
        return (
            f"asked a reviewer: request <code>{esc(event.request_id)}</code> for digest "
            f"{_short(event.digest)}"
        )
    if isinstance(event, ApprovalAnswered):
        text = (
            f"{_verdict(event.approved)} by <strong>{esc(event.reviewer)}</strong> "
            f"(request <code>{esc(event.request_id)}</code>)"
        )
        if event.reason:
            text += f": {esc(event.reason)}"
        if event.edits is not None:
            text += f"; edited: {esc(changes_text(asked.get(event.request_id), event.edits))}"
        return text
    if isinstance(event, ApprovalConsumed):
        return f"uses the decision of request <code>{esc(event.request_id)}</code>"
    if isinstance(event, ApprovalGranted | ApprovalRejected):
        approved = isinstance(event, ApprovalGranted)
        who = esc(event.reviewer) if event.reviewer else "nobody"
        text = (
            f"{_verdict(approved)} by <strong>{who}</strong> via {esc(event.source)} for "
            f"digest {_short(event.digest)}"
        )
        if isinstance(event, ApprovalGranted) and event.edited:
            text += " (edited arguments)"
        if event.reason:
            text += f": {esc(event.reason)}"
        return text
    if isinstance(event, EffectClaimed):
        return f"effect key <code>{esc(event.key)}</code> claimed for digest {_short(event.digest)}"
    if isinstance(event, CallStarted):
        key = f", effect key <code>{esc(event.effect_key)}</code>" if event.effect_key else ""
        return f"body started with digest {_short(event.digest)}{key}"
    if isinstance(event, CallExchanged):
        return _exchange(event)
    return f"<code>{esc(event_details(event, limit=200))}</code>"


def _exchange(event: Any) -> str:
    """A ``call.exchanged`` step: what the body asked, whom, and the answer (or why none)."""
    who = f" of <strong>{esc(event.peer)}</strong>" if event.peer else ""
    if event.redacted:
        return f"asked {esc(event.method)}{who} mid-call (redacted: only digests recorded)"
    text = f"asked {esc(event.method)}{who} mid-call: <code>{esc(json_line(event.request))}</code>"
    if event.error:
        return f"{text}; no answer: {esc(event.error)}"
    return f"{text}; answered <code>{esc(json_line(event.response))}</code>"


def _call_html(record: CallRecord, asked: dict[str, Any], effects: dict[str, Any]) -> str:
    from ..ledger import OUTCOME_TAGS

    anchor = "call-" + quote(record.call_id, safe="")
    outcome = record.outcome or "no outcome yet"
    kind = "ok" if record.outcome in ("call.succeeded", "call.cached", "call.replayed") else ""
    effect = record.effect.key if record.effect is not None else None
    if effect is None:  # not claimed (yet): the key the call was asked or started with
        effect = next((k for e in record.events if (k := getattr(e, "effect_key", "")) and k), None)
    summary = f'<span class="outcome {kind}">{esc(outcome)}</span>'
    if effect is not None:
        summary += f" · effect {effect_html(effect, effects)}"
    if record.ran_digest and record.ran_digest != record.digest:
        summary += f" · ran digest {_short(record.ran_digest)} (edited)"
    steps = []
    for event in record.events:
        cls = "outcome" if event.type in OUTCOME_TAGS else ""
        steps.append(
            f'<li class="{cls}" data-type="{esc(event.type)}" data-seq="{event.seq}">'
            f'<span class="seq">{event.seq}</span> <span class="when">'
            f"{esc(utc_clock(event.ts))}</span> <strong>{esc(event.type)}</strong> "
            f"{_step(event, asked)}</li>"
        )
    return (
        f'<article class="call" id="{esc(anchor)}" data-call="{esc(record.call_id)}">'
        f"<h3>call <code>{esc(record.call_id)}</code> · {esc(record.tool or '-')}</h3>"
        f'<p class="summary">{summary}</p><ol class="timeline">{"".join(steps)}</ol></article>'
    )


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def run_page(
    run_id: str, events: Iterable[Event], effects: dict[str, Any], *, label: str, more: bool
) -> str:
    """The read-only page of one run: each call's timeline, in ledger order."""
    from ..ledger import ApprovalDeferred, Verification, replay

    events = list(events)
    # The chain is the ledger's to verify (`ledger verify`), not this view's: one run's
    # events are not a chain of their own.
    audit = replay(events, Verification(ok=False, checked=0, reason="not checked here"))
    asked = {e.request_id: e.args for e in events if isinstance(e, ApprovalDeferred)}
    calls = "".join(_call_html(r, asked, effects) for r in audit.calls.values())
    if not calls:
        calls = '<p class="empty">no events of this run in the ledger</p>'
    cut = (
        f'<p class="notice error">only the first {MAX_RUN_EVENTS} events of this run are '
        f"shown; <code>agent-adapter ledger show --run {esc(run_id)}</code> prints them all</p>"
        if more
        else ""
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Run {esc(run_id)} · agent-adapter</title>"
        '<link rel="stylesheet" href="/inbox.css"></head><body class="run-view">'
        f'<header><h1>Run <code>{esc(run_id)}</code></h1><p class="ledger">ledger '
        f'<code>{esc(label)}</code> · <a href="/">back to the inbox</a></p></header>'
        f'<p class="read-only">read-only: {_count(len(audit.calls), "call")}, '
        f"{_count(len(events), 'event')}, in "
        "ledger order (the chain is checked by <code>agent-adapter ledger verify</code>)</p>"
        f'{cut}<main id="run">{calls}</main></body></html>'
    )
