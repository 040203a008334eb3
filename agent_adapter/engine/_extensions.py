"""The executor's extension points, typed: hooks, guards, the approval port, the store.

Protocols, not base classes (structlog's way): anything with the right methods plugs in.

- A **hook** has any of ``before_tool(call)``, ``after_tool(call, outcome)``,
  ``on_event(event)`` (sync or async) and ``around_body(call, next)``. ``Hook`` is the
  union of the four one-method protocols; the executor composes what each hook has,
  once, in ``Executor.__init__``.
- A **guard** is ``(call) -> None``, an **output guard** ``(call, result) -> None``,
  sync or async; it blocks by raising (``GuardrailBlocked``, or any error: fail closed).
- An **approval port** answers ``await decide(request)`` with a ``Decision`` (or a bool),
  or None / ``ApprovalPending`` to defer.
- A **store** is the ``Ledger`` protocol; the capabilities the executor uses beyond it
  are one protocol each (``Opens``, ``Keyed``, ``RecordReader``, ``Followable``,
  ``CatchUp``, ``AppendsNow``), each checked once (at construction or at ``start``),
  never per call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from ..ledger import Event, Follow, Ledger, Record

if TYPE_CHECKING:
    from ._approval import ApprovalRequest, Decision
    from ._context import Call, Outcome

__all__ = [
    "AfterTool",
    "AppendsNow",
    "ApprovalPort",
    "AroundBody",
    "BeforeTool",
    "CatchUp",
    "Followable",
    "Guard",
    "Hook",
    "Keyed",
    "OnEvent",
    "Opens",
    "OutputGuard",
    "RecordReader",
    "Store",
]


# -- hooks ------------------------------------------------------------------------------


@runtime_checkable
class BeforeTool(Protocol):
    """``before_tool(call)``: runs before the guards; raising stops the call (``call.blocked``)."""

    def before_tool(self, call: Call) -> Awaitable[None] | None: ...


@runtime_checkable
class AfterTool(Protocol):
    """``after_tool(call, outcome)``: sees every outcome of a call that reached its body;
    raising records ``hook.failed`` and the outcome stands."""

    def after_tool(self, call: Call, outcome: Outcome) -> Awaitable[None] | None: ...


@runtime_checkable
class OnEvent(Protocol):
    """``on_event(event)``: each event of this executor's calls once it is durable;
    raising records ``hook.failed``."""

    def on_event(self, event: Event) -> Awaitable[None] | None: ...


@runtime_checkable
class AroundBody(Protocol):
    """``around_body(call, next)``: wraps the tool body; ``await next()`` runs it (and the
    hooks inside this one) and gives its value. It runs in the call's task, in the body's
    context: a span or ContextVar set here is current inside the body. It must await
    ``next()`` once and return its value (or let its error through); what it raises
    instead is the body's failure (``call.failed``). Composed once per executor: the
    first hook given is the outermost, as temporalio's interceptors."""

    def around_body(self, call: Call, next: Callable[[], Awaitable[Any]]) -> Awaitable[Any]: ...


#: A hook: an object with any of the four hook methods.
Hook: TypeAlias = BeforeTool | AfterTool | OnEvent | AroundBody


# -- guards -----------------------------------------------------------------------------

#: An input guard: ``guard(call)``, sync or async; raises to block.
Guard: TypeAlias = Callable[["Call"], "Awaitable[None] | None"]
#: An output guard: ``guard(call, result)``, sync or async; raises to block.
OutputGuard: TypeAlias = Callable[["Call", Any], "Awaitable[None] | None"]


# -- approval ---------------------------------------------------------------------------


@runtime_checkable
class ApprovalPort(Protocol):
    """Anything with ``async decide(request) -> Decision | None``."""

    async def decide(self, request: ApprovalRequest) -> Decision | None: ...


# -- the store --------------------------------------------------------------------------

#: The store protocol: append-only, hash-chained (``agent_adapter.ledger.Ledger``).
Store = Ledger


@runtime_checkable
class Opens(Protocol):
    """A store with work to do before its first read (a file to open, a schema)."""

    async def open(self) -> None: ...


@runtime_checkable
class Keyed(Protocol):
    """A store that says whether its chain is keyed (HMAC), for replay's chain check."""

    @property
    def keyed(self) -> bool: ...


@runtime_checkable
class RecordReader(Protocol):
    """A store that gives its records with their stored bytes (replay checks each hash)."""

    def read_records(self, after: int = 0) -> AsyncIterator[Record]: ...


@runtime_checkable
class Followable(Protocol):
    """A store that hands each follower the others' events at each commit and settles
    effect claims between them (``agent_adapter.ledger.Follow``)."""

    def follow(self, apply: Callable[[Event], None], after: int) -> Follow: ...

    @property
    def followed(self) -> bool: ...


@runtime_checkable
class CatchUp(Protocol):
    """A store other processes append to: ``catch_up()`` folds what they committed."""

    async def catch_up(self) -> None: ...


@runtime_checkable
class AppendsNow(Protocol):
    """A store that can store a batch without suspending (``MemoryLedger``)."""

    def append_now(self, events: Sequence[Event]) -> None: ...
