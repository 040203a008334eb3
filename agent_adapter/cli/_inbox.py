"""``agent-adapter approvals serve``: the approval inbox, one server-rendered web page.

The page lists the open deferred requests (tool and what it does, run, call, arguments as
recorded, with redactions and each field's description from the recorded schema, digest,
the effect key and its status now, age) and the ones decided recently (an edit with what
it changed); a reviewer approves, denies or edits. ``/run?id=RUN`` is a read-only
timeline of one run, linked from every request (``_inbox_views``). It decides nothing
itself: requests are read with ``DeferredApproval.pending()``,
edits are checked with ``PendingApproval.edit_problem`` (the tool's recorded JSON Schema)
and answers are recorded with ``DeferredApproval.answer``, as ``approvals approve`` does;
the effect notices are the ones ``approvals list`` prints.

Security: every request needs the bearer token (printed at start, or read from
``--token-file``): an ``Authorization: Bearer`` header, or the cookie that opening the
printed URL (``/?token=...``) sets; anything else is a bare 401. Every state-changing
request carries a CSRF token (a form field derived from the bearer token, which a page of
another origin cannot read) and, when the browser sends one, an ``Origin`` of this
server: otherwise 403 and nothing is recorded. The server binds loopback by default. Pages
are sent with a strict Content-Security-Policy (no inline script), ``no-store`` and no
framing; every value shown is HTML-escaped (arguments come from a model).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import ipaddress
import json
import secrets
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ..errors import ToolArgsInvalid, ToolUsageError
from ._inbox_views import (
    MAX_RUN_EVENTS,
    changes_html,
    changes_text,
    description_html,
    effect_html,
    fields_html,
    json_block,
    json_line,
    run_link,
    run_page,
    same_args,
    utc_clock,
)
from ._inbox_views import esc as _e
from ._opening import CliError, open_ledger
from ._review import _effect_now, _effects_now

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from ..engine import DeferredApproval, PendingApproval
    from ..ledger import ApprovalAnswered, Ledger

__all__ = ["Inbox", "cmd_approvals_serve", "inbox_app", "read_token"]

COOKIE = "agent_adapter_inbox"
#: How many decided requests the page shows (newest first).
RECENT = 20
#: How often the page asks whether anything changed (milliseconds).
POLL_MS = 1000

_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: with no-referrer a browser sends `Origin: null` on
    # the page's own form posts, which the Origin check below would refuse.
    "Referrer-Policy": "same-origin",
}


def read_token(token_file: str | None) -> str:
    """The bearer token: the file's text without its trailing newline, else a new one."""
    if token_file is None:
        return secrets.token_urlsafe(32)
    try:
        token = Path(token_file).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise CliError(f"token file {token_file}: no such file") from None
    except UnicodeDecodeError:
        raise CliError(f"token file {token_file} is not UTF-8 text") from None
    except OSError as exc:
        raise CliError(f"token file {token_file}: {exc.strerror or exc}") from None
    if len(token) < 16 or any(c.isspace() for c in token):
        raise CliError(
            f"token file {token_file}: the token must be one word of at least 16 characters"
        )
    return token


@dataclass
class _Form:
    """What the page shows in one request's form after a submission."""

    reviewer: str = ""
    reason: str = ""
    args_text: str | None = None
    errors: dict[str, str] = field(default_factory=dict)
    #: edited arguments that validated, shown for confirmation before they are sent
    confirm: dict[str, Any] | None = None


