"""``ExecutorToolset``: the registry's tools as a pydantic-ai toolset run by the executor."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.tools import DeferredToolRequests, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

from ...engine import ApprovalPort, Executor, Registry, TokenTable, ToolSpec, get_default_executor
from ...errors import AdapterError, ToolUsageError
from ._arguments import PassThrough, model_args
from ._deferred import Review, resolve
from ._errors import refusal
from ._integration import META_KEY, NAME, call_context, check_framework, ids_of

__all__ = ["ExecutorToolset"]

_PASS_THROUGH = PassThrough()


class ExecutorToolset(AbstractToolset[Any]):
    """The tools of ``registry`` whose ``targets`` include ``"pydantic_ai"``, run by ``executor``.

    Each tool advertises the registry's JSON schema; pydantic-ai's own validation is
    bypassed (the executor validates, and records malformed JSON as ``call.invalid``).
    ``run_id`` is the run's ``conversation_id``, ``call_id`` the tool call id. A call that
    needs approval and holds no approval token ends the run with ``DeferredToolRequests``
    (give the agent ``output_type=[..., DeferredToolRequests]``); the digest, the shown
    arguments and the ids are in ``requests.metadata[tool_call_id]["agent_adapter"]``.
    Answer with :meth:`resolve_deferred` and resume with its ``results``.

    ``executor=None`` uses the default executor; ``id`` is the toolset's pydantic-ai id
    (needed for durable execution). The tools are read from ``registry`` once, here.
    Approval tokens live in this toolset for ``token_ttl_s`` seconds: resolve and resume
    with the same toolset, in the same process. Raises IntegrationError for a pydantic-ai
    outside 2.60 to below 3.
    """

    def __init__(
        self,
        registry: Registry,
        *,
        executor: Executor | None = None,
        id: str | None = None,
        token_capacity: int = 4096,
        token_ttl_s: float = 60.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        check_framework()
        if not isinstance(registry, Registry):
            raise ToolUsageError(f"ExecutorToolset takes a Registry, not {type(registry).__name__}")
        self.registry = registry
        self.executor = executor if executor is not None else get_default_executor()
        self._id = id
        #: One-use approvals ``resolve_deferred`` issued, keyed (conversation, call, tool).
        self.tokens = TokenTable(capacity=token_capacity, ttl_s=token_ttl_s, clock=clock)
        self.specs: dict[str, ToolSpec] = {
            spec.name: spec for spec in registry if spec.exported_to(NAME)
        }
        # Built once: the per-step listing hands out the same definitions.
        self._tools: dict[str, ToolsetTool[Any]] = {
            name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=name,
                    description=spec.description or None,
                    parameters_json_schema=copy.deepcopy(spec.json_schema),
                ),
                # 0: a refusal is never turned into "please try again" by the framework;
                # the executor's refusals reach the model as tool failures instead.
                max_retries=0,
                args_validator=_PASS_THROUGH,
            )
            for name, spec in self.specs.items()
        }

    @property
    def id(self) -> str | None:
        """The id given at construction (None: pydantic-ai's default handling)."""
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The exported tools, with the registry's schemas."""
        return dict(self._tools)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Run one call through the executor; refusals as the bridge's table says.

        Raises ``ApprovalRequired`` (the run pauses) for a call that needs approval when
        pydantic-ai has not marked it approved; an approved call carries the toolset's
        token for it, if any (without one, the executor's own port decides).
        """
        spec = self.specs.get(name)
        if spec is None:
            raise ToolUsageError(f"{name!r} is not a tool of this toolset")
        run_id, call_id = ids_of(ctx)
        args = model_args(tool_args)
        approval = None
        if spec.confirm is not False:
            if ctx.tool_call_approved:
                # pydantic-ai's flag only says that someone answered ToolApproved(); the
                # approval itself is the token resolve_deferred issued after the port said
                # yes (bound to the digest: other arguments get no approval from it).
                approval = self.tokens.take((run_id, call_id, name))
            else:
                prepared = await self.executor.prepare(spec, args, call_context(run_id, call_id))
                if prepared.ok and prepared.needs_approval:
                    raise ApprovalRequired(
                        metadata={
                            META_KEY: {
                                "tool": name,
                                "run_id": run_id,
                                "call_id": call_id,
                                "digest": prepared.digest,
                                "args": prepared.shown_args,
                                "effect_notice": prepared.effect_notice,
                            }
                        }
                    )
        try:
            return await self.executor.run_spec(spec, args, call_context(run_id, call_id, approval))
        except AdapterError as exc:
            return refusal(exc)

    async def resolve_deferred(
        self, requests: DeferredToolRequests, port: ApprovalPort, *, run_id: str | None = None
    ) -> Review:
        """Ask ``port`` about each paused call of this toolset; the results to resume with.

        The port sees the validated arguments (``ApprovalRequest`` with
        ``metadata={"integration": "pydantic_ai"}``). An approval becomes a one-use token
        in this toolset (``ToolApproved()`` in ``review.results``; edits travel in the
        token); a denial is recorded (``call.denied``, nothing runs) and answered with
        ``ToolDenied`` carrying the JSON error; a call a deferred port holds open is in
        ``review.pending`` and not in the results; a call the ledger shows started or
        finished is not asked about again. ``run_id`` defaults to the conversation
        id recorded in each request's metadata. Calls of other toolsets are left to the
        host (add their answers to ``review.results`` before resuming).
        """
        return await resolve(self.executor, self.specs, self.tokens, requests, port, run_id)

    def __repr__(self) -> str:
        return f"ExecutorToolset({sorted(self.specs)!r}, id={self._id!r})"
