"""``error_kind`` finds the bridge's kind however deep the error chain holds it."""

from __future__ import annotations

from temporal_support import require

require()

from temporalio.exceptions import ActivityError, ApplicationError, RetryState  # noqa: E402

from agent_adapter.integrations.temporal import error_kind  # noqa: E402


def _ours(kind: str) -> ApplicationError:
    """An error as ``ToolActivities`` raises it: typed by the kind, details ``{"kind", ...}``."""
    return ApplicationError(f"{kind}: no", {"kind": kind, "message": "no"}, type=kind)


def _activity_error(cause: BaseException) -> ActivityError:
    error = ActivityError(
        "activity failed",
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker",
        activity_type="agent_adapter.run",
        activity_id="2",
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    error.__cause__ = cause
    return error


def _raised_from(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


def test_the_kind_is_found_through_every_layer() -> None:
    """Direct, under an ActivityError (``call_tool``), and under the OpenAI plugin's
    ``AgentsWorkflowError`` as the workflow's starter sees it (an ApplicationError typed
    "AgentsWorkflowError", whose cause is the ActivityError): always the bridge's kind,
    never the wrapper's type. Errors the bridge did not raise keep the one-level rule."""
    plugin_layer = _raised_from(
        ApplicationError(
            "Workflow failure exception in Agents Framework", type="AgentsWorkflowError"
        ),
        _activity_error(_ours("duplicate-effect")),
    )
    sdk_layer = _raised_from(RuntimeError("Error running tool pay"), _ours("tool-usage"))
    assert [
        error_kind(_ours("ambiguous-effect")),
        error_kind(_activity_error(_ours("tool-failed"))),
        error_kind(plugin_layer),
        error_kind(sdk_layer),
        error_kind(_activity_error(ApplicationError("boom", type="ValueError"))),
        error_kind(RuntimeError("not Temporal's")),
    ] == ["ambiguous-effect", "tool-failed", "duplicate-effect", "tool-usage", "ValueError", None]
