"""The approval inbox driven in a real headless browser (Debian's chromium, Playwright).

A running agent waits on a DeferredApproval; the reviewer opens the printed URL, sees the
request appear without a reload, and approves, edits or denies it; the agent's call then
runs once with exactly what was approved (or never runs). Nothing is installed at run
time: without chromium or Playwright the tests skip with the reason, and with
``AGENT_ADAPTER_REQUIRE_BROWSER=1`` (set by ``.ci/run``) that skip is a failure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the inbox needs the web extra")

from _inbox import REFUND, SECRET, events, registry, serving, token_file

from agent_adapter import DeferredApproval, Executor
from agent_adapter.errors import ApprovalDenied, ApprovalPending
from agent_adapter.ledger import SQLiteLedger

# Flags for a browser that talks to nothing but the page under test.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: How long a step in the page may take (ms): generous, for a loaded machine.
STEP_MS = 60_000
AGENT_TIMEOUT_S = 120.0


def _chromium() -> str:
    """The browser's path, or skip (a failure under AGENT_ADAPTER_REQUIRE_BROWSER=1)."""
    reason = None
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        reason = "Playwright for Python is not installed (it is a dev dependency)"
    found = next(
        (
            p
            for p in ("/usr/bin/chromium", shutil.which("chromium") or "")
            if p and Path(p).is_file()
        ),
        None,
    )
    if reason is None and found is None:
        reason = "no browser: /usr/bin/chromium is missing (apt-get install chromium)"
    if reason is not None:
        if os.environ.get("AGENT_ADAPTER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{reason}; AGENT_ADAPTER_REQUIRE_BROWSER=1 makes this a failure")
        pytest.skip(reason)
    assert found is not None
    return found


@pytest.fixture
async def page(tmp_path: Path) -> AsyncIterator[Any]:
    """A fresh page of headless chromium, with its own empty profile directory."""
    executable = _chromium()
    from playwright.async_api import async_playwright

    profile = tmp_path / "profile"
    profile.mkdir()
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=executable,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1000, "height": 900},
        )
        context.set_default_timeout(STEP_MS)
        try:
            yield context.pages[0] if context.pages else await context.new_page()
        finally:
            await context.close()


class Agent:
    """An agent that asks for the refund, waits on the DeferredApproval and asks again."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.executed: list[dict[str, Any]] = []
        self.asked = asyncio.Event()
        self.request_id = ""

    async def run(self) -> tuple[str, str]:
        ledger = SQLiteLedger(str(self.db))
        deferred = DeferredApproval(ledger)
        async with await Executor.open(
            registry(self.executed), ledger=ledger, approval=deferred
        ) as executor:
            try:
                await executor.call("refund", REFUND, run_id="run-1", call_id="call-1")
            except ApprovalPending as exc:
                self.request_id = exc.request_id
            else:
                raise AssertionError("the refund ran before anyone approved it")
            self.asked.set()
            await deferred.wait(self.request_id, timeout=AGENT_TIMEOUT_S, poll_s=0.05)
            try:
                value = await executor.call("refund", REFUND, run_id="run-1", call_id="call-2")
            except ApprovalDenied as exc:
                return "denied", str(exc)
            return "ran", str(value)


async def empty_ledger(db: Path) -> None:
    ledger = SQLiteLedger(str(db))
    await ledger.open()
    await ledger.close()


async def open_inbox(page: Any, url: str, token: str) -> None:
    """Open the URL the command printed (with the token), as a reviewer would."""
    await page.goto(f"{url}?token={token}")
    assert page.url == url  # the token left the address bar
    await page.wait_for_selector("h1:text('Approval inbox')")


async def screenshot(page: Any, path: Path) -> None:
    """Saved as the test's artifact (tmp_path); copied where the environment asks."""
    await page.screenshot(path=str(path), full_page=True)
    _keep(path)


