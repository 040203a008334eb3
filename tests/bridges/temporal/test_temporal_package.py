"""The bridge's surface: the documented alias exports what the bridge does, sorted, and
the core never imports temporalio."""

from __future__ import annotations

import subprocess
import sys

from temporal_support import require

require()

import agent_adapter.bridges.temporal as bridge  # noqa: E402
import agent_adapter.integrations.temporal as alias  # noqa: E402


def test_the_alias_exports_the_bridge_sorted() -> None:
    """``agent_adapter.integrations.temporal`` is the bridge's ``__all__``, sorted, each
    name the same object."""
    assert (alias.__all__, sorted(bridge.__all__)) == (bridge.__all__, bridge.__all__)
    assert [getattr(alias, n) is getattr(bridge, n) for n in alias.__all__] == [True] * len(
        alias.__all__
    )


def test_the_core_imports_without_temporalio() -> None:
    """With temporalio blocked, the core and the other integrations import; only the
    Temporal bridge needs it."""
    code = (
        "import sys; sys.modules['temporalio'] = None; "
        "import agent_adapter, agent_adapter.engine, agent_adapter.ledger, "
        "agent_adapter.integrations\n"
        "try:\n    import agent_adapter.integrations.temporal\n"
        "except ImportError as exc:\n    print('refused:', exc.name)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "refused: temporalio\n", "")
