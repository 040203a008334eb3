"""The package surface: imports without openai-agents, sorted and complete __all__, errors."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from types import ModuleType

import pytest

import agent_adapter
from agent_adapter import Executor, get_default_executor
from agent_adapter import errors as errors_module
from agent_adapter.errors import (
    MODEL_VISIBLE_KINDS,
    AdapterError,
    ApprovalPending,
    error_from_kind,
)
from agent_adapter.ledger import MemoryLedger

PACKAGES = [
    "agent_adapter",
    "agent_adapter.engine",
    "agent_adapter.ledger",
    "agent_adapter.hooks",
    "agent_adapter.errors",
    "agent_adapter.testing",
    "agent_adapter.bridges.langgraph",
    "agent_adapter.integrations.langgraph",
]


def test_core_imports_without_openai_agents() -> None:
    """The core packages import with `agents` blocked (openai-agents not installed)."""
    code = (
        "import sys; sys.modules['agents'] = None; "
        "import agent_adapter, agent_adapter.ledger, agent_adapter.engine, agent_adapter.hooks, "
        "agent_adapter.errors, agent_adapter.testing; "
        "print(sorted(m for m in sys.modules if m == 'agents' or m.startswith('agents.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "['agents']\n", "")


def _own_public_names(module: ModuleType) -> set[str]:
    names = set()
    for name, obj in vars(module).items():
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        origin = getattr(obj, "__module__", module.__name__) or ""
        if origin.startswith("agent_adapter"):
            names.add(name)
    return names


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_complete_and_importable(name: str) -> None:
    """Each package's __all__ is sorted, names every public object it holds, and resolves."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    missing = _own_public_names(module) - set(exported)
    unresolved = [n for n in exported if getattr(module, n, None) is None]
    assert (exported == sorted(exported), sorted(missing), unresolved) == (True, [], [])


def test_documented_names_are_exported() -> None:
    """The names DESIGN.md lists for agent_adapter and agent_adapter.ledger are exported."""
    ledger = importlib.import_module("agent_adapter.ledger")
    assert agent_adapter.__all__ == [
        "ApprovalPort",
        "ApprovalRequest",
        "Call",
        "CallContext",
        "CallbackApproval",
        "Decision",
        "DeferredApproval",
        "Executor",
        "Outcome",
        "Registry",
        "RunLimits",
        "ToolSpec",
        "current_call",
        "digest",
        "get_default_executor",
    ]
    documented = {"Ledger", "MemoryLedger", "SQLiteLedger", "replay", "Audit", "Verification"}
    assert documented - set(ledger.__all__) == set()


def test_errors_have_one_root_and_stable_kinds() -> None:
    """Every error derives from AdapterError with its documented kind; kinds rebuild errors."""
    kinds = {
        name: cls.kind
        for name, cls in vars(errors_module).items()
        if inspect.isclass(cls) and issubclass(cls, AdapterError)
    }
    assert kinds == {
        "AdapterError": "adapter-error",
        "ToolArgsInvalid": "tool-args-invalid",
        "ToolError": "tool-error",
        "ApprovalDenied": "approval-denied",
        "GuardrailBlocked": "guardrail-blocked",
        "RunLimitExceeded": "run-limit-exceeded",
        "ApprovalPending": "approval-pending",
        "ToolTimeout": "tool-timeout",
        "ToolFailed": "tool-failed",
        "DuplicateEffect": "duplicate-effect",
        "AmbiguousEffect": "ambiguous-effect",
        "EffectInFlight": "effect-in-flight",
        "ToolUsageError": "tool-usage",
        "IntegrationError": "integration",
        "LedgerError": "ledger",
    }
    rebuilt = {
        kind: type(error_from_kind(kind, "m")).__name__
        for kind in kinds.values()
        if kind != "adapter-error"
    }
    assert rebuilt == {kind: name for name, kind in kinds.items() if name != "AdapterError"}
    assert MODEL_VISIBLE_KINDS == {
        "tool-args-invalid",
        "tool-error",
        "approval-denied",
        "guardrail-blocked",
        "run-limit-exceeded",
        "approval-pending",
    }
    pending = error_from_kind("approval-pending", "wait", request_id="q1")
    assert (type(pending), pending.request_id, pending.to_dict()) == (
        ApprovalPending,
        "q1",
        {"kind": "approval-pending", "message": "wait"},
    )
    assert type(error_from_kind("from-the-future", "x")).__name__ == "ToolFailed"


def test_default_executor_is_process_wide() -> None:
    """get_default_executor() returns one executor with a memory ledger and no approval port."""
    first = get_default_executor()
    assert (first is get_default_executor(), type(first), type(first.ledger), first.approval) == (
        True,
        Executor,
        MemoryLedger,
        None,
    )


async def test_executor_as_a_context_manager_closes_its_ledger() -> None:
    """`async with Executor(...)` starts it and closes its ledger; close() is idempotent."""
    closed = []

    class Ledger(MemoryLedger):
        async def close(self) -> None:
            closed.append(1)

    async with Executor(ledger=Ledger()) as executor:
        assert executor._started is True
    await executor.close()
    assert closed == [1]
