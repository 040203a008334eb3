"""What the inbox shows a reviewer beside a request, and its read-only view of a run.

The description, the effect key and its status now, the schema's field descriptions and
an edit's changes all come from the ledger (the server has no registry); a request an
older version recorded (the golden ledger's) says "not recorded" for what it lacks. The
run view is the timeline of one run's calls, linked from each request, every value
escaped.
"""

from __future__ import annotations

import html
import json
import os
import re
import time
import urllib.parse
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the inbox needs the web extra")
pytest.importorskip("uvicorn", reason="the inbox needs the web extra")

from _inbox import REFUND, events, pending_request, registry, serving, token_file
from test_inbox_http import csrf_of, request

from agent_adapter import CallbackApproval, Executor
from agent_adapter.cli._inbox_views import arg_changes, changes_text, effect_html, status_now
from agent_adapter.engine import Projection, host_identity
from agent_adapter.ledger import EffectClaimed, SQLiteLedger, decode_event

GOLDEN_V1 = Path(__file__).parent.parent / "ledger" / "golden" / "engine_v1.jsonl"


def golden_events(last_seq: int) -> list[tuple[str, bytes]]:
    """The golden ledger's (hash, payload) up to ``last_seq``, as the older engine wrote them."""
    rows = [json.loads(line) for line in GOLDEN_V1.read_text(encoding="utf-8").splitlines()]
    return [(r["hash"], r["payload"].encode()) for r in rows if r["seq"] <= last_seq]


def article(page: str, request_id: str) -> str:
    """The HTML of one request's article on the page."""
    found = re.search(rf'<article class="request" id="req-{request_id}".*?</article>', page, re.S)
    assert found is not None, f"request {request_id} is on the page"
    return found.group(0)


def field_row(block: str, name: str) -> list[str]:
    """The text of each cell of a field's row (tags dropped, entities decoded)."""
    found = re.search(rf'<tr data-field="{name}">(.*?)</tr>', block, re.S)
    assert found is not None, f"a row for {name}"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", found.group(1), re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in cells]


async def refund_once(db: Path, *, run_id: str, call_id: str) -> None:
    """The refund approved by a callback and run: its effect key is then committed."""
    ledger = SQLiteLedger(str(db))
    port = CallbackApproval(lambda request: True, reviewer="ops")
    async with await Executor.open(registry(), ledger=ledger, approval=port) as executor:
        await executor.call("refund", REFUND, run_id=run_id, call_id=call_id)


async def test_a_request_shows_what_the_tool_does_its_fields_and_its_effect_now(
    tmp_path: Path,
) -> None:
    """A request shows the tool's description, each field's type and description from
    the recorded schema beside its value, and the effect key's status now: free for a
    fresh order, committed (naming the call, linked to its run) once another call ran it."""
    db = tmp_path / "ledger.db"
    fresh = await pending_request(db, run_id="run-1", call_id="call-1")
    await refund_once(db, run_id="run-0", call_id="call-0")
    again = await pending_request(db, run_id="run-2", call_id="call-2")
    tokens, token = token_file(tmp_path)
    auth = {"Authorization": "Bearer " + token}
    with serving(db, tokens) as url:
        status, _, page = request(url, "GET", "/", headers=auth)
    assert status == 200
    first, second = article(page, fresh), article(page, again)
    assert (
        '<p class="description">Refund an order (integer cents); the card never reaches the '
        in (first)
    )
    assert [field_row(first, n) for n in ("order_id", "amount_cents", "card")] == [
        ["order_id", '"A1001"', "string, required", "the order to refund"],
        ["amount_cents", "4250", "integer, required", "how much, in cents"],
        ["card", '"[redacted]"', 'string, default ""', "none in the schema"],
    ]
    # The key was free when run-1 asked; it is committed now, and both say so.
    now = '<code>refund:A1001</code> <span class="effect-status" data-status="committed">'
    assert (now in first, now in second) == (True, True)
    assert 'by <a href="/run?id=run-0#call-call-0">call <code>call-0</code></a>' in second
    assert "refund:A1001 is already committed by call call-0 (run run-0)" in second
    assert '<a class="run-link" href="/run?id=run-2#call-call-2">timeline</a>' in second


async def test_a_request_an_older_version_recorded_says_what_is_not_recorded(
    tmp_path: Path,
) -> None:
    """The golden ledger engine_v1 (an older engine: no description, no schema, no effect
    key with its request), cut after its deferred request and put in an SQLite file with
    the same hashes: the inbox shows the request, and says "not recorded" for each part
    the ledger does not hold; the file still verifies."""
    records = golden_events(30)
    asked = decode_event(records[-1][1])
    assert asked.type == "approval.pending"
    db = tmp_path / "golden.db"
    async with SQLiteLedger(db) as ledger:
        appended = await ledger.append_many([decode_event(payload) for _, payload in records])
        verified = await ledger.verify()
    assert [e.hash for e in appended] == [h for h, _ in records]
    request_id = asked.request_id
    tokens, token = token_file(tmp_path)
    with serving(db, tokens) as url:
        status, _, page = request(url, "GET", "/", headers={"Authorization": "Bearer " + token})
    block = article(page, request_id)
    assert (status, verified.ok) == (200, True)
    assert "what the tool does: not recorded with this request" in block
    assert '<span class="effect none">no effect key recorded with this request</span>' in block
    assert "the tool's schema: not recorded with this request" in block
    assert field_row(block, "amount_cents") == [
        "amount_cents",
        "900",
        "not recorded",
        "not recorded",
    ]