def _keep(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    target = os.environ.get("AGENT_ADAPTER_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)


async def submit(page: Any, button: str) -> None:
    """Click a form's button and wait for the page the server answers with."""
    async with page.expect_navigation():
        await page.click(button)


def timeline(recorded: list[Any], call_id: str) -> list[str]:
    return [e.type for e in recorded if e.call_id == call_id]


async def test_a_reviewer_approves_in_the_browser_and_the_call_runs_once(
    tmp_path: Path, page: Any
) -> None:
    """The request appears on an open page without a reload; the reviewer approves it as
    alice; the agent's call runs once, with the requested arguments (the redacted card
    as the agent gave it), and the ledger says who approved what."""
    db = tmp_path / "ledger.db"
    await empty_ledger(db)
    tokens, token = token_file(tmp_path)
    agent = Agent(db)
    with serving(db, tokens) as url:
        await open_inbox(page, url, token)
        assert await page.inner_text("#pending .empty") == "no pending requests"
        task = asyncio.ensure_future(agent.run())
        try:
            await asyncio.wait_for(agent.asked.wait(), AGENT_TIMEOUT_S)
            article = f"#req-{agent.request_id}"
            await page.wait_for_selector(article)  # polled in by the page itself
            assert await page.inner_text("#pending .count") == "1"
            shown = await page.inner_text(article)
            assert ("refund" in shown, "run-1" in shown, "card" in shown) == (True, True, True)
            assert await page.input_value(f"{article} textarea[name=args]") == (
                '{\n  "order_id": "A1001",\n  "amount_cents": 4250,\n  "card": "[redacted]"\n}'
            )
            assert SECRET not in await page.content()
            await screenshot(page, tmp_path / "inbox-pending.png")
            await page.fill(f"{article} input[name=reviewer]", "alice")
            await page.fill(f"{article} input[name=reason]", "customer called")
            await submit(page, f"{article} button[value=approve]")
            notice = await page.inner_text("#notice")
            outcome = await asyncio.wait_for(task, AGENT_TIMEOUT_S)
        finally:
            if not task.done():
                task.cancel()
        await screenshot(page, tmp_path / "inbox-approved.png")
        decided = await page.inner_text("#decided tbody")
    assert notice == f"approved request {agent.request_id} (refund, run run-1) as alice"
    assert outcome == ("ran", "refunded 4250 cents on A1001")
    assert agent.executed == [REFUND]
    assert "alice" in decided
    recorded = await events(db)
    (answer,) = [e for e in recorded if e.type == "approval.answered"]
    assert (answer.request_id, answer.approved, answer.reviewer, answer.reason, answer.edits) == (
        agent.request_id,
        True,
        "alice",
        "customer called",
        None,
    )
    assert timeline(recorded, "call-1") == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "approval.pending",
        "call.pending",
        "approval.answered",  # (recorded under the call that asked)
    ]
    assert timeline(recorded, "call-2") == [
        "call.requested",
        "call.validated",
        "approval.requested",
        "approval.consumed",
        "approval.granted",
        "effect.claimed",
        "call.started",
        "call.succeeded",
    ]


async def test_an_edit_is_validated_shown_then_run_exactly(tmp_path: Path, page: Any) -> None:
    """An edit that does not fit the tool is shown next to the field and records nothing;
    a valid edit is shown for confirmation, then recorded; the call runs once with the
    edited amount (and the redacted card the agent gave)."""
    db = tmp_path / "ledger.db"
    await empty_ledger(db)
    tokens, token = token_file(tmp_path)
    agent = Agent(db)
    task = asyncio.ensure_future(agent.run())
    try:
        await asyncio.wait_for(agent.asked.wait(), AGENT_TIMEOUT_S)
        with serving(db, tokens) as url:
            await open_inbox(page, url, token)
            article = f"#req-{agent.request_id}"
            await page.fill(f"{article} input[name=reviewer]", "bob")
            await page.fill(
                f"{article} textarea[name=args]",
                '{"order_id": "A1001", "amount_cents": "lots", "card": "[redacted]"}',
            )
            await submit(page, f"{article} button[value=approve]")
            error = await page.inner_text(f"{article} .field-error[data-field=args]")
            unrecorded = [e.type for e in await events(db) if e.type == "approval.answered"]
            await page.fill(
                f"{article} textarea[name=args]",
                '{"order_id": "A1001", "amount_cents": 2000, "card": "[redacted]"}',
            )
            await submit(page, f"{article} button[value=approve]")
            confirm = await page.inner_text(f"{article} .confirm pre.edited")
            still_unrecorded = [e.type for e in await events(db) if e.type == "approval.answered"]
            await screenshot(page, tmp_path / "inbox-confirm.png")
            await submit(page, f"{article} .confirm button[value=approve]")
            notice = await page.inner_text("#notice")
            outcome = await asyncio.wait_for(task, AGENT_TIMEOUT_S)
    finally:
        if not task.done():
            task.cancel()
    assert (
        error == "these arguments do not fit refund: amount_cents: 'lots' is not of type 'integer'"
    )
    assert (unrecorded, still_unrecorded) == ([], [])
    assert (
        confirm == '{\n  "order_id": "A1001",\n  "amount_cents": 2000,\n  "card": "[redacted]"\n}'
    )
    assert notice == (
        f"approved request {agent.request_id} (refund, run run-1) as bob with arguments "
        '{"order_id": "A1001", "amount_cents": 2000, "card": "[redacted]"}'
    )
    assert outcome == ("ran", "refunded 2000 cents on A1001")
    assert agent.executed == [{"order_id": "A1001", "amount_cents": 2000, "card": SECRET}]
    recorded = await events(db)
    (answer,) = [e for e in recorded if e.type == "approval.answered"]
    assert (answer.reviewer, answer.edits) == (
        "bob",
        {"order_id": "A1001", "amount_cents": 2000, "card": "[redacted]"},
    )
    (granted,) = [e for e in recorded if e.type == "approval.granted"]
    (started,) = [e for e in recorded if e.type == "call.started"]
    assert (granted.edited, granted.digest == started.digest) == (True, True)


async def test_a_denial_in_the_browser_never_runs_the_call(tmp_path: Path, page: Any) -> None:
    """The reviewer denies with a reason: the agent gets ApprovalDenied, the body never
    runs, and the decided table shows the denial."""
    db = tmp_path / "ledger.db"
    await empty_ledger(db)
    tokens, token = token_file(tmp_path)
    agent = Agent(db)
    task = asyncio.ensure_future(agent.run())
    try:
        await asyncio.wait_for(agent.asked.wait(), AGENT_TIMEOUT_S)
        with serving(db, tokens) as url:
            await open_inbox(page, url, token)
            article = f"#req-{agent.request_id}"
            await page.fill(f"{article} input[name=reviewer]", "carol")
            await page.fill(f"{article} input[name=reason]", "over the limit")
            await submit(page, f"{article} button[value=deny]")
            notice = await page.inner_text("#notice")
            row = await page.inner_text(f"#decided tr[data-request='{agent.request_id}']")
            outcome = await asyncio.wait_for(task, AGENT_TIMEOUT_S)
            await screenshot(page, tmp_path / "inbox-denied.png")
    finally:
        if not task.done():
            task.cancel()
    assert notice == f"denied request {agent.request_id} (refund, run run-1) as carol"
    assert ("denied" in row, "carol" in row, "over the limit" in row) == (True, True, True)
    assert outcome[0] == "denied"
    assert agent.executed == []
    recorded = await events(db)
    assert timeline(recorded, "call-2")[-1] == "call.denied"
    assert "call.started" not in [e.type for e in recorded]


async def test_the_run_view_opens_from_a_request_and_shows_markup_as_text(
    tmp_path: Path, page: Any
) -> None:
    """A request's "timeline" link opens the read-only view of its run at its call; after
    the reviewer approves and the agent asks again, the view shows both calls: who
    approved (in the browser), the digest, the effect key, the outcome. A run id and
    arguments holding markup are shown as text: no element of theirs is in the page and
    no script of theirs ran."""
    db = tmp_path / "ledger.db"
    run_id = "<img src=x onerror=\"document.title='owned'\">"
    hostile = {**REFUND, "order_id": "<script>document.title='owned'</script>"}
    executed: list[dict[str, Any]] = []
    ledger = SQLiteLedger(str(db))
    deferred = DeferredApproval(ledger)
    async with await Executor.open(registry(executed), ledger=ledger, approval=deferred) as ex:
        try:
            await ex.call("refund", hostile, run_id=run_id, call_id="call-1")
        except ApprovalPending as exc:
            request_id = exc.request_id
        tokens, token = token_file(tmp_path)
        with serving(db, tokens) as url:
            await open_inbox(page, url, token)
            article = f"#req-{request_id}"
            async with page.expect_navigation():
                await page.click(f"{article} a.run-link")
            first_view = (
                page.url.split("#", 1)[1],
                await page.inner_text("h1"),
                await page.eval_on_selector_all(
                    "#run article.call", "els => els.map(e => e.dataset.call)"
                ),
                await page.eval_on_selector_all("#run li", "els => els.map(e => e.dataset.type)"),
                await page.eval_on_selector("#run article.call:target", "e => e.dataset.call"),
            )
            await page.go_back()
            await page.fill(f"{article} input[name=reviewer]", "alice")
            await submit(page, f"{article} button[value=approve]")
            value = await ex.call("refund", hostile, run_id=run_id, call_id="call-2")
            async with page.expect_navigation():
                await page.click(f"#decided tr[data-request='{request_id}'] a.run-link")
            await screenshot(page, tmp_path / "inbox-run.png")
            texts = await page.eval_on_selector_all(
                "#run article.call", "els => els.map(e => e.innerText)"
            )
            summaries = await page.eval_on_selector_all(
                "#run .summary", "els => els.map(e => e.innerText)"
            )
            injected = await page.eval_on_selector_all(
                "#run script, #run img, header img", "els => els.length"
            )
            title = await page.title()
    assert first_view == (
        "call-call-1",
        f"Run {run_id}",
        ["call-1"],
        [
            "call.requested",
            "call.validated",
            "approval.requested",
            "approval.pending",
            "call.pending",
        ],
        "call-1",
    )
    assert value == f"refunded 4250 cents on {hostile['order_id']}"
    assert executed == [hostile]
    # The page's own title, as text: a script of theirs would have set it to 'owned'.
    assert (injected, title) == (0, f"Run {run_id} · agent-adapter")
    asked, ran = texts
    assert "approval.answered approved by alice" in asked
    recorded = await events(db)
    (granted,) = [e for e in recorded if e.type == "approval.granted"]
    assert f"approved by alice via port for digest {granted.digest[:12]}" in ran
    assert f"effect key refund:{hostile['order_id']} claimed" in ran
    assert summaries == [
        f"call.pending · effect refund:{hostile['order_id']} committed (by call call-2, run "
        f"{run_id})",
        f"call.succeeded · effect refund:{hostile['order_id']} committed (by call call-2, run "
        f"{run_id})",
    ]
