"""The readers of ``call.exchanged``: `ledger show`, `ledger audit`, `ledger export` and
the inbox's run view (every value shown as text)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agent_adapter import Executor, Registry
from agent_adapter.cli import main
from agent_adapter.cli._inbox_views import run_page
from agent_adapter.engine import record_exchange
from agent_adapter.ledger import SQLiteLedger


def recorded_ledger(db: Path) -> None:
    """One call whose body asked twice (answered, refused), in a SQLite file."""
    registry = Registry()

    @registry.tool()
    async def ask(question: str) -> str:
        await record_exchange(
            "elicitation/create",
            request={"message": question},
            response={"action": "accept"},
            peer="<b>client</b> 1.0",
        )
        await record_exchange("sampling/createMessage", request={}, error="refused: not declared")
        return "ok"

    async def go() -> None:
        async with Executor(registry, ledger=SQLiteLedger(str(db))) as executor:
            await executor.call("ask", {"question": "<i>go?</i>"}, run_id="r", call_id="c")

    asyncio.run(go())


def test_show_audit_and_export_read_exchanges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line per exchange with its method and answer; the audit clean; the export whole."""
    db = tmp_path / "ledger.db"
    recorded_ledger(db)
    assert main(["--no-color", "ledger", "show", "--db", str(db), "--type", "call.exchanged"]) == 0
    shown = capsys.readouterr().out.splitlines()[1:]
    assert [line.split()[3] for line in shown] == ["call.exchanged", "call.exchanged"]
    assert 'method=elicitation/create request={"message":"<i>go?</i>"}' in shown[0]
    assert 'response={"action":"accept"}' in shown[0]
    assert "error=refused: not declared" in shown[1]
    assert main(["--no-color", "ledger", "audit", "--db", str(db)]) == 0
    assert "problems: none" in capsys.readouterr().out
    assert main(["ledger", "export", "--db", str(db)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    exchanged = [line for line in lines if line["type"] == "call.exchanged"]
    assert [(e["method"], e.get("response"), e.get("error")) for e in exchanged] == [
        ("elicitation/create", {"action": "accept"}, None),
        ("sampling/createMessage", None, "refused: not declared"),
    ]


def test_the_run_view_shows_each_exchange_as_text(tmp_path: Path) -> None:
    """What was asked, of whom, and the answer (or why none), escaped."""
    db = tmp_path / "ledger.db"
    recorded_ledger(db)

    async def read() -> list[object]:
        ledger = SQLiteLedger(str(db))
        try:
            return [e async for e in ledger.read()]
        finally:
            await ledger.close()

    page = run_page("r", asyncio.run(read()), {}, label="r", more=False)  # type: ignore[arg-type]
    assert "<b>client" not in page and "<i>go" not in page
    assert (
        "asked elicitation/create of <strong>&lt;b&gt;client&lt;/b&gt; 1.0</strong> mid-call: "
        "<code>{&quot;message&quot;: &quot;&lt;i&gt;go?&lt;/i&gt;&quot;}</code>; answered "
        "<code>{&quot;action&quot;: &quot;accept&quot;}</code>"
    ) in page
    refused = "asked sampling/createMessage mid-call: <code>{}</code>; no answer: refused: not"
    assert refused + " declared" in page
