"""Confirm rules, guards and before_tool hooks see the effect key the call will claim
(issue 10, item 8: it was None until step 8); after an edit, the edited arguments' key."""

from __future__ import annotations

from typing import Any

import pytest

from agent_adapter import CallbackApproval, Decision, Executor, Registry, current_call
from agent_adapter.errors import DuplicateEffect, ToolUsageError
from agent_adapter.ledger import MemoryLedger


async def test_rules_guards_and_hooks_see_the_key_and_an_edit_renders_it_again() -> None:
    """The rule, the guard and the hook run twice (the edit re-checks): each time with the
    key of the arguments they are shown, and the body claims the edited key."""
    seen: list[tuple[str, str | None]] = []

    def rule(call: Any, ctx: Any) -> bool:
        seen.append(("rule", call.effect_key))
        return True

    def guard(call: Any) -> None:
        seen.append(("guard", call.effect_key))

    class Hook:
        def before_tool(self, call: Any) -> None:
            seen.append(("hook", call.effect_key))

    registry = Registry()

    @registry.tool(confirm=rule, effect="refund:{order_id}", guards=[guard])
    async def refund(order_id: str, amount_cents: int) -> str:
        call = current_call()
        assert call is not None
        return str(call.effect_key)

    edit = Decision(approved=True, reviewer="ops", edits={"order_id": "B2", "amount_cents": 1})
    port = CallbackApproval(lambda request: edit)
    executor = Executor(registry, ledger=MemoryLedger(), approval=port, hooks=[Hook()])
    result = await executor.call("refund", {"order_id": "A1", "amount_cents": 500}, run_id="r")
    assert result == "refund:B2"
    assert seen == [
        ("hook", "refund:A1"),
        ("guard", "refund:A1"),
        ("rule", "refund:A1"),
        ("hook", "refund:B2"),
        ("guard", "refund:B2"),
    ]
    with pytest.raises(DuplicateEffect):
        await executor.call("refund", {"order_id": "B2", "amount_cents": 1}, run_id="r")


async def test_a_key_that_does_not_render_fails_before_checks() -> None:
    """A template over a missing field fails the call with ToolUsageError at validation:
    no guard or hook is shown a call without its key."""
    shown: list[Any] = []
    registry = Registry()

    @registry.tool(effect=lambda args: args["nope"], guards=[shown.append])
    async def broken(x: int) -> None:
        return None

    executor = Executor(registry, ledger=MemoryLedger())
    with pytest.raises(ToolUsageError, match="effect key of broken cannot be rendered"):
        await executor.call("broken", {"x": 1}, run_id="r")
    assert shown == []
