"""examples/temporal's agent: ``agent_demo.py`` (``make demo-temporal-agent``) end to end on
the session's dev server."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from temporal_support import require

require()

from temporal_app import TIMEOUT_S  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="session")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "temporal"


async def test_the_agent_demo_runs_end_to_end(temporal_env: Any, tmp_path: Path) -> None:
    """The agent looks the order up and asks for the refund; the reviewer approves it by
    Update; the refund is made once, the agent reports it, and the ledger audits clean."""
    address = temporal_env.client.service_client.config.target_host
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "agent_demo.py",
        "--address",
        address,
        "--dir",
        str(tmp_path),
        cwd=EXAMPLE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    lines = out.decode().splitlines()
    steps = {line[:2]: line for line in lines if line[:2] in {f"{n}." for n in range(1, 9)}}
    assert (proc.returncode, "Traceback" in err.decode()) == (0, False), err.decode()
    assert sorted(steps) == [f"{n}." for n in range(1, 9)]
    result = json.loads(steps["6."].split(": ", 1)[1])
    assert result == {
        "answer": "Done: refunded 500 on A1",
        "tool_outputs": ['{"order_id":"A1","amount_cents":500}', "refunded 500 on A1"],
    }
    assert steps["5."] == "5. approved refund-1 as alice (an Update, checked against the digest)"
    assert steps["7."] == "7. refunds made: ['refund A1 500']"
    assert "problems: none" in lines
    assert (tmp_path / "refunds.log").read_text() == "refund A1 500\n"
