"""``agent-adapter mcp serve``: the MCP gateway over stdio or streamable HTTP, on a ledger.

stdout is the protocol channel over stdio: this module writes nothing to ``out`` then,
and every message (the address served, errors) goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import ipaddress
import os
import shlex
import socket
import sys
import uuid
from pathlib import Path
from typing import IO, Any

from ..engine import DeferredApproval, Executor, Registry
from ..errors import AdapterError, ToolUsageError
from ._logging import log_hooks
from ._opening import CliError, check_ledger_file, read_key

__all__ = ["cmd_mcp_serve", "parse_http", "load_tools"]

_LOOPBACK = "127.0.0.1"


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; ``:PORT`` or ``PORT`` for loopback)."""
    host, sep, port_text = value.rpartition(":")
    if not sep:
        host, port_text = "", value
    host = host.strip("[]") or _LOOPBACK
    try:
        port = int(port_text)
    except ValueError:
        raise CliError(f"--http {value}: expected HOST:PORT, e.g. 127.0.0.1:8765") from None
    if not 0 <= port <= 65535:
        raise CliError(f"--http {value}: the port must be 0 to 65535")
    return host, port


def load_tools(target: str) -> Registry:
    """The ``Registry`` named by ``MODULE:ATTR`` (the current directory is importable)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"--tools {target}: expected MODULE:ATTR, e.g. myapp.tools:registry")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: the project's own modules
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise CliError(
            f"--tools {target}: cannot import {module_name}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        registry = getattr(module, attr)
    except AttributeError:
        raise CliError(f"--tools {target}: {module_name} has no attribute {attr!r}") from None
    if not isinstance(registry, Registry):
        raise CliError(f"--tools {target}: {attr} is a {type(registry).__name__}, not a Registry")
    return registry


def _say(text: str) -> None:
    print(f"agent-adapter: {text}", file=sys.stderr, flush=True)


def _ledger_path(args: argparse.Namespace) -> Path:
    path = Path(args.db)
    # The gateway writes: a new file becomes a ledger; an existing one must be a ledger.
    if os.path.lexists(path):
        check_ledger_file(path, write=True)
    return path


async def _open_ledger(args: argparse.Namespace) -> Any:
    from ..ledger import SQLiteLedger

    path = _ledger_path(args)
    ledger = SQLiteLedger(str(path), key=read_key(args.key_file), busy_timeout_s=args.lock_timeout)
    await ledger.open()
    return ledger


async def cmd_mcp_serve(args: argparse.Namespace, out: IO[str]) -> int:
    """Serve the registry (and an upstream's tools) as an MCP server until the client leaves."""
    try:
        from mcp import StdioServerParameters

        from ..bridges.mcp import (
            Upstream,
            UpstreamUnavailable,
            drain,
            load_policy,
            mcp_server,
            proxy,
        )
    except ImportError as exc:
        raise CliError(
            f"mcp serve needs the mcp extra ({exc}); install it with: "
            "pip install 'agent-adapter[mcp]'"
        ) from None
    if args.policy and not (args.upstream or args.upstream_url):
        raise CliError("--policy names upstream tools: pass --upstream or --upstream-url too")
    opening: dict[str, float] = {}
    if args.upstream_open_timeout is not None:  # (positive and finite: its parser type)
        opening["open_timeout"] = args.upstream_open_timeout
    http = parse_http(args.http) if args.http else None
    registry = load_tools(args.tools) if args.tools else Registry()
    policy = load_policy(args.policy) if args.policy else None
    upstream_argv: list[str] = []
    if args.upstream:
        try:
            upstream_argv = shlex.split(args.upstream)
        except ValueError as exc:
            raise CliError(f"--upstream: {exc}") from None
        if not upstream_argv:
            raise CliError("--upstream: the command is empty")
    if not upstream_argv and not args.upstream_url and not _exports(registry):
        raise CliError("no tools to serve: pass --tools MODULE:ATTR or an upstream")
    ledger = await _open_ledger(args)
    try:
        executor = await Executor.open(
            registry,
            ledger=ledger,
            approval=DeferredApproval(ledger),
            hooks=log_hooks(args.logging),
        )
        async with _ungrouped(), contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(executor.close)
            if upstream_argv or args.upstream_url:
                target: Any = (
                    StdioServerParameters(command=upstream_argv[0], args=upstream_argv[1:])
                    if upstream_argv
                    else args.upstream_url
                )
                what = args.upstream or args.upstream_url
                # One upstream connection per set of capabilities the clients declared
                # (the one with none now: the check that the upstream works); its
                # elicitation, sampling and log messages go to the client it serves.
                try:
                    upstream = await stack.enter_async_context(Upstream(target, **opening))
                except UpstreamUnavailable as exc:
                    raise CliError(str(exc)) from None  # (it names the upstream and why)
                except Exception as exc:
                    raise CliError(f"cannot reach the upstream {what}: {_reason(exc)}") from None
                try:
                    await proxy(registry, upstream, prefix=args.prefix, policy=policy)
                except (ToolUsageError, CliError):
                    raise
                except Exception as exc:
                    # (A policy's capability sets are opened at start too.)
                    raise CliError(f"cannot reach the upstream {what}: {_reason(exc)}") from None
            if not _exports(registry):
                raise CliError("no tools to serve: pass --tools MODULE:ATTR or an upstream")
            # Over stdio the process has exactly one client (the host that started it): its
            # calls are one run, so the next identical call after an out-of-band answer
            # finds the decision. Over HTTP clients share the process: a run per call.
            run_id = args.run_id or (None if http else f"mcp-serve-{uuid.uuid4().hex[:12]}")
            server = mcp_server(
                registry,
                executor=executor,
                name=args.name,
                elicit=args.elicit,
                default_run_id=run_id,
            )
            try:
                if http is None:
                    await _serve_stdio(server)
                else:
                    await _serve_http(server, *http)
            finally:
                await drain(server)  # every call that started records its outcome
    finally:
        with contextlib.suppress(Exception):
            await ledger.close()
    return 0


@contextlib.asynccontextmanager
async def _ungrouped() -> Any:
    """Our own error out of the exception groups anyio's task groups wrap it in.

    The upstream client runs a task group: a refusal raised inside it (a name collision,
    a bad policy) would otherwise reach ``main`` as a group and print a traceback.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if isinstance(leaf, CliError | AdapterError | OSError | KeyboardInterrupt):
            raise leaf from None
        raise


def _exports(registry: Registry) -> bool:
    return any(spec.exported_to("mcp") for spec in registry)


def _reason(exc: BaseException) -> str:
    from ..bridges.mcp import UpstreamUnavailable

    # anyio wraps a failure to connect in exception groups: the first leaf says why.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, UpstreamUnavailable):
        return str(exc)  # (a policy's capability set that could not open: names why)
    return f"{type(exc).__name__}: {exc}"


async def _serve_stdio(server: Any) -> None:
    from mcp.server.stdio import stdio_server

    from ..bridges.mcp import answering

    async with stdio_server() as (read, write):
        # The SDK drops a line it cannot parse without a word: answered here instead.
        await server.run(answering(read, write), write, server.create_initialization_options())


async def _serve_http(server: Any, host: str, port: int) -> None:
    import uvicorn

    family = socket.AF_INET6 if _is_v6(host) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CliError(f"--http {host}:{port}: cannot listen: {exc.strerror or exc}") from None
    # Listening before the address is announced: a client that connects at once waits in
    # the backlog instead of being refused.
    sock.listen(128)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    from ..bridges.mcp import answering_http

    # The SDK answers a body it cannot read as -32602 with id null: answered as the spec
    # says instead (and invalid arguments reach the gateway, to be recorded).
    app = answering_http(server.streamable_http_app(host=host))
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    _say(f"serving MCP on http://{shown}:{bound}/mcp")
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()


def _is_v6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).version == 6
    except ValueError:
        return False
