"""A request the OpenAI Agents bridge asks records the call's effect key and its state, so the
reviewer (``approvals show``, the inbox) is told when that key has already run."""

from __future__ import annotations

import asyncio
import html
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from _inbox import serving, token_file
from agents import Runner
from openai_agents_helpers import CONFIG, assistant_message, function_call, make_agent, outputs

from agent_adapter import CallbackApproval, DeferredApproval, Executor, Registry
from agent_adapter.integrations.openai_agents import function_tools, review_interruptions
from agent_adapter.ledger import SQLiteLedger

TIMEOUT_S = 60.0
NOTICE = "refund:A1 is already committed by call c1 (run r-1): approving cannot make it run"


def build(ran: list[str]) -> Registry:
    """One ``confirm=True`` refund keyed by its order; ``ran`` collects the orders refunded."""
    registry = Registry()

    @registry.tool(confirm=True, effect="refund:{order_id}")
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order."""
        ran.append(order_id)
        return f"refunded {amount_cents} on {order_id}"

    return registry


async def paused_run(registry: Registry, executor: Executor, run_id: str, call_id: str) -> Any:
    """An agent whose first turn refunds 500 on A1 under ``call_id``: (agent, model, result)."""
    agent, model = make_agent(
        function_tools(registry, executor=executor),
        [function_call("refund", {"order_id": "A1", "amount_cents": 500}, call_id=call_id)],
        [assistant_message("done")],
    )
    result = await Runner.run(agent, "Refund", run_config=CONFIG, context={"run_id": run_id})
    return agent, model, result


async def ask_twice(db: Path) -> tuple[Any, Any, list[Any]]:
    """Refund A1 in run r-1 (asked of a DeferredApproval, approved, run), then ask about it
    again in run r-2 (left pending) and r-3 (a callback port that denies): (the first
    request, the second, the requests the callback saw)."""
    ran: list[str] = []
    registry = build(ran)
    ledger = SQLiteLedger(db)
    deferred = DeferredApproval(ledger)
    async with await Executor.open(registry, ledger=ledger) as executor:
        agent, model, result = await paused_run(registry, executor, "r-1", "c1")
        first = await review_interruptions(result, deferred, run_id="r-1")
        [asked_free] = await deferred.pending()
        await deferred.answer(asked_free.request_id, approved=True, reviewer="alice")
        review = await review_interruptions(first.state, deferred, run_id="r-1")
        await Runner.run(agent, review.state, run_config=CONFIG)
        assert (ran, outputs(model)) == (["A1"], {"c1": "refunded 500 on A1"})

        _, _, again = await paused_run(registry, executor, "r-2", "c2")
        await review_interruptions(again, deferred, run_id="r-2")
        [asked_taken] = await deferred.pending()
        seen: list[Any] = []
        _, _, third = await paused_run(registry, executor, "r-3", "c3")
        await review_interruptions(third, CallbackApproval(lambda r: seen.append(r) or False))
    assert ran == ["A1"]
    return asked_free, asked_taken, seen


def test_a_request_for_a_key_that_already_ran_carries_the_notice(tmp_path: Path) -> None:
    """The first refund of A1 is asked with its key free and runs; a second run's refund of A1
    is asked with the key committed by the first: the recorded request (and a callback port's)
    names the key, its state and holder, ``approvals show`` prints the notice, and the inbox
    shows it by the request."""
    db = tmp_path / "ledger.db"
    asked_free, asked_taken, seen = asyncio.run(ask_twice(db))
    assert (asked_free.effect_key, asked_free.effect_state, asked_free.effect_notice) == (
        "refund:A1",
        None,
        None,
    )
    assert (
        asked_taken.effect_key,
        asked_taken.effect_state,
        asked_taken.effect_by_run_id,
        asked_taken.effect_by_call_id,
        asked_taken.effect_notice,
    ) == ("refund:A1", "committed", "r-1", "c1", NOTICE)
    assert [(r.effect_key, r.effect_state, r.effect_notice) for r in seen] == [
        ("refund:A1", "committed", NOTICE)
    ]

    show = ["approvals", "show", asked_taken.request_id, "--db", str(db)]
    shown = subprocess.run(
        [sys.executable, "-m", "agent_adapter.cli", *show],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert (shown.returncode, shown.stderr) == (0, "")
    rows = [line.split(None, 1) for line in shown.stdout.splitlines()]
    assert ["effect", NOTICE] in rows

    tokens, token = token_file(tmp_path)
    with serving(db, tokens) as url:
        parts = urllib.parse.urlsplit(url)
        front = f"{parts.scheme}://{parts.netloc}/"
        asked = urllib.request.Request(front, headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(asked, timeout=TIMEOUT_S) as response:
            page = response.read().decode()
    article = page.split(f'id="req-{asked_taken.request_id}"', 1)[1].split("</article>", 1)[0]
    assert f'<p class="effect-notice">{html.escape(NOTICE)}</p>' in article
