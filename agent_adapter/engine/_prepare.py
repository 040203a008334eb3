"""The bridge contract's one decision point: what a call would be, recorded nowhere.

A bridge that must ask a person through its own framework (an MCP elicitation, a
LangGraph interrupt, a Temporal gate, the OpenAI Agents SDK's approval pause) needs to
know, before the call runs, whether the call needs approval, which digest an answer binds
to and what the reviewer may be shown. ``prepare`` answers that with the same code the
executor runs in step 6 (``approval_needed``), so a bridge cannot drift from the engine:
the confirm rule exists once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import ToolArgsInvalid
from ..ledger import IN_FLIGHT
from ._approval import effect_notice
from ._context import Call, CallContext
from ._redaction import redacted, restored
from ._run import _maybe_await, _validated
from ._spec import MAX_ARGS_DEPTH, ToolSpec, json_problem

__all__ = ["Prepared", "approval_needed", "prepare"]


async def approval_needed(spec: ToolSpec, call: Call, ctx: CallContext) -> bool:
    """Whether ``spec.confirm`` requires approval for ``call``: the one confirm rule.

    ``False`` and ``True`` answer themselves; a rule ``(call, ctx) -> bool`` (sync or
    async) is asked, and a rule that raises requires approval (fail closed: a broken rule
    never lets a call through unasked).
    """
    confirm = spec.confirm
    if confirm is False:
        return False
    if confirm is True:
        return True
    try:
        return bool(await _maybe_await(confirm(call, ctx)))
    except Exception:
        return True


class Prepared:
    """What ``Executor.prepare`` found for one call; nothing of it is recorded.

    ``ok`` is False for arguments that do not validate (``error`` is the
    ``ToolArgsInvalid``; such a call is never sent for approval, and running it records
    ``call.invalid``). Otherwise ``args`` are the validated arguments, ``digest`` their
    digest (an approval binds to it), ``needs_approval`` the confirm rule's answer,
    ``shown_args`` what a reviewer may see (redactions applied), ``effect_key`` the
    rendered key (None without one, or when the template cannot be rendered: the call
    records that failure itself), ``effect_notice`` the sentence a reviewer must read when
    the key is not free (``""`` when it is) and ``effect_state``, ``effect_by_run_id``,
    ``effect_by_call_id`` the key's state and holder as the executor knows them then (None
    and ``""`` for a free key: the fields of an ``ApprovalRequest``), ``json_schema`` the
    tool's schema. ``recorded`` is True when this (run, call) is already on record (an
    outcome, or a call that started and has none): ``run_spec`` answers it from the ledger
    (pipeline step 0) without asking anyone, so a bridge need not ask its reviewer again.
    """

    __slots__ = (
        "args",
        "digest",
        "effect_by_call_id",
        "effect_by_run_id",
        "effect_key",
        "effect_notice",
        "effect_state",
        "error",
        "json_schema",
        "needs_approval",
        "recorded",
        "shown_args",
        "spec",
    )

    def __init__(
        self,
        spec: ToolSpec,
        *,
        args: dict[str, Any] | None = None,
        digest: str = "",
        needs_approval: bool = False,
        effect_key: str | None = None,
        effect_notice: str = "",
        effect_state: str | None = None,
        effect_by_run_id: str = "",
        effect_by_call_id: str = "",
        error: ToolArgsInvalid | None = None,
        recorded: bool = False,
    ) -> None:
        self.spec = spec
        self.args: dict[str, Any] = args if args is not None else {}
        self.digest = digest
        self.needs_approval = needs_approval
        self.shown_args: Any = msgspec.to_builtins(redacted(self.args, spec.redact))
        self.effect_key = effect_key
        self.effect_notice = effect_notice
        self.effect_state = effect_state
        self.effect_by_run_id = effect_by_run_id
        self.effect_by_call_id = effect_by_call_id
        self.recorded = recorded
        self.json_schema: dict[str, Any] = spec.json_schema
        self.error = error

    @property
    def ok(self) -> bool:
        """True when the arguments validated (``error`` is None)."""
        return self.error is None

    @property
    def tool(self) -> str:
        """The tool's name."""
        return self.spec.name

    def check_edit(self, edits: Any) -> str | None:
        """None when ``edits`` (complete replacement arguments) would validate, else why not.

        The tool's own validator decides, as it will when the edited call runs; a value
        left as shown at a redacted path (``"[redacted]"``) stands for the requested value.
        """
        if not isinstance(edits, Mapping):
            return f"edits must be an object of arguments, not {type(edits).__name__}"
        problem = json_problem(edits, MAX_ARGS_DEPTH)
        if problem is not None:
            return f"the edited arguments must not {problem}"
        spec = self.spec
        edits = dict(edits)
        if spec.redact and self.ok:
            edits = restored(edits, self.args, spec.redact)
        try:
            _validated(spec, edits)
        except ToolArgsInvalid as exc:
            return str(exc)
        return None

    def __repr__(self) -> str:
        if not self.ok:
            return f"Prepared({self.tool!r}, error={self.error!r})"
        return (
            f"Prepared({self.tool!r}, digest={self.digest[:12]!r}..., "
            f"needs_approval={self.needs_approval}, effect_key={self.effect_key!r})"
        )


async def prepare(
    spec: ToolSpec,
    args: Any,
    ctx: CallContext,
    effects: Mapping[str, Any],
    *,
    recorded: bool = False,
    now: float = 0.0,
    margin_s: float = 0.0,
) -> Prepared:
    """Validate and digest ``args`` for ``spec``, ask the confirm rule, read the key's state.

    ``effects`` is the executor's effect-key state (``EffectState`` by key), read as at
    ``now`` (with the executor's clock skew margin); ``recorded`` whether the executor has
    this (run, call) on record already. Records nothing and runs no hook, guard or body.
    """
    try:
        validated, call_digest = _validated(spec, args)
    except ToolArgsInvalid as exc:
        return Prepared(spec, error=exc, recorded=recorded)
    try:
        key = spec.effect_key(validated)
    except Exception:
        key = None  # the executor records the template's failure when the call runs
    if key is not None and not isinstance(key, str):
        key = None
    notice = ""
    status: str | None = None
    held = effects.get(key) if key is not None else None
    if held is not None:
        # As a reader at ``now`` sees it: a claim whose lease ran out is ambiguous (its
        # holder died), a live one still held ("claimed", whatever its lease).
        status = held.status_at(now, margin_s) if now else held.status
        if status == IN_FLIGHT:
            status = "claimed"
        notice = effect_notice(key, status, held.run_id, held.call_id) or ""
    call = Call(
        tool=spec.name, spec=spec, args=validated, digest=call_digest, ctx=ctx, effect_key=key
    )
    return Prepared(
        spec,
        args=validated,
        digest=call_digest,
        needs_approval=await approval_needed(spec, call, ctx),
        effect_key=key,
        effect_notice=notice,
        effect_state=status,
        effect_by_run_id="" if held is None else held.run_id,
        effect_by_call_id="" if held is None else held.call_id,
        recorded=recorded,
    )
