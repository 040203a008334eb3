"""``ToolActivities``: the executor as two Temporal activities, ``prepare`` and ``run``.

Temporal runs an activity at least once: a worker lost after a refund and before it
reported the result runs the refund again. ``run`` closes that gap with the executor's
step 0: the call's ids, ``(workflow_id, call_id)``, are the same on every attempt and
every replay, so a retry after a committed outcome is answered from the ledger
(``call.replayed``) and one after a started body with no outcome is refused as
ambiguous, never run twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ...engine import Call, CallContext, Decision, Executor, ToolSpec
from ...engine._redaction import redacted
from ...engine._run import _validated
from ...errors import (
    MODEL_VISIBLE_KINDS,
    AdapterError,
    ApprovalPending,
    LedgerError,
    ToolUsageError,
)
from ._shapes import NAME, PREPARE, RUN, Prepared, PrepareInput, RunInput, ToolResult

__all__ = ["ToolActivities", "error_data"]


def error_data(error: AdapterError) -> dict[str, Any]:
    """A model-visible error as data: ``{"kind", "message"}`` (and ``request_id`` when
    the call waits for a deferred approval)."""
    data: dict[str, Any] = error.to_dict()
    if isinstance(error, ApprovalPending) and error.request_id:
        data["request_id"] = error.request_id
    return data


def _host_error(error: AdapterError) -> ApplicationError:
    """The ``ApplicationError`` a workflow sees for a kind the model is not shown.

    Typed by the error's ``kind`` (any kind, also one added later), so the workflow tells
    them apart by ``ActivityError.cause.type``. Non-retryable: a refusal (duplicate,
    ambiguous, ...) or a programming error gives the same answer on every attempt, and
    retrying an ambiguous effect is exactly the repeat the executor exists to prevent.
    A ``LedgerError`` (the store failed) is the one exception: retrying is safe, because
    the next attempt goes through step 0, which never runs a started body again.
    """
    details: dict[str, Any] = error.to_dict()
    for field in ("key", "run_id", "call_id", "same_args"):
        value = getattr(error, field, None)
        if value is not None and value != "":
            details[field] = value
    return ApplicationError(
        f"{error.kind}: {error.message}",
        details,
        type=error.kind,
        non_retryable=not isinstance(error, LedgerError),
    )


class ToolActivities:
    """The executor's registry tools as two activities to register on a ``Worker``.

    ``Worker(client, task_queue=..., workflows=[...], activities=ToolActivities(ex).activities)``.
    ``"agent_adapter.prepare"`` validates and digests a call and says whether it needs
    approval (it records nothing); ``"agent_adapter.run"`` runs it through
    ``executor.run_spec`` with ``run_id`` = the workflow id and ``call_id`` = the
    workflow's call id. Only tools exported to ``"temporal"`` (``Registry.tool(targets=)``)
    can be called. One executor serves every activity of the worker: open it on the ledger
    the workers share (``await Executor.open(registry, ledger=SQLiteLedger(path))``).
    """

    def __init__(self, executor: Executor) -> None:
        if not isinstance(executor, Executor):
            raise ToolUsageError(
                "ToolActivities takes an Executor (await Executor.open(registry, ledger=...)), "
                f"not {type(executor).__name__}"
            )
        self.executor = executor

    @property
    def activities(self) -> Sequence[Callable[..., Any]]:
        """The two activities, ``prepare`` and ``run``, for ``Worker(activities=...)``."""
        return (self.prepare, self.run)

    def _spec(self, tool: str) -> ToolSpec:
        spec = self.executor.registry.get(tool)
        if not spec.exported_to(NAME):
            raise ToolUsageError(f"tool {tool!r} is not exported to temporal (see its targets)")
        return spec

    @activity.defn(name=PREPARE)
    async def prepare(self, request: PrepareInput) -> Prepared:
        """Validate and digest one call; say whether it needs approval. Records nothing.

        Invalid arguments come back as ``error`` (tool-args-invalid) and are never sent
        for approval; ``run`` records them as ``call.invalid``. A confirm rule is asked
        with a ``Call`` like the executor's, and one that fails asks (fail closed); the
        executor asks the rule again when the call runs.
        """
        try:
            spec = self._spec(request.tool)
        except AdapterError as exc:
            raise _host_error(exc) from exc
        try:
            args, args_digest = _validated(spec, request.args)
        except AdapterError as exc:  # tool-args-invalid: shown to the model
            return Prepared(tool=spec.name, call_id=request.call_id, error=error_data(exc))
        return Prepared(
            tool=spec.name,
            call_id=request.call_id,
            digest=args_digest,
            needs_approval=await self._needs_approval(spec, args, args_digest, request.call_id),
            args=msgspec.to_builtins(redacted(args, spec.redact)),
        )

    async def _needs_approval(
        self, spec: ToolSpec, args: dict[str, Any], args_digest: str, call_id: str
    ) -> bool:
        confirm = spec.confirm
        if confirm is False or confirm is True:
            return confirm
        ctx = CallContext(
            run_id=activity.info().workflow_id or "",
            call_id=call_id,
            metadata={"integration": NAME},
        )
        call = Call(tool=spec.name, spec=spec, args=args, digest=args_digest, ctx=ctx)
        try:
            answer = confirm(call, ctx)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception:
            return True
        return bool(answer)

    @activity.defn(name=RUN)
    async def run(self, request: RunInput) -> ToolResult:
        """Run one call through ``run_spec``; model-visible refusals come back as data.

        Every other ``AdapterError`` is raised as a non-retryable ``ApplicationError``
        whose ``type`` is its kind (see ``_host_error``). On a retry the executor first
        folds what other workers committed, so that step 0 sees the earlier attempt's
        outcome even when another process recorded it.
        """
        info = activity.info()
        executor = self.executor
        if info.attempt > 1:
            catch_up = getattr(executor.ledger, "catch_up", None)
            if catch_up is not None:
                await catch_up()
        try:
            spec = self._spec(request.tool)
            decision = None if request.decision is None else Decision(**request.decision)
        except TypeError as exc:  # a decision dict with fields Decision does not have
            raise _host_error(ToolUsageError(f"the decision carried is malformed: {exc}")) from exc
        except AdapterError as exc:
            raise _host_error(exc) from exc
        ctx = CallContext(
            run_id=info.workflow_id or "",
            call_id=request.call_id,
            approval=decision,
            metadata={
                "integration": NAME,
                "workflow_run_id": info.workflow_run_id or "",
                "activity_id": info.activity_id,
                "attempt": info.attempt,
            },
        )
        try:
            value = await executor.run_spec(spec, request.args, ctx)
        except AdapterError as exc:
            if exc.kind in MODEL_VISIBLE_KINDS:
                return ToolResult(error=error_data(exc))
            raise _host_error(exc) from exc
        return ToolResult(value=msgspec.to_builtins(value))
