"""``ToolActivities``: the executor as two Temporal activities, ``prepare`` and ``run``.

Temporal runs an activity at least once: a worker lost after a refund and before it
reported the result runs the refund again. ``run`` closes that gap with the executor's
step 0: the call's ids, ``(workflow_id, call_id)``, are the same on every attempt and
every replay, so a retry after a committed outcome is answered from the ledger
(``call.replayed``) and one after a started body with no outcome is refused as
ambiguous, never run twice.

One refusal is worth retrying: ``effect-in-flight`` (another call holds the effect key
and its holder is alive). A call id keeps its one outcome, so a retry under the same id
would only replay that refusal; each retry therefore asks under the next id of the walk
``<call_id>``, ``<call_id>#2``, ``<call_id>#3``, ... (see ``_answering_id``), and the
effect key keeps the effect at most once across all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ...engine import CallContext, Decision, Executor, ToolSpec
from ...errors import (
    MODEL_VISIBLE_KINDS,
    AdapterError,
    ApprovalPending,
    EffectInFlight,
    LedgerError,
    ToolUsageError,
)
from ...ledger import CallAmbiguous, CallRequested, Ledger
from ._shapes import NAME, PREPARE, RUN, Prepared, PrepareInput, RunInput, ToolResult

__all__ = ["ToolActivities", "error_data"]

#: Kinds Temporal may retry. ``ledger``: the store failed, and the next attempt goes
#: through step 0, which never runs a started body again. ``effect-in-flight``: a live
#: holder has the key; the next attempt asks under a new call id (``_answering_id``) and
#: gets the key's fate once the holder has finished (committed: ``duplicate-effect``;
#: freed: the call runs; holder dead: ``ambiguous-effect``), never a second effect.
_RETRYABLE = frozenset({LedgerError.kind, EffectInFlight.kind})
#: ``call.requested`` metadata of a call asked under a suffixed id: the workflow's call
#: id it retries. It tells the walk which suffixed ids are that call's.
_RETRY_OF = "retry_of"


def error_data(error: AdapterError) -> dict[str, Any]:
    """A model-visible error as data: ``{"kind", "message"}`` (and ``request_id`` when
    the call waits for a deferred approval)."""
    data: dict[str, Any] = error.to_dict()
    if isinstance(error, ApprovalPending) and error.request_id:
        data["request_id"] = error.request_id
    return data


def _host_error(error: AdapterError, ledger_call_id: str = "") -> ApplicationError:
    """The ``ApplicationError`` a workflow sees for a kind the model is not shown.

    Typed by the error's ``kind`` (any kind, also one added later), so the workflow tells
    them apart by ``ActivityError.cause.type``. Non-retryable: a refusal (duplicate,
    ambiguous, ...) or a programming error gives the same answer on every attempt, and
    retrying an ambiguous effect is exactly the repeat the executor exists to prevent.
    The kinds in ``_RETRYABLE`` are the exceptions (a failed store; a key in flight).
    ``ledger_call_id`` (in the details when given) is the call id the ledger recorded
    this answer under; ``call_id`` there names the call that holds or committed the key.
    """
    details: dict[str, Any] = error.to_dict()
    for field in ("key", "run_id", "call_id", "same_args"):
        value = getattr(error, field, None)
        if value is not None and value != "":
            details[field] = value
    if ledger_call_id:
        details["ledger_call_id"] = ledger_call_id
    return ApplicationError(
        f"{error.kind}: {error.message}",
        details,
        type=error.kind,
        non_retryable=error.kind not in _RETRYABLE,
    )


async def _answering_id(ledger: Ledger, run_id: str, call_id: str) -> tuple[str, bool]:
    """The call id this attempt asks under, and whether the ledger knew that call.

    The walk is ``call_id``, ``call_id#2``, ``call_id#3``, ...: the first id of this call
    whose recorded outcome is not an in-flight refusal (``call.ambiguous`` with
    ``in_flight``), or that has no record yet. So a retry after a real outcome (or a
    started body) asks under that outcome's id and step 0 answers it as before, and a
    retry after an in-flight refusal asks under a fresh id instead of replaying the
    refusal forever. A suffixed id is this call's only if its ``call.requested`` names
    ``call_id`` as ``retry_of`` (the workflow's own id only if it names none): an id that
    the workflow used for another call is stepped over, never answered from.
    """
    n = 1
    while True:
        candidate = call_id if n == 1 else f"{call_id}#{n}"
        requested: CallRequested | None = None
        refused = False
        async for event in ledger.read(run_id=run_id, call_id=candidate):
            if requested is None and isinstance(event, CallRequested):
                requested = event
            elif event.is_outcome:
                refused = isinstance(event, CallAmbiguous) and event.in_flight
                break
        if requested is None:
            return candidate, n > 1
        owner = requested.metadata.get(_RETRY_OF)
        if owner == (call_id if n > 1 else None) and not refused:
            return candidate, True
        n += 1


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
        ctx = CallContext(
            run_id=activity.info().workflow_id or "",
            call_id=request.call_id,
            metadata={"integration": NAME},
        )
        # The engine's one decision (the confirm rule the run's step 6 asks again).
        prepared = await self.executor.prepare(spec, request.args, ctx)
        if not prepared.ok:  # tool-args-invalid: shown to the model
            assert prepared.error is not None
            return Prepared(
                tool=spec.name, call_id=request.call_id, error=error_data(prepared.error)
            )
        return Prepared(
            tool=spec.name,
            call_id=request.call_id,
            digest=prepared.digest,
            needs_approval=prepared.needs_approval,
            args=prepared.shown_args,
        )

    @activity.defn(name=RUN)
    async def run(self, request: RunInput) -> ToolResult:
        """Run one call through ``run_spec``; model-visible refusals come back as data.

        Every other ``AdapterError`` is raised as an ``ApplicationError`` whose ``type``
        is its kind, non-retryable except ``ledger`` and ``effect-in-flight`` (see
        ``_host_error``). A retry is asked under the id ``_answering_id`` picks (the
        workflow's call id unless an earlier attempt was refused in flight); the result
        and the error's details name it as ``ledger_call_id``. On a retry the executor
        first folds what other workers committed, so that step 0 sees an earlier
        attempt's outcome even when another process recorded it.
        """
        info = activity.info()
        executor = self.executor
        run_id = info.workflow_id or ""
        try:
            spec = self._spec(request.tool)
            decision = None if request.decision is None else Decision(**request.decision)
        except TypeError as exc:  # a decision dict with fields Decision does not have
            raise _host_error(ToolUsageError(f"the decision carried is malformed: {exc}")) from exc
        except AdapterError as exc:
            raise _host_error(exc) from exc
        call_id, known = request.call_id, False
        try:
            # A first attempt of a plain id is asked as it is, with no read: a walk's id
            # always has a "#", and an in-flight refusal replayed under a plain id (a
            # workflow asking again under a refused id) is retryable, so the next attempt
            # walks on. A read by call id costs more as the ledger grows.
            if info.attempt > 1 or "#" in call_id:
                call_id, known = await _answering_id(executor.ledger, run_id, call_id)
            if info.attempt > 1 or known:
                catch_up = getattr(executor.ledger, "catch_up", None)
                if catch_up is not None:
                    await catch_up()
        except AdapterError as exc:  # LedgerError: retryable
            raise _host_error(exc) from exc
        metadata: dict[str, Any] = {
            "integration": NAME,
            "workflow_run_id": info.workflow_run_id or "",
            "activity_id": info.activity_id,
            "attempt": info.attempt,
        }
        if call_id != request.call_id:
            metadata[_RETRY_OF] = request.call_id
        # The decision carried is bound to the digest, not to the call id, so it applies
        # under a suffixed id too: the same arguments the reviewer approved, and the
        # effect key still lets them take effect once.
        ctx = CallContext(run_id=run_id, call_id=call_id, approval=decision, metadata=metadata)
        try:
            value = await executor.run_spec(spec, request.args, ctx)
        except AdapterError as exc:
            if exc.kind in MODEL_VISIBLE_KINDS:
                return ToolResult(error=error_data(exc), ledger_call_id=call_id)
            raise _host_error(exc, call_id) from exc
        return ToolResult(value=msgspec.to_builtins(value), ledger_call_id=call_id)
