"""Export: FunctionTool shape, strict schemas without narrowing, targets, the SDK version range."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import agents
import agents.tool
import pytest
from agents import FunctionTool

import agent_adapter.bridges.openai_agents as bridge
import agent_adapter.integrations.openai_agents as documented
from agent_adapter import Executor, Registry, get_default_executor
from agent_adapter.errors import IntegrationError
from agent_adapter.integrations.openai_agents import function_tool, function_tools


def build() -> Registry:
    """Tools with portable, unsendable-default and open-object schemas, and targets."""
    registry = Registry()

    @registry.tool(confirm=True)
    async def refund(order_id: str, amount_cents: int) -> str:
        """Refund an order."""
        return "ok"

    @registry.tool
    async def search(query: str, since: float = float("-inf")) -> str:
        """Search; ``since``'s default is a number JSON cannot carry."""
        return "ok"

    @registry.tool(targets=["mcp"])
    async def internal(x: int) -> str:
        """Not for the Agents SDK."""
        return "ok"

    @registry.tool(targets=["openai_agents"], confirm=lambda call, ctx: True)
    async def wire(amount_cents: int) -> str:
        """Only for the Agents SDK."""
        return "ok"

    registry.add_schema_tool(
        "tag",
        {
            "type": "object",
            "properties": {"labels": {"type": "object"}},
            "required": ["labels"],
        },
        lambda labels: "ok",
        description="Attach free-form labels.",
    )
    return registry


def test_a_portable_schema_is_strict() -> None:
    """A portable schema is exported strict, exactly as the engine's strict form."""
    spec = build().get("refund")
    tool = function_tool(spec, executor=Executor())
    assert isinstance(tool, FunctionTool)
    assert (tool.name, tool.description) == ("refund", "Refund an order.")
    assert tool.strict_json_schema is True
    assert tool.params_json_schema == {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
        "required": ["order_id", "amount_cents"],
        "additionalProperties": False,
    }


def test_strict_false_gives_the_full_schema_non_strict() -> None:
    """``strict=False`` exports the spec's own schema, non-strict."""
    spec = build().get("refund")
    tool = function_tool(spec, executor=Executor(), strict=False)
    assert tool.strict_json_schema is False
    assert tool.params_json_schema == spec.json_schema
    assert tool.params_json_schema is not spec.json_schema


@pytest.mark.parametrize("name", ["search", "tag"])
def test_a_schema_that_is_not_portable_is_non_strict_never_narrowed(name: str) -> None:
    """A default the model could not send, or an open object, keeps the full schema,
    non-strict (never "only {}", never a schema without the field's real default)."""
    spec = build().get(name)
    tool = function_tool(spec, executor=Executor())
    assert tool.strict_json_schema is False
    assert tool.params_json_schema == spec.json_schema
    if name == "tag":
        assert tool.params_json_schema["properties"]["labels"] == {"type": "object"}


def test_function_tools_exports_only_tools_targeting_openai_agents() -> None:
    """``function_tools`` skips tools whose targets leave out ``openai_agents``."""
    tools = function_tools(build(), executor=Executor())
    assert [t.name for t in tools] == ["refund", "search", "wire", "tag"]


def test_tools_fail_the_run_instead_of_formatting_errors() -> None:
    """Every tool has the SDK's failure formatter set to None (no "please try again" text)."""
    for tool in function_tools(build(), executor=Executor()):
        assert tool._failure_error_function is None
        assert tool._use_default_failure_error_function is False


def test_confirm_becomes_the_needs_approval_gate() -> None:
    """confirm=False is needs_approval=False; True and a rule become async checks."""
    tools = {t.name: t for t in function_tools(build(), executor=Executor())}
    assert tools["search"].needs_approval is False
    assert callable(tools["refund"].needs_approval)
    assert callable(tools["wire"].needs_approval)


async def test_the_gate_validates_then_asks() -> None:
    """The gate says no to invalid arguments and yes to valid ones for confirm=True."""
    tool = function_tool(build().get("refund"), executor=Executor())
    gate: Any = tool.needs_approval
    assert await gate(None, {"order_id": "A1", "amount_cents": 5}, "c1") is True
    assert await gate(None, {"order_id": "A1", "amount_cents": "5"}, "c1") is False
    assert await gate(None, {"order_id": "A1"}, "c1") is False


async def test_a_failing_rule_asks() -> None:
    """A confirm rule that raises asks for approval (fail closed)."""
    registry = Registry()

    def broken(call: Any, ctx: Any) -> bool:
        raise RuntimeError("rule broke")

    @registry.tool(confirm=broken)
    async def wire(amount_cents: int) -> str:
        """Wire money."""
        return "ok"

    gate: Any = function_tool(wire, executor=Executor()).needs_approval
    assert await gate(None, {"amount_cents": 5}, "c1") is True


def test_executor_none_uses_the_default_executor() -> None:
    """``executor=None`` binds the tool to ``get_default_executor()``."""
    tool = function_tool(build().get("refund"))
    assert tool._agent_adapter_export.executor is get_default_executor()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "version",
    ["0.22.0", "0.22.3", "0.23.1", "0.24.0", "0.24.7", "0.31.2", "0.99.0", "0.22.0.post1"],
)
def test_versions_in_range_export(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    """SDK versions from 0.22 to below 1.0 export."""
    monkeypatch.setattr(agents, "__version__", version)
    assert bridge.sdk_version() == version
    assert len(function_tools(build(), executor=Executor())) == 4


@pytest.mark.parametrize(
    "version", ["0.21.9", "0.22.0rc1", "0.19.2", "1.0.0", "1.0.0rc1", "1.2.0", "2.0", "unknown", ""]
)
def test_versions_out_of_range_raise(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    """An SDK outside 0.22 to below 1.0 raises IntegrationError at export."""
    monkeypatch.setattr(agents, "__version__", version)
    spec = build().get("refund")
    with pytest.raises(IntegrationError):
        function_tool(spec, executor=Executor())
    with pytest.raises(IntegrationError):
        function_tools(build(), executor=Executor())


def test_an_sdk_without_the_failure_formatter_hook_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``set_function_tool_failure_error_function`` export raises IntegrationError."""
    monkeypatch.delattr(agents.tool, "set_function_tool_failure_error_function")
    with pytest.raises(IntegrationError, match="set_function_tool_failure_error_function"):
        function_tool(build().get("refund"), executor=Executor())


def test_the_documented_import_path_is_the_bridge() -> None:
    """``agent_adapter.integrations.openai_agents`` re-exports the bridge, names sorted."""
    assert documented.__all__ == bridge.__all__ == sorted(bridge.__all__)
    for name in bridge.__all__:
        assert getattr(documented, name) is getattr(bridge, name)
    for name in (
        "INTEGRATION",
        "function_tool",
        "function_tools",
        "resolve_interruptions",
        "run",
        "run_sync",
        "unwrap",
    ):
        assert name in bridge.__all__


def test_the_core_imports_without_the_sdk() -> None:
    """``import agent_adapter`` (engine, ledger, errors) works with openai-agents unavailable."""
    code = (
        "import sys; sys.modules['agents'] = None\n"
        "import agent_adapter, agent_adapter.engine, agent_adapter.ledger, agent_adapter.errors\n"
        "import agent_adapter.bridges, agent_adapter.integrations\n"
        "assert sys.modules['agents'] is None\n"
        "try:\n"
        "    import agent_adapter.integrations.openai_agents\n"
        "except ImportError:\n"
        "    print('bridge needs the extra')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "bridge needs the extra\n", "")
