"""``Upstream``: one upstream MCP server, one connection per set of client capabilities.

An upstream may list (and run) some tools only for a client that declared sampling or
elicitation, and may ask a client only what it declared. So the gateway declares a
capability to an upstream only on a connection that serves clients that declared it:
one connection per distinct set of forwarded capabilities (of ``FORWARDED``: none,
elicitation, sampling, both). The one with none is opened at start (the check that the
upstream works); each other when the first client with that set arrives (over stdio
another process of the command, for a URL another connection); all close with the
gateway. Each has its own ``Relay`` and its own tool listing.

A connection is retired (``UpstreamSession.retire``) when a call on it stopped waiting
before the upstream answered (its relay refuses every question from then on) or it was
seen closed (a dead process): it takes no new call, the next client of its set opens a
fresh one (lazily, bounded by ``open_timeout``), and it is closed once its calls in
flight have ended (over stdio its process ends then), or with the gateway.

Opening one (the SDK's ``initialize``, then ``tools/list``) waits at most
``open_timeout`` seconds: an upstream that never answers would otherwise hold every
client with that set (they share one opening) forever. Every client waiting on a failed
opening gets the same ``UpstreamUnavailable``; the next request tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shlex
from collections.abc import Callable
from typing import Any

import mcp_types as types

from ...errors import ToolUsageError
from ._relay import FORWARDED, Relay

__all__ = [
    "DEFAULT_OPEN_TIMEOUT_S",
    "Upstream",
    "UpstreamSession",
    "UpstreamUnavailable",
    "leaf_error",
]

#: How long opening an upstream connection (initialize and tools/list) may take.
DEFAULT_OPEN_TIMEOUT_S = 30.0

#: No forwarded capability: what the gateway declares to its upstream at start.
NONE: frozenset[str] = frozenset()


class UpstreamSession:
    """One connection to the upstream: its client, relay, listing, and whether it closed."""

    def __init__(
        self,
        client: Any,
        relay: Relay | None,
        tools: dict[str, types.Tool] | None,
        capabilities: frozenset[str] | None,
        *,
        owner: Upstream | None = None,
    ) -> None:
        self.client = client
        self.relay = relay
        #: the upstream's tools/list to this connection by name; None: not known (a
        #: connection given by the caller, which serves every client)
        self.tools = tools
        #: what this connection declared (None: whatever its client was built with)
        self.capabilities = capabilities
        #: seen closed by a call (the next calls on it are never sent)
        self.closed = False
        #: retired (``retire``): takes no new calls, closed once ``calls`` is 0
        self.retired = False
        #: how many calls are in flight on it (``begin``/``end``)
        self.calls = 0
        #: set when it may close (retired with no call in flight, or the gateway closes)
        self.released = asyncio.Event()
        #: set once its connection is closed (over stdio: its process has ended)
        self.ended = asyncio.Event()
        self._owner = owner

    def lists(self, name: str) -> bool:
        return self.tools is None or name in self.tools

    def begin(self) -> None:
        """A call is sent on it (``end`` when it stopped waiting)."""
        self.calls += 1

    def end(self) -> None:
        self.calls -= 1
        if self.retired and self.calls <= 0:
            self.released.set()

    def retire(self) -> None:
        """No new call goes to this connection (a fresh one of its ``Upstream`` takes
        them); it closes once its calls in flight have ended. A no-op for a connection
        given by the caller (an entered ``mcp.Client``: it cannot be reopened)."""
        if self._owner is None or self.retired:
            return
        self.retired = True
        self._owner._retire(self)
        if self.calls <= 0:
            self.released.set()


class UpstreamUnavailable(Exception):
    """An upstream connection could not be opened (nothing was sent on it); the message
    names the upstream, the capability set and the real cause."""


def leaf_error(exc: BaseException) -> BaseException:
    """The error an exception group (anyio's task groups wrap one) stands for: its first
    leaf; any other error as it is."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _label(target: Any) -> str:
    # A command line for stdio parameters, a URL as it is.
    command = getattr(target, "command", None)
    if isinstance(command, str):
        return shlex.join([command, *(getattr(target, "args", None) or [])])
    return str(target)


def describe(capabilities: frozenset[str]) -> str:
    """``"sampling and elicitation"``-style words for a capability set (``"none"``)."""
    return " and ".join(sorted(capabilities)) or "none"


class Upstream:
    """An upstream MCP server reached by one ``mcp.Client`` per capability set.

    ``target`` is what ``mcp.Client`` takes (``StdioServerParameters``, a URL, ...);
    ``options`` are further ``mcp.Client`` keyword arguments (not its callbacks: each
    connection's relay supplies those). Use it as ``async with Upstream(target) as up``
    (which opens the connection that declares nothing, and fails as ``mcp.Client``
    fails when the upstream cannot be reached), then ``proxy(registry, up)``.
    ``open_timeout`` (seconds) bounds each connection's opening.
    """

    def __init__(
        self, target: Any, *, open_timeout: float = DEFAULT_OPEN_TIMEOUT_S, **options: Any
    ) -> None:
        if (
            isinstance(open_timeout, bool)
            or not isinstance(open_timeout, int | float)
            or not math.isfinite(open_timeout)
            or open_timeout <= 0
        ):
            raise ToolUsageError(
                f"open_timeout must be a positive number of seconds, not {open_timeout!r}"
            )
        self.open_timeout = float(open_timeout)
        self._target = target
        self._options = options
        self._sessions: dict[frozenset[str], UpstreamSession] = {}
        self._opening: dict[frozenset[str], asyncio.Future[UpstreamSession]] = {}
        #: each connection's task -> the future of its opening
        self._holders: dict[asyncio.Task[None], asyncio.Future[UpstreamSession]] = {}
        #: every connection open now, retired ones included (closed with the gateway)
        self._live: set[UpstreamSession] = set()
        self._closed = False
        self._listeners: list[Callable[[UpstreamSession], None]] = []

    async def __aenter__(self) -> Upstream:
        await self.session(NONE)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def on_open(self, listener: Callable[[UpstreamSession], None]) -> None:
        """Call ``listener`` with every connection opened from now on (before it is used)."""
        self._listeners.append(listener)

    def opened(self) -> list[UpstreamSession]:
        """The connections that take new calls now (not the retired ones)."""
        return list(self._sessions.values())

    def _retire(self, session: UpstreamSession) -> None:
        # The next client of its capability set opens a fresh connection.
        if session.capabilities is not None and self._sessions.get(session.capabilities) is session:
            del self._sessions[session.capabilities]

    async def session(self, capabilities: frozenset[str]) -> UpstreamSession:
        """The connection for clients that declared ``capabilities`` (opened if need be).

        Raises ``UpstreamUnavailable`` when it cannot be opened within ``open_timeout``
        (naming the cause; a later call tries again), and RuntimeError once the upstream
        is closed.
        """
        capabilities = frozenset(capabilities) & frozenset(FORWARDED)
        found = self._sessions.get(capabilities)
        if found is not None:
            return found
        if self._closed:
            raise RuntimeError("the upstream is closed")
        opening = self._opening.get(capabilities)
        if opening is None:
            opening = asyncio.get_running_loop().create_future()
            # (Retrieved even when every waiter went away: no "never retrieved" warning.)
            opening.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._opening[capabilities] = opening
            holder = asyncio.create_task(self._hold(capabilities, opening))
            self._holders[holder] = opening
            holder.add_done_callback(lambda task: self._holders.pop(task, None))
        # Shielded: a caller that gives up does not cut the connection short for others.
        return await asyncio.shield(opening)

    async def _hold(
        self, capabilities: frozenset[str], opening: asyncio.Future[UpstreamSession]
    ) -> None:
        # A task of its own per connection: the SDK's client runs a task group, which
        # must be left in the task that entered it (the gateway closes from another).
        relay = Relay()
        session: UpstreamSession | None = None
        options = {**self._options, **relay.client_options(capabilities)}
        try:
            from mcp import Client

            async with contextlib.AsyncExitStack() as stack:
                try:
                    async with asyncio.timeout(self.open_timeout):
                        client = await stack.enter_async_context(Client(self._target, **options))
                        listed = await client.list_tools()
                except TimeoutError:
                    raise self._unavailable(
                        capabilities,
                        f"no answer to initialize and tools/list within {self.open_timeout:g} s",
                    ) from None
                except Exception as exc:
                    cause = leaf_error(exc)
                    raise self._unavailable(
                        capabilities, f"{type(cause).__name__}: {cause}"
                    ) from cause
                session = UpstreamSession(
                    client, relay, {t.name: t for t in listed.tools}, capabilities, owner=self
                )
                self._live.add(session)
                if self._closed:
                    session.released.set()
                self._sessions[capabilities] = session
                for listener in self._listeners:
                    listener(session)
                opening.set_result(session)
                if self._opening.get(capabilities) is opening:
                    del self._opening[capabilities]  # (once retired, the next one opens)
                await session.released.wait()
        except asyncio.CancelledError:
            if not opening.done():
                opening.cancel()
            raise
        except BaseException as exc:
            if not opening.done():
                opening.set_exception(exc)
            # Otherwise the connection ended after it served: its calls saw it close.
        finally:
            if self._opening.get(capabilities) is opening:
                del self._opening[capabilities]  # (a failed open is tried again later)
            if session is not None:
                # Released, or its connection failed under it: never handed out again.
                session.retired = True
                self._retire(session)
                self._live.discard(session)
                session.ended.set()

    def _unavailable(self, capabilities: frozenset[str], why: str) -> UpstreamUnavailable:
        return UpstreamUnavailable(
            f"cannot open the upstream {_label(self._target)} for clients that declared "
            f"{describe(capabilities)}: {why}; nothing was sent, a later request tries again"
        )

    async def aclose(self) -> None:
        """Close every connection (each ends in the task that opened it)."""
        self._closed = True
        for session in list(self._live):
            session.released.set()
        holders = list(self._holders.items())
        for holder, opening in holders:
            if not opening.done():
                holder.cancel()  # still connecting: nothing to close gracefully
        if holders:
            await asyncio.gather(*(h for h, _ in holders), return_exceptions=True)
