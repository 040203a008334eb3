"""The MCP bridge's surface: optional at import, its alias, ``Registry.tool(readonly=)``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import agent_adapter.bridges.mcp as bridge
import agent_adapter.integrations.mcp as alias
from agent_adapter import Registry
from agent_adapter.errors import ToolUsageError

BLOCK = "import sys; sys.modules['mcp'] = None; sys.modules['mcp_types'] = None; "


def test_the_core_and_the_cli_import_without_mcp() -> None:
    """`import agent_adapter` (and the CLI) never imports mcp."""
    code = BLOCK + (
        "import agent_adapter, agent_adapter.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "['mcp', 'mcp_types']\n", "")


def test_mcp_serve_without_mcp_says_which_extra_to_install(tmp_path: Path) -> None:
    """One line naming the extra, exit status 1, nothing created."""
    code = BLOCK + (
        "from agent_adapter.cli import main; "
        f"sys.exit(main(['mcp', 'serve', '--db', {str(tmp_path / 'l.db')!r}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert done.stderr.startswith("agent-adapter: error: mcp serve needs the mcp extra")
    assert done.stderr.rstrip().endswith("install it with: pip install 'agent-adapter[mcp]'")
    assert len(done.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_the_alias_exports_exactly_the_bridge() -> None:
    """`agent_adapter.integrations.mcp` is the bridge's public API, sorted, nothing more."""
    assert bridge.__all__ == sorted(bridge.__all__)
    assert alias.__all__ == bridge.__all__
    assert all(getattr(alias, n) is getattr(bridge, n) for n in bridge.__all__)


def test_readonly_is_a_registry_option_that_must_be_a_bool() -> None:
    """readonly=True is kept on the spec (both kinds of tool); anything but a bool refused."""
    registry = Registry()

    @registry.tool(readonly=True)
    def look(q: str) -> str:
        return q

    schema = registry.add_schema_tool("s", {"type": "object"}, lambda: None, readonly=True)
    assert (look.readonly, schema.readonly) == (True, True)

    @registry.tool
    def plain() -> str:
        return ""

    assert plain.readonly is False
    with pytest.raises(ToolUsageError) as caught:
        registry.tool(lambda: 1, name="bad", readonly=1)  # type: ignore[arg-type]
    assert str(caught.value) == "tool bad: readonly must be True or False"