class Inbox:
    """The inbox's state: the ledger's deferred requests and their recent decisions.

    ``version`` is the seq of the last ledger event read: the page polls with it and is
    sent new HTML only when it changed.
    """

    def __init__(self, ledger: Ledger, token: str, *, label: str) -> None:
        from ..engine import DeferredApproval

        self.ledger = ledger
        self.deferred: DeferredApproval = DeferredApproval(ledger)
        self.label = label
        self._token = token.encode("utf-8")
        # A page of another origin cannot read this (it never sees the token), so a form
        # it submits cannot carry it.
        self.csrf = hmac.new(self._token, b"agent-adapter inbox csrf", sha256).hexdigest()
        self.version = 0
        self._decided: dict[str, ApprovalAnswered] = {}
        self._used: dict[str, tuple[str, str]] = {}
        # The arguments each request asked about, to show what an answer's edits changed.
        self._asked: dict[str, Any] = {}
        self._lock = asyncio.Lock()

    def authorized(self, offered: str | None) -> bool:
        """Whether ``offered`` is the bearer token (compared in constant time)."""
        return offered is not None and hmac.compare_digest(offered.encode("utf-8"), self._token)

    async def refresh(self) -> None:
        """Read the events since the last look: answers and their use, and the version."""
        from ..ledger import ApprovalAnswered, ApprovalConsumed, ApprovalDeferred

        async with self._lock:
            async for event in self.ledger.read(after=self.version):
                if isinstance(event, ApprovalDeferred):
                    self._asked.setdefault(event.request_id, event.args)
                elif isinstance(event, ApprovalAnswered):
                    # The first answer in ledger order is the decision (as the port reads it).
                    self._decided.setdefault(event.request_id, event)
                elif isinstance(event, ApprovalConsumed):
                    self._used.setdefault(event.request_id, (event.run_id, event.call_id))
                self.version = event.seq

    def asked(self, request_id: str) -> Any:
        """The arguments ``request_id`` asked about, as recorded (None: not read yet)."""
        return self._asked.get(request_id)

    def decided(self, request_id: str) -> ApprovalAnswered | None:
        """The recorded decision of ``request_id`` (as of the last refresh), or None."""
        return self._decided.get(request_id)

    async def pending(self) -> list[PendingApproval]:
        """The open requests, oldest first."""
        return await self.deferred.pending()

    def recent(self) -> list[tuple[ApprovalAnswered, tuple[str, str] | None]]:
        """The last decisions, newest first, each with the call that used it (or None)."""
        answers = sorted(self._decided.values(), key=lambda a: a.seq, reverse=True)[:RECENT]
        return [(a, self._used.get(a.request_id)) for a in answers]


# -- the decision ------------------------------------------------------------------------


