"""The LangGraph bridge's package surface: the core without it, public names only, aliases."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import agent_adapter.bridges.langgraph as bridge
import agent_adapter.integrations.langgraph as integration

BRIDGE = Path(bridge.__file__).parent
BLOCKED = ("langgraph", "langchain", "langchain_core")


def test_the_core_imports_without_langgraph() -> None:
    """``agent_adapter``, its engine, ledger, hooks, errors and kit import with LangGraph and
    LangChain blocked (not installed), and none of them is imported."""
    block = "; ".join(f"sys.modules[{name!r}] = None" for name in BLOCKED)
    code = (
        f"import sys; {block}; "
        "import agent_adapter, agent_adapter.engine, agent_adapter.ledger, agent_adapter.hooks, "
        "agent_adapter.errors, agent_adapter.testing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{BLOCKED!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{sorted(BLOCKED)}\n", "")


def test_the_integration_is_the_bridge() -> None:
    """``agent_adapter.integrations.langgraph`` re-exports exactly the bridge's names."""
    assert (integration.__all__, [getattr(integration, n) for n in integration.__all__]) == (
        bridge.__all__,
        [getattr(bridge, n) for n in bridge.__all__],
    )


def _imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            found.extend((module, alias.name) for alias in node.names)
    return found


def test_the_bridge_uses_only_public_names_of_agent_adapter() -> None:
    """Outside its own package the bridge imports only public names of the engine, the
    ledger and the errors (the bridge contract), never a ``_private`` module or name."""
    private = [
        f"{path.name}: {module}:{name}"
        for path in sorted(BRIDGE.glob("*.py"))
        for module, name in _imports(path)
        if module.startswith("...")
        and (name.startswith("_") or any(p.startswith("_") for p in module.strip(".").split(".")))
    ]
    outside = sorted(
        {m for path in BRIDGE.glob("*.py") for m, _ in _imports(path) if m.startswith("...")}
    )
    assert (private, outside) == ([], ["...engine", "...errors"])


def test_the_bridge_modules_import_no_cycle() -> None:
    """The bridge's modules import each other one way (no two import each other)."""
    graph = {
        path.stem: {
            m[1:] for m, _ in _imports(path) if m.startswith(".") and not m.startswith("..")
        }
        for path in BRIDGE.glob("*.py")
    }

    cycles = [name for name in graph if _reaches_itself(graph, name)]
    assert cycles == []


def _reaches_itself(graph: dict[str, set[str]], start: str) -> bool:
    stack, seen = list(graph.get(start, ())), set()
    while stack:
        node = stack.pop()
        if node == start:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(graph.get(node, ()))
    return False
