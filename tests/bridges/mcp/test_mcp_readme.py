"""The README's MCP sections run as written (paths under /home/me moved to a temp dir)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import mcp_types as types
import pytest
from _docs import page
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.usefixtures("bounded")

BIN = Path(sys.executable).parent


def section(title: str) -> str:
    return {
        "MCP gateway": page("bridges/mcp.md"),
        "Writing a bridge: the conformance kit": page("bridges/writing-a-bridge.md"),
    }[title]


def block(text: str, lang: str, first_line: str | None = None) -> str:
    found = re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)
    if first_line is not None:
        found = [b for b in found if b.startswith(first_line + "\n")]
    assert len(found) == 1, f"{len(found)} {lang} blocks starting {first_line!r}"
    return found[0]


def test_the_gateway_example_prints_what_the_readme_says() -> None:
    """The in-process example: asked twice, one refund, the duplicate refused."""
    text = section("MCP gateway")
    code = block(text, "python", "# example: mcp-gateway")
    shown = text.split(code, 1)[1]
    expected = re.search(r"prints\n\n```\n(.*?)```", shown, flags=re.S)
    assert expected is not None
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == expected.group(1)


async def test_the_desktop_config_serves_the_upstream_with_the_policy(tmp_path: Path) -> None:
    """The config's command, the upstream file and the policy file, pasted as written."""
    text = section("MCP gateway")
    home = tmp_path / "me"
    home.mkdir()
    (home / "upstream.py").write_text(block(text, "python", "# example: mcp-upstream"))
    (home / "policy.toml").write_text(block(text, "toml"))
    config = json.loads(block(text, "json").replace("/home/me", str(home)))
    (server,) = config["mcpServers"].values()
    # The host's PATH has agent-adapter and python: this venv's.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    params = StdioServerParameters(command=server["command"], args=server["args"], env=env)
    db = home / "notes-ledger.db"
    commands = block(text, "bash").replace("/home/me", str(home)).splitlines()

    async def yes(context: object, params: object) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": True})

    async with Client(params, mode="legacy", elicitation_callback=yes) as client:
        read = await client.call_tool("read_note", {"name": "todo"})
        deleted = await client.call_tool("delete_note", {"name": "todo"})
        twice = await client.call_tool("delete_note", {"name": "todo"})
    assert read.structured_content == {"result": "buy milk"}
    assert deleted.structured_content == {"result": "deleted todo"}
    assert (twice.structured_content or {})["error"]["kind"] == "duplicate-effect"

    # A host that cannot elicit: pending, answered out of band with the README's commands.
    async with Client(params, mode="2026-07-28") as client:
        pending = await client.call_tool("delete_note", {"name": "old"})
        request_id = (pending.structured_content or {})["request_id"]
        listed = run_line(commands[0], env)
        assert request_id in listed.stdout
        approved = run_line(commands[1].replace("REQUEST_ID", request_id), env)
        assert approved.returncode == 0, approved.stderr
        done = await client.call_tool("delete_note", {"name": "old"})
    assert done.structured_content == {"result": "deleted old"}
    audit = run_line(f"agent-adapter ledger audit --db {db}", env)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def run_line(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import shlex

    argv = shlex.split(line)
    assert argv[0] == "agent-adapter"
    return subprocess.run(
        [str(BIN / "agent-adapter"), *argv[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_the_conformance_kit_example_is_a_test_that_passes(tmp_path: Path) -> None:
    """The README's kit snippet, saved as a test file, passes under pytest."""
    text = section("Writing a bridge: the conformance kit")
    test_file = tmp_path / "test_my_bridge.py"
    test_file.write_text(block(text, "python", "# example: conformance-kit"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-o",
            "asyncio_mode=auto",
            str(test_file),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "9 passed" in done.stdout