def _edits_from_text(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The arguments a reviewer typed (a JSON object), or why they cannot be arguments."""
    from ..engine import MAX_ARGS_DEPTH, json_problem, nests_deeper

    # The same limits as `approvals approve --edit` (parse_edits): measured on the text
    # before parsing, and NaN or Infinity refused (the ledger would record them as null).
    if nests_deeper(text.encode("utf-8", "surrogatepass"), MAX_ARGS_DEPTH):
        return None, f"the arguments must not nest deeper than {MAX_ARGS_DEPTH} levels"
    try:
        value = json.loads(text)
    except ValueError as exc:
        return None, f"not valid JSON: {exc}"
    if not isinstance(value, dict):
        return None, "the arguments must be a JSON object ({...})"
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate's escape (\ud800) parses, but is not text: no page can show
        # it for confirmation and no ledger can store it.
        return (
            None,
            "the arguments hold a lone surrogate (a \\uD800-\\uDFFF escape without its "
            "pair), which is not text",
        )
    problem = json_problem(value, MAX_ARGS_DEPTH)
    if problem is not None:
        return None, f"the arguments must not {problem}"
    return value, None


def _taken(request_id: str, answer: ApprovalAnswered) -> str:
    verdict = "approved" if answer.approved else "denied"
    return (
        f"another reviewer got there first: request {request_id} was already {verdict} by "
        f"{answer.reviewer} at {utc_clock(answer.ts)}; nothing was recorded"
    )


async def decide(inbox: Inbox, request_id: str, data: dict[str, str]) -> tuple[int, str, _Form]:
    """Check one submitted form and record its decision: (HTTP status, notice, form).

    200 recorded (or edits shown for confirmation), 404 no such request, 409 already
    decided, 422 a field does not validate (shown next to it; nothing recorded).
    """
    action = data.get("action", "")
    form = _Form(
        reviewer=" ".join(data.get("reviewer", "").split()),
        reason=data.get("reason", "").strip(),
        args_text=data.get("args"),
    )
    await inbox.refresh()
    try:
        request = await inbox.deferred.get(request_id)
    except ToolUsageError:
        return 404, f"no approval request {request_id!r} in this ledger; nothing was recorded", form
    earlier = inbox.decided(request_id)
    if earlier is not None:
        return 409, _taken(request_id, earlier), form
    if action not in ("approve", "deny"):
        return 422, "choose approve or deny; nothing was recorded", form
    if not form.reviewer:
        form.errors["reviewer"] = "your name is recorded with the decision: enter it"
    elif len(form.reviewer) > 200:
        form.errors["reviewer"] = "a name of at most 200 characters"
    edits: dict[str, Any] | None = None
    shown = json_block(request.args)
    # The text as the page showed it approves the request as asked, whatever the
    # recorded arguments are (text withheld as too large is not a JSON object).
    if action == "approve" and form.args_text is not None and form.args_text.strip() != shown:
        typed, problem = _edits_from_text(form.args_text)
        if problem is not None:
            form.errors["args"] = problem
        elif not same_args(typed, request.args):
            edits = typed
            found = request.edit_problem(edits)
            if found is not None:
                form.errors["args"] = f"these arguments do not fit {request.tool}: {found}"
    if form.errors:
        return 422, "not recorded: correct the fields marked below", form
    if edits is not None and data.get("confirmed") != "1":
        # Shown before they are sent: the reviewer confirms exactly these arguments.
        form.confirm = edits
        return 200, "check the edited arguments below, then confirm the approval", form
    try:
        await inbox.deferred.answer(
            request_id,
            approved=action == "approve",
            reviewer=form.reviewer,
            reason=form.reason,
            edits=edits,
        )
    except ToolArgsInvalid as exc:
        form.errors["args"] = str(exc)
        return 422, "not recorded: correct the fields marked below", form
    except ToolUsageError as exc:
        await inbox.refresh()
        first = inbox.decided(request_id)
        if first is not None:  # another reviewer's answer landed between check and append
            return 409, _taken(request_id, first), form
        form.errors["args" if edits is not None else "reviewer"] = str(exc)
        return 422, "not recorded: correct the fields marked below", form
    await inbox.refresh()
    verb = "approved" if action == "approve" else "denied"
    text = f"{verb} request {request_id} ({request.tool}, run {request.run_id}) as {form.reviewer}"
    if edits is not None:
        text += f" with arguments {json_line(edits)}"
    return 200, text, _Form(reviewer=form.reviewer)


# -- rendering ---------------------------------------------------------------------------


def _age(ts: float, now: float) -> str:
    seconds = max(0, int(now - ts))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d"


def _field_error(forms: dict[str, _Form], request_id: str, name: str) -> str:
    form = forms.get(request_id)
    message = form.errors.get(name) if form else None
    if not message:
        return ""
    return f'<p class="field-error" data-field="{name}" role="alert">{_e(message)}</p>'


def _request_html(
    request: PendingApproval,
    effects: dict[str, Any],
    csrf: str,
    forms: dict[str, _Form],
    reviewer: str,
    now: float,
) -> str:
    rid = request.request_id
    form = forms.get(rid, _Form())
    name = form.reviewer or reviewer
    args_text = form.args_text if form.args_text is not None else json_block(request.args)
    notice = _effect_now(request, effects)[1]
    timeline = run_link(request.run_id, request.call_id)
    facts = (
        f'<dt>run</dt><dd><code>{_e(request.run_id)}</code> <a class="run-link" '
        f'href="{_e(timeline)}">timeline</a></dd>'
    )
    rows = [("call", request.call_id), ("request", rid), ("digest", request.digest)]
    facts += "".join(f"<dt>{_e(k)}</dt><dd><code>{_e(v)}</code></dd>" for k, v in rows)
    facts += f'<dt>effect</dt><dd class="effect">{effect_html(request.effect_key, effects)}</dd>'
    facts += (
        f'<dt>asked</dt><dd><span class="age" data-ts="{request.ts}">{_e(_age(request.ts, now))}'
        f"</span> ago ({_e(utc_clock(request.ts))})</dd>"
    )
    if request.redact:
        facts += f"<dt>redacted</dt><dd>{_e(', '.join(request.redact))}</dd>"
    warn = f'<p class="effect-notice">{_e(notice)}</p>' if notice else ""
    hidden = f'<input type="hidden" name="csrf" value="{_e(csrf)}">'
    confirm = ""
    if form.confirm is not None:
        confirm = (
            '<div class="confirm"><p>Approve with these edited arguments (they replace the '
            f'requested ones entirely):</p><pre class="edited">{_e(json_block(form.confirm))}'
            f"</pre><p>What the edit changes:</p>{changes_html(request.args, form.confirm)}"
            f'<form method="post" action="/requests/{_e(rid)}">{hidden}'
            f'<input type="hidden" name="reviewer" value="{_e(form.reviewer)}">'
            f'<input type="hidden" name="reason" value="{_e(form.reason)}">'
            f'<input type="hidden" name="args" value="{_e(json_line(form.confirm))}">'
            '<input type="hidden" name="confirmed" value="1">'
            '<button type="submit" name="action" value="approve" class="approve">'
            "Confirm approval with these arguments</button></form></div>"
        )
    return (
        f'<article class="request" id="req-{_e(rid)}" data-request="{_e(rid)}">'
        f"<h3>{_e(request.tool)}</h3>{description_html(request.description)}<dl>{facts}</dl>"
        f"{warn}{fields_html(request.json_schema, request.args)}"
        f'<form method="post" action="/requests/{_e(rid)}">{hidden}'
        f'<label>Reviewer <input name="reviewer" value="{_e(name)}" autocomplete="name"></label>'
        f"{_field_error(forms, rid, 'reviewer')}"
        f'<label>Reason <input name="reason" value="{_e(form.reason)}"></label>'
        "<label>Arguments (as recorded; edit them to approve other arguments)"
        f'<textarea name="args" rows="{min(20, args_text.count(chr(10)) + 2)}" '
        f'spellcheck="false">{_e(args_text)}</textarea></label>'
        f"{_field_error(forms, rid, 'args')}"
        '<div class="buttons"><button type="submit" name="action" value="approve" '
        'class="approve">Approve</button><button type="submit" name="action" value="deny" '
        'class="deny">Deny</button></div></form>'
        f"{confirm}</article>"
    )


def _decided_html(inbox: Inbox) -> str:
    recent = inbox.recent()
    if not recent:
        return '<p class="empty">no decisions yet</p>'
    rows = []
    for answer, used in recent:
        verdict = "approved" if answer.approved else "denied"
        edited = changes = ""
        if answer.edits is not None:
            edited = json_line(answer.edits)
            asked = inbox.asked(answer.request_id)
            changes = f'<p class="changes">{_e(changes_text(asked, answer.edits))}</p>'
        usage = f"call {used[1]}" if used else "not used yet"
        rows.append(
            # (The request id shortened, whole in its title: the table stays readable.)
            f'<tr data-request="{_e(answer.request_id)}"><td><code title="'
            f'{_e(answer.request_id)}">{_e(answer.request_id[:12])}</code></td>'
            f'<td>{_e(answer.tool)}</td><td><a class="run-link" href="'
            f'{_e(run_link(answer.run_id, answer.call_id))}"><code>{_e(answer.run_id)}</code>'
            f'</a></td><td class="{verdict}">{verdict}</td><td>{_e(answer.reviewer)}</td>'
            f'<td>{_e(answer.reason)}</td><td class="edits"><code>{_e(edited)}</code>{changes}'
            "</td>"
            f"<td>{_e(utc_clock(answer.ts))}</td><td>{_e(usage)}</td></tr>"
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("request", "tool", "run", "decision", "by", "reason", "edited to", "when", "used")
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


async def render_sections(
    inbox: Inbox, *, forms: dict[str, _Form] | None = None, reviewer: str = ""
) -> str:
    """The live part of the page: the pending requests and the recent decisions."""
    await inbox.refresh()
    pending = await inbox.pending()
    effects = await _effects_now(inbox.ledger) if pending else {}
    now = time.time()
    forms = forms or {}
    if pending:
        items = "".join(
            _request_html(p, effects, inbox.csrf, forms, reviewer, now) for p in pending
        )
    else:
        items = '<p class="empty">no pending requests</p>'
    return (
        f'<section id="pending" data-version="{inbox.version}"><h2>Pending '
        f'<span class="count">{len(pending)}</span></h2><div class="requests">{items}</div>'
        f'</section><section id="decided"><h2>Decided recently</h2>{_decided_html(inbox)}'
        "</section>"
    )


async def render_page(
    inbox: Inbox,
    *,
    notice: tuple[str, str] | None = None,
    forms: dict[str, _Form] | None = None,
    reviewer: str = "",
) -> str:
    """The whole page: header, an optional notice (kind, text), the live sections."""
    sections = await render_sections(inbox, forms=forms, reviewer=reviewer)
    banner = ""
    if notice is not None:
        kind, text = notice
        banner = f'<p id="notice" class="notice {kind}" role="status">{_e(text)}</p>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>Approval inbox · agent-adapter</title>"
        '<link rel="stylesheet" href="/inbox.css"><script src="/inbox.js" defer></script>'
        f'</head><body data-poll-ms="{POLL_MS}"><header><h1>Approval inbox</h1>'
        f'<p class="ledger">ledger <code>{_e(inbox.label)}</code></p></header>'
        f'{banner}<main id="live">{sections}</main></body></html>'
    )


async def render_run(inbox: Inbox, run_id: str) -> str:
    """The read-only page of one run: each call's timeline (``run_page``)."""
    events: list[Any] = []
    more = False
    found = inbox.ledger.read(run_id=run_id)
    try:
        async for event in found:
            if len(events) == MAX_RUN_EVENTS:
                more = True
                break
            events.append(event)
    finally:
        close = getattr(found, "aclose", None)
        if close is not None:
            await close()
    # Every key's state now (another run may hold this run's key).
    effects = await _effects_now(inbox.ledger) if events else {}
    return run_page(run_id, events, effects, label=inbox.label, more=more)


_CSS = """
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:60rem;padding:1rem 1.5rem;
color:#1d2330;background:#f6f7f9}
header{display:flex;align-items:baseline;gap:1rem;border-bottom:1px solid #d5d9e0}
h1{font-size:1.4rem;margin:.4rem 0}h2{font-size:1.1rem;margin:1.2rem 0 .5rem}
h3{margin:0 0 .4rem;font-size:1.05rem}.ledger{color:#5b6475;margin:0}
.count{background:#1d2330;color:#fff;border-radius:1rem;padding:0 .55rem;font-size:.85rem}
.request{background:#fff;border:1px solid #d5d9e0;border-radius:.5rem;padding:.9rem 1rem;
margin:.7rem 0}
dl{display:grid;grid-template-columns:6rem 1fr;gap:.1rem .8rem;margin:0 0 .6rem}
dt{color:#5b6475}dd{margin:0;overflow-wrap:anywhere}
label{display:block;margin:.35rem 0;color:#5b6475}
input,textarea{display:block;width:100%;box-sizing:border-box;font:inherit;color:#1d2330;
padding:.3rem .45rem;border:1px solid #b8bfcc;border-radius:.3rem}
textarea{font-family:ui-monospace,monospace;font-size:.9rem}
.buttons{display:flex;gap:.6rem;margin-top:.6rem}
button{font:inherit;padding:.35rem 1rem;border-radius:.3rem;border:1px solid #b8bfcc;
cursor:pointer;background:#fff}
button.approve{background:#1f7a44;color:#fff;border-color:#1f7a44}
button.deny{background:#fff;color:#a4262c;border-color:#a4262c}
.field-error{color:#a4262c;margin:.2rem 0;font-weight:600}
.effect-notice{background:#fff6dc;border-left:3px solid #d9a300;padding:.3rem .6rem}
.notice{padding:.5rem .8rem;border-radius:.3rem}.notice.ok{background:#e3f4e8}
.notice.error{background:#fbe3e4}
.confirm{margin-top:.8rem;border-top:1px dashed #b8bfcc;padding-top:.6rem}
pre{background:#f0f2f5;padding:.5rem;border-radius:.3rem;overflow:auto}
table{border-collapse:collapse;width:100%;background:#fff;font-size:.9rem}
th,td{border:1px solid #d5d9e0;padding:.3rem .45rem;text-align:left;vertical-align:top}
td code{white-space:nowrap}td.edits code{white-space:normal;overflow-wrap:anywhere}
td.approved{color:#1f7a44;font-weight:600}td.denied{color:#a4262c;font-weight:600}
.empty{color:#5b6475}
.description{margin:0 0 .5rem;white-space:pre-wrap}.missing{color:#8a6d00}
p.description.missing{font-style:italic}
.effect-status{font-weight:600}.effect-status[data-status=free]{color:#1f7a44}
.effect-status[data-status=committed],.effect-status[data-status=ambiguous]{color:#a4262c}
.effect-status[data-status="in flight"]{color:#8a6d00}
table.fields,table.diff{margin:.3rem 0 .6rem}td.value code{white-space:normal;
overflow-wrap:anywhere}table.diff tr.changed td:last-child,table.diff tr.added td:last-child
{background:#e3f4e8}table.diff tr.removed td:last-child{background:#fbe3e4}
.changes{margin:.2rem 0 0;color:#5b6475;font-size:.85rem}
.run-link{font-size:.85rem;margin-left:.3rem}
.call{background:#fff;border:1px solid #d5d9e0;border-radius:.5rem;padding:.7rem 1rem;
margin:.7rem 0}.call:target{border-color:#1d2330;box-shadow:0 0 0 2px #b8bfcc}
ol.timeline{list-style:none;padding:0;margin:.3rem 0 0}ol.timeline li{padding:.2rem 0;
border-top:1px solid #eef0f3;overflow-wrap:anywhere}ol.timeline li.outcome{font-weight:600}
.seq,.when{color:#5b6475;font-size:.85rem}.outcome.ok{color:#1f7a44}
span.approved{color:#1f7a44;font-weight:600}span.denied{color:#a4262c;font-weight:600}
.read-only{color:#5b6475}
"""

# New requests appear without a reload: the page asks for the live sections when the
# ledger moved. A request already on the page is left as it is (a reviewer may be typing
# in it); one no longer pending is removed; the decided table is replaced.
_JS = """
"use strict";
(function () {
  const poll = Number(document.body.dataset.pollMs) || 1000;
  function ages() {
    const now = Date.now() / 1000;
    for (const el of document.querySelectorAll(".age[data-ts]")) {
      const s = Math.max(0, Math.floor(now - Number(el.dataset.ts)));
      el.textContent = s < 60 ? s + " s" : s < 3600 ? Math.floor(s / 60) + " min"
        : Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    }
  }
  async function refresh() {
    const pending = document.getElementById("pending");
    const version = pending ? pending.dataset.version : "0";
    let response;
    try {
      response = await fetch("/sections?since=" + encodeURIComponent(version),
        {credentials: "same-origin", cache: "no-store"});
    } catch (e) { return; }
    if (response.status !== 200) return;
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = doc.getElementById("pending");
    if (!fresh || !pending) return;
    const list = pending.querySelector(".requests");
    const incoming = fresh.querySelectorAll("article.request");
    const keep = new Set();
    for (const article of incoming) {
      keep.add(article.id);
      if (!document.getElementById(article.id)) {
        const empty = list.querySelector(".empty");
        if (empty) empty.remove();
        list.appendChild(document.importNode(article, true));
      }
    }
    for (const article of list.querySelectorAll("article.request")) {
      if (!keep.has(article.id)) article.remove();
    }
    if (!list.querySelector("article.request")) {
      list.replaceChildren(document.importNode(fresh.querySelector(".requests"), true)
        .firstChild || document.createTextNode(""));
    }
    pending.querySelector(".count").textContent = String(incoming.length);
    pending.dataset.version = fresh.dataset.version;
    const decided = doc.getElementById("decided");
    if (decided) document.getElementById("decided").replaceWith(document.importNode(decided, true));
  }
  setInterval(ages, 1000);
  setInterval(refresh, poll);
})();
"""


# -- the web application ---------------------------------------------------------------


def _reviewer_cookie(request: Request) -> str:
    return unquote(request.cookies.get("reviewer", ""))[:200]


def served_hosts(host: str, port: int, asked: str | None = None) -> frozenset[str] | None:
    """The ``Host`` headers that name the server bound at ``host``:``port``.

    None (every Host) for a wildcard address, which any of the machine's names reaches;
    the bearer token still guards it. A loopback server answers only to loopback names:
    a page of another site whose name resolves to 127.0.0.1 (DNS rebinding) sends its
    own name and is refused.
    """
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None and address.is_unspecified:
        return None
    names = {f"[{host}]" if ":" in host else host}
    if asked:
        names.add(f"[{asked}]" if ":" in asked else asked)
    if _loopback(host):
        names |= {"127.0.0.1", "localhost", "[::1]"}
    return frozenset(f"{name.lower()}:{port}" for name in names)


def inbox_app(inbox: Inbox, *, hosts: frozenset[str] | None = None) -> Any:
    """The Starlette application of the inbox (every route behind the bearer token).

    ``hosts``: the ``Host`` headers that name this server (``served_hosts``); any other
    is a 421 before anything else is read (None: every Host).
    """
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect
    from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse
    from starlette.routing import Route

    def refused(status: int, text: str) -> Response:
        # Nothing of the inbox in a refusal: no page, no request, no count.
        return PlainTextResponse(text + "\n", status_code=status, headers=_HEADERS)

    def offered(request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value:
            return value.strip()
        return request.cookies.get(COOKIE)

    def guarded(
        handler: Callable[[Request], Any],
    ) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            if hosts is not None and request.headers.get("host", "").lower() not in hosts:
                # The Origin check below compares with Host: a forged Host would pass it.
                return refused(421, "421 misdirected request: this server has another name")
            if request.method == "GET" and "token" in request.query_params:
                if not inbox.authorized(request.query_params["token"]):
                    return refused(401, "401 unauthorized: wrong token")
                # The token leaves the address bar (and the history) at once; the cookie
                # carries it from here, to this server only.
                response = RedirectResponse(request.url.path, status_code=303, headers=_HEADERS)
                response.set_cookie(
                    COOKIE, request.query_params["token"], httponly=True, samesite="strict"
                )
                return response
            if not inbox.authorized(offered(request)):
                return refused(
                    401,
                    "401 unauthorized: open the URL that `agent-adapter approvals serve` "
                    "printed, or send Authorization: Bearer <token>",
                )
            result: Response = await handler(request)
            return result

        return endpoint

    def page(body: str, status: int = 200, reviewer: str | None = None) -> Response:
        response = HTMLResponse(body, status_code=status, headers=_HEADERS)
        if reviewer:
            # Remembered for the next form (this browser only); never a credential.
            # (Percent-encoded: a cookie value cannot hold every character of a name.)
            response.set_cookie(
                "reviewer", quote(reviewer, safe=""), httponly=True, samesite="strict"
            )
        return response

    async def index(request: Request) -> Response:
        return page(await render_page(inbox, reviewer=_reviewer_cookie(request)))

    async def sections(request: Request) -> Response:
        await inbox.refresh()
        if request.query_params.get("since") == str(inbox.version):
            return PlainTextResponse("", status_code=204, headers=_HEADERS)
        reviewer = _reviewer_cookie(request)
        return page(await render_sections(inbox, reviewer=reviewer))

    async def answer(request: Request) -> Response:
        origin = request.headers.get("origin")
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        try:
            async with request.form(max_files=0, max_fields=20, max_part_size=1_048_576) as form:
                data = {k: v for k, v in form.items() if isinstance(v, str)}
        except ClientDisconnect:
            # The reviewer's browser left mid-form: nothing to decide, nobody to answer.
            return refused(400, "400 bad request: the form did not arrive; nothing was recorded")
        csrf = data.get("csrf", "")
        if (origin is not None and origin != own) or not hmac.compare_digest(
            csrf.encode("utf-8"), inbox.csrf.encode("utf-8")
        ):
            return refused(
                403,
                "403 forbidden: missing or wrong CSRF token (reload the page); "
                "nothing was recorded",
            )
        request_id = request.path_params["request_id"]
        status, text, filled = await decide(inbox, request_id, data)
        kind = "ok" if status == 200 else "error"
        forms = {request_id: filled}
        body = await render_page(inbox, notice=(kind, text), forms=forms, reviewer=filled.reviewer)
        return page(body, status, reviewer=filled.reviewer if status == 200 else None)

    async def run_view(request: Request) -> Response:
        run_id = request.query_params.get("id")
        if not run_id:
            return refused(400, "400 bad request: name the run: /run?id=RUN_ID")
        return page(await render_run(inbox, run_id))

    async def css(request: Request) -> Response:
        return PlainTextResponse(_CSS, media_type="text/css", headers=_HEADERS)

    async def js(request: Request) -> Response:
        return PlainTextResponse(_JS, media_type="text/javascript", headers=_HEADERS)

    async def icon(request: Request) -> Response:
        return PlainTextResponse("", status_code=204, headers=_HEADERS)

    routes = [
        Route("/", guarded(index), methods=["GET"]),
        Route("/sections", guarded(sections), methods=["GET"]),
        Route("/requests/{request_id}", guarded(answer), methods=["POST"]),
        Route("/run", guarded(run_view), methods=["GET"]),
        Route("/inbox.css", guarded(css), methods=["GET"]),
        Route("/inbox.js", guarded(js), methods=["GET"]),
        # Browsers ask for it unprompted: an empty answer, not a 404 in the console.
        Route("/favicon.ico", guarded(icon), methods=["GET"]),
    ]
    return Starlette(routes=routes)


# -- the command ---------------------------------------------------------------------------


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _label(db: str) -> str:
    """How the page names the ledger: a file as given, a URL without its password or
    query (either may hold a credential)."""
    parts = urlsplit(db)
    if not parts.scheme or not parts.netloc:
        return db
    host = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit((parts.scheme, user + host, parts.path, "", ""))


def _listen(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CliError(f"--host {host}: {exc.strerror or exc}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


@contextlib.contextmanager
def _stop_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop)
            handled.append(sig)
    try:
        yield
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)


async def cmd_approvals_serve(args: argparse.Namespace, out: IO[str]) -> int:
    """Serve the approval inbox on ``--host``:``--port`` until interrupted."""
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise CliError(
            f"approvals serve needs the web extra ({exc}); install it with: "
            "pip install 'agent-adapter[web]'"
        ) from None
    token = read_token(args.token_file)
    async with open_ledger(args, write=True) as ledger:
        inbox = Inbox(ledger, token, label=_label(str(args.db)))
        await inbox.refresh()  # a ledger that cannot be read fails here, before listening
        sock = _listen(args.host, args.port)
        try:
            host, port = sock.getsockname()[:2]
            hosts = served_hosts(str(host), int(port), args.host)
            shown = f"[{host}]" if ":" in host else host
            url = f"http://{shown}:{port}/"

            class _Server(uvicorn.Server):
                @contextlib.contextmanager
                def capture_signals(self) -> Iterator[None]:
                    # Our own handlers (below): a stop is a clean exit, not a re-raised signal.
                    yield

            config = uvicorn.Config(
                inbox_app(inbox, hosts=hosts), log_level="warning", access_log=False, lifespan="off"
            )
            server = _Server(config)

            def stop() -> None:
                server.should_exit = True

            # Handlers first, then the lines that say the server is up: a Ctrl-C that comes
            # right after them is a clean stop, never a KeyboardInterrupt.
            with _stop_on_signals(stop):
                print(f"approval inbox of {args.db} at {url}", file=out)
                if args.token_file:
                    print(f"open {url}?token=<the token in {args.token_file}>", file=out)
                else:
                    print(f"open {url}?token={token}", file=out)
                    print(f"(or send Authorization: Bearer {token}); Ctrl-C stops", file=out)
                if not _loopback(str(host)):
                    print(
                        f"warning: {host} is not a loopback address: anyone who can reach this "
                        "port and has the token can decide",
                        file=out,
                    )
                out.flush()
                await server.serve(sockets=[sock])
        finally:
            sock.close()
    print("stopped", file=out)
    return 0
