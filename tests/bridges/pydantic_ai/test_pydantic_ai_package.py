"""The bridge's packaging: the core without pydantic-ai, public names only, one alias."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import agent_adapter

PACKAGE = Path(agent_adapter.__file__).resolve().parent
BRIDGE_FILES = [
    *sorted((PACKAGE / "bridges" / "pydantic_ai").glob("*.py")),
    PACKAGE / "testing" / "pydantic_ai.py",
    PACKAGE / "integrations" / "pydantic_ai.py",
]


def test_the_core_imports_without_pydantic_ai() -> None:
    """The core packages import with ``pydantic_ai`` blocked (the extra not installed)."""
    code = (
        "import sys; sys.modules['pydantic_ai'] = None; "
        "import agent_adapter, agent_adapter.ledger, agent_adapter.engine, agent_adapter.hooks, "
        "agent_adapter.errors, agent_adapter.testing, agent_adapter.bridges; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic_ai'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "['pydantic_ai']\n", "")


def test_without_pydantic_ai_the_bridge_fails_to_import_plainly() -> None:
    """Importing the bridge without the framework is an ImportError naming pydantic_ai."""
    code = (
        "import sys; sys.modules['pydantic_ai'] = None\n"
        "try:\n    import agent_adapter.integrations.pydantic_ai\n"
        "except ImportError as e:\n    print('pydantic_ai' in str(e))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "True\n", "")


def _imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from agent_adapter... import`` (relative ones resolved)."""
    tree = ast.parse(path.read_text())
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.startswith("agent_adapter"):
                found.extend((module, alias.name) for alias in node.names)
    return found


def test_the_bridge_uses_only_public_names_of_other_packages() -> None:
    """Outside its own package the bridge (and its kit driver) imports no ``_private``
    module or name of agent_adapter: the bridge contract is enough."""
    private = []
    for path in BRIDGE_FILES:
        own = "agent_adapter.bridges.pydantic_ai"
        for module, name in _imports(path):
            if module == own or module.startswith(own + "."):
                continue  # its own private modules
            if module == "agent_adapter.testing._kit" and path.name == "pydantic_ai.py":
                continue  # the kit's own package (as testing/openai_agents.py imports it)
            parts = module.split(".")
            if any(p.startswith("_") for p in parts) or name.startswith("_"):
                private.append(f"{path.name}: {module}:{name}")
    assert private == []


def test_the_integration_alias_exports_the_bridge() -> None:
    """``agent_adapter.integrations.pydantic_ai`` is the bridge's ``__all__``, sorted."""
    import agent_adapter.bridges.pydantic_ai as bridge
    import agent_adapter.integrations.pydantic_ai as alias

    assert alias.__all__ == bridge.__all__ == sorted(bridge.__all__)
    own = {
        name
        for name, obj in vars(bridge).items()
        if not name.startswith("_")
        and not isinstance(obj, type(bridge))
        and (getattr(obj, "__module__", bridge.__name__) or "").startswith("agent_adapter")
    }
    assert sorted(own - set(bridge.__all__)) == []
    assert all(getattr(alias, n) is getattr(bridge, n) for n in bridge.__all__)
    assert bridge.NAME == "pydantic_ai"
