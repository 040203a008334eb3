"""An SDK without a name the bridge uses: the bridge imports, use raises IntegrationError."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import agents
import pytest

from agent_adapter.bridges.openai_agents._compat import REQUIRED

BRIDGE = Path(__file__).resolve().parents[3] / "agent_adapter" / "bridges" / "openai_agents"

# Run in a fresh interpreter: each case takes a name off the real SDK module (or a whole
# submodule out of sys.modules), imports the bridge afresh, uses it, and puts the name back.
SCRIPT = r"""
import asyncio, importlib, json, sys
import agents
import pytest
from agent_adapter import CallbackApproval, Executor, Registry
from agent_adapter.errors import IntegrationError

OURS = ("agent_adapter.bridges.openai_agents", "agent_adapter.integrations.openai_agents")

def fresh_bridge():
    for name in [m for m in sys.modules if m.startswith(OURS)]:
        del sys.modules[name]
    return importlib.import_module("agent_adapter.integrations.openai_agents")

def outcome(thunk):
    try:
        thunk()
    except IntegrationError as exc:
        return f"IntegrationError: {exc}"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"

class Ctx:
    tool_call_id = "c1"

registry = Registry()

@registry.tool(confirm=True)
async def refund(order_id: str) -> str:
    return "ok"

uses = {
    "agents.Runner": lambda b: b.run_sync(None, "hi"),
    "agents.get_current_trace": lambda b: b.INTEGRATION.bind_context(Ctx()),
    "agents.agent_tool_state.get_agent_tool_state_scope": (
        lambda b: b.INTEGRATION.take_token(Ctx(), "refund")
    ),
}

for case in json.loads(sys.argv[1]):
    module, name = case["module"], case["name"]
    if name is None:  # the whole submodule is missing
        saved = sys.modules.get(module)
        sys.modules[module] = None
    else:
        owner = importlib.import_module(module)
        saved = getattr(owner, name)
        delattr(owner, name)
    row = {"missing": module if name is None else f"{module}.{name}"}
    try:
        bridge = fresh_bridge()
        row["import"] = "ok"
    except Exception as exc:
        row["import"] = f"{type(exc).__name__}: {exc}"
    else:
        asked = []
        port = CallbackApproval(lambda request: asked.append(request) or True)
        row["function_tool"] = outcome(lambda: bridge.function_tool(refund, executor=Executor()))
        row["function_tools"] = outcome(
            lambda: bridge.function_tools(registry, executor=Executor())
        )
        row["resolve_interruptions"] = outcome(
            lambda: asyncio.run(bridge.resolve_interruptions(object(), port))
        )
        row["asked"] = len(asked)
        if row["missing"] in uses:
            row["use"] = outcome(lambda: uses[row["missing"]](bridge))
    finally:
        if name is None:
            sys.modules[module] = saved
        else:
            setattr(owner, name, saved)
    print(json.dumps(row))
"""


def _run(cases: list[dict[str, str | None]]) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    return [json.loads(line) for line in done.stdout.splitlines()]


def _error(missing: str) -> str:
    return (
        f"IntegrationError: openai-agents {agents.__version__} has no {missing}: agent-adapter's "
        "bridge needs openai-agents >=0.22,<1.0 (pip install 'agent-adapter[openai-agents]')"
    )


def test_every_missing_sdk_name_is_an_integration_error_at_use_never_at_import() -> None:
    """Without any one SDK name the bridge uses (an older or newer openai-agents), the bridge
    imports; function_tool, function_tools and resolve_interruptions raise IntegrationError
    naming it and the supported range (before the port is asked), as does using its
    stand-in directly. A whole missing submodule is the same."""
    cases: list[dict[str, str | None]] = [{"module": m, "name": n} for m, n in REQUIRED]
    cases += [
        {"module": "agents.agent_tool_state", "name": None},
        {"module": "agents.tool", "name": None},
    ]
    rows = _run(cases)
    used_directly = {
        "agents.Runner",
        "agents.get_current_trace",
        "agents.agent_tool_state.get_agent_tool_state_scope",
    }
    expected = []
    for case in cases:
        module, name = case["module"], case["name"]
        missing = f"{module}.{name}" if name else str(module)
        # A missing submodule takes every name the bridge uses from it: all are named.
        named = missing if name else ", ".join(f"{m}.{n}" for m, n in REQUIRED if m == module)
        row: dict[str, object] = {
            "missing": missing,
            "import": "ok",
            "function_tool": _error(named),
            "function_tools": _error(named),
            "resolve_interruptions": _error(named),
            "asked": 0,
        }
        if missing in used_directly:
            row["use"] = _error(missing)
        expected.append(row)
    assert rows == expected


def test_the_bridge_takes_sdk_names_only_through_the_required_table() -> None:
    """No bridge module imports from the SDK at run time except ``import agents``; every name
    it takes (``sdk_name``, or imported for type checking only) is in REQUIRED, so the
    export check covers each one."""
    required = set(REQUIRED)
    outside: list[str] = []
    named: set[tuple[str, str]] = set()
    for path in sorted(BRIDGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        checking_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If)
            and isinstance(block.test, ast.Name)
            and block.test.id == "TYPE_CHECKING"
            for node in ast.walk(ast.Module(body=block.body, type_ignores=[]))
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "agents":
                for alias in node.names:
                    named.add((node.module or "", alias.name))
                if id(node) not in checking_only:
                    outside.append(f"{path.name}: from {node.module} import ...")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "agents" and path.name != "_compat.py":
                        outside.append(f"{path.name}: import {alias.name}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "sdk_name"
            ):
                module, name = (arg.value for arg in node.args if isinstance(arg, ast.Constant))
                named.add((module, name))
    assert outside == []
    assert named - required == set()
    assert required - named == set()  # nothing listed that the bridge no longer uses


def test_a_run_state_without_a_field_the_bridge_reads_is_an_integration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """resolve_interruptions decides on the RunState's run context (RunState.approve is
    quadratic in the pending calls), reading private dataclass fields: an SDK whose
    RunState lacks one is refused at export, naming each missing field and the range."""
    from agent_adapter.bridges.openai_agents._compat import STATE_FIELDS, check_sdk
    from agent_adapter.errors import IntegrationError

    kept = [f for f in dataclasses.fields(agents.RunState) if f.name != "_current_step"]
    changed = dataclasses.make_dataclass(
        "RunState", [(f.name, f.type, dataclasses.field(default=None)) for f in kept]
    )
    check_sdk()  # the installed SDK has every field
    monkeypatch.setattr(agents, "RunState", changed)
    with pytest.raises(IntegrationError) as caught:
        check_sdk()
    assert f"IntegrationError: {caught.value}" == _error("agents.RunState._current_step")
    monkeypatch.setattr(agents, "RunState", object)  # not a dataclass at all
    with pytest.raises(IntegrationError) as caught:
        check_sdk()
    assert f"IntegrationError: {caught.value}" == _error(
        ", ".join(f"agents.RunState.{n}" for n in STATE_FIELDS)
    )