async def test_an_edit_is_confirmed_with_what_it_changes_and_the_decision_lists_it(
    tmp_path: Path,
) -> None:
    """The confirmation of an edit lists what changed (amount 4250 -> 2000) and nothing
    else; once recorded, the decided table says the same on one line."""
    db = tmp_path / "ledger.db"
    request_id = await pending_request(db)
    tokens, token = token_file(tmp_path)
    auth = {"Authorization": "Bearer " + token}
    edit = '{"order_id": "A1001", "amount_cents": 2000, "card": "[redacted]"}'
    with serving(db, tokens) as url:
        csrf = csrf_of(request(url, "GET", "/", headers=auth)[2])
        form = {"csrf": csrf, "action": "approve", "reviewer": "bob", "args": edit}
        path = f"/requests/{request_id}"
        shown = request(url, "POST", path, headers=auth, form=form)
        done = request(url, "POST", path, headers=auth, form={**form, "confirmed": "1"})
    diff = re.search(r'<table class="diff">.*?</table>', shown[2], re.S)
    assert (shown[0], done[0], diff is not None) == (200, 200, True)
    assert diff is not None
    rows = re.findall(r'<tr class="(\w+)" data-field="([^"]+)">', diff.group(0))
    assert rows == [("changed", "amount_cents")]
    assert "<code>4250</code></td><td><code>2000</code>" in diff.group(0)
    assert '<p class="changes">amount_cents: 4250 -&gt; 2000</p>' in done[2]
    assert [e.edits for e in await events(db) if e.type == "approval.answered"] == [
        {"order_id": "A1001", "amount_cents": 2000, "card": "[redacted]"}
    ]


def test_arg_changes_names_changed_added_and_removed_fields() -> None:
    """Changed, added and removed arguments are each named; equal values (same JSON) are
    not, and 1 and 1.0 differ as they do for the digest."""
    before = {"a": 1, "b": "x", "c": [1, 2], "d": 1}
    after = {"a": 1, "b": "y", "c": [1, 2], "d": 1.0, "e": None}
    assert changes_text(before, after) == 'b: "x" -> "y"; d: 1 -> 1.0; e: (not requested) -> null'
    assert changes_text(after, before) == ('b: "y" -> "x"; d: 1.0 -> 1; e: null -> (removed)')
    assert arg_changes(before, dict(before)) == []
    assert changes_text(before, dict(before)) == "the same arguments as requested"


def test_an_effect_key_in_flight_and_one_whose_holder_is_gone_are_told_apart() -> None:
    """A claim with no outcome is "in flight" while its holder's lease is live (here this
    very process holds it) and "ambiguous" once the lease ran out; no key is "free"."""
    live, dead = Projection(), Projection()
    claim = {"run_id": "r1", "call_id": "c1", "tool": "refund", "key": "refund:A1"}
    host, pid = host_identity(), os.getpid()
    live.apply(
        EffectClaimed(seq=1, **claim, holder="x", pid=pid, host=host, lease_until=time.time() + 60)
    )
    dead.apply(EffectClaimed(seq=1, **claim, holder="x", pid=pid, host=host, lease_until=1.0))
    shown = effect_html("refund:A1", live.effects)
    assert (status_now(live.effects["refund:A1"]), status_now(dead.effects["refund:A1"])) == (
        "in flight",
        "ambiguous",
    )
    assert status_now(None) == "free"
    assert '<span class="effect-status" data-status="in flight">in flight</span>' in shown
    assert 'href="/run?id=r1#call-c1"' in shown


async def test_the_run_view_is_each_calls_timeline_escaped(tmp_path: Path) -> None:
    """`/run?id=` lists a run's calls, each event in ledger order with who approved which
    digest, the effect key and the outcome. Markup in a run id or an argument is shown as
    text; a missing id is a 400, and the view is behind the token like every page."""
    db = tmp_path / "ledger.db"
    run_id = '<script>alert("run")</script>'
    hostile = {**REFUND, "order_id": '"><img src=x onerror=alert(1)>'}
    ledger = SQLiteLedger(str(db))
    port = CallbackApproval(lambda request: True, reviewer="<b>ops</b>")
    async with await Executor.open(registry(), ledger=ledger, approval=port) as executor:
        await executor.call("refund", hostile, run_id=run_id, call_id="c<1>")
    recorded = await events(db)
    tokens, token = token_file(tmp_path)
    auth = {"Authorization": "Bearer " + token}
    with serving(db, tokens) as url:
        path = "/run?id=" + urllib.parse.quote(run_id, safe="")
        status, headers, page = request(url, "GET", path, headers=auth)
        missing = request(url, "GET", "/run", headers=auth)
        anonymous = request(url, "GET", path)
    assert status == 200
    assert (missing[0], anonymous[0], run_id in anonymous[2]) == (400, 401, False)
    assert "script-src 'self'" in headers["content-security-policy"]
    for raw in ("<script>", "<img", "<b>ops</b>", "<1>"):
        assert raw not in page
    assert "&lt;script&gt;alert(&quot;run&quot;)&lt;/script&gt;" in page
    assert '<article class="call" id="call-c%3C1%3E" data-call="c&lt;1&gt;">' in page
    types = re.findall(r'<li class="[^"]*" data-type="([^"]+)" data-seq="(\d+)">', page)
    assert types == [(e.type, str(e.seq)) for e in recorded]
    (granted,) = [e for e in recorded if e.type == "approval.granted"]
    assert (
        f"approved</span> by <strong>&lt;b&gt;ops&lt;/b&gt;</strong> via port for digest "
        f'<code title="{granted.digest}">{granted.digest[:12]}</code>'
    ) in page
    key = "refund:&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert f"effect key <code>{key}</code> claimed" in page
    assert '<span class="effect-status" data-status="committed">committed</span>' in page
    assert '<span class="outcome ok">call.succeeded</span>' in page
