"""Running the server: stdio for one local agent, streamable HTTP for a shared service."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from hindsight_core.settings import Settings
from hindsight_core.storage.embedded import exit_on_signals
from hindsight_core.warmup import Warmup

from .._grants import Grant, stdio_grant
from ._auth import BearerNamespaceMiddleware, BodyLimitMiddleware, check_bind, load_tokens
from ._busy import BusyStatusMiddleware
from ._jsonrpc import JsonRpcGuardMiddleware
from ._pending import PendingMemory
from .server import build_server

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from hindsight_core import AsyncMemory
    from hindsight_core.models import Namespace

log = logging.getLogger("hindsight.mcp")

# Both exit through SystemExit, so the embedded PostgreSQL is released (uvicorn shuts
# down gracefully first, then re-raises the signal into these handlers).
SERVER_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def fast_exit() -> None:
    """Spare the interpreter's final garbage collection over torch & co.

    With sentence-transformers imported, that collection takes seconds at exit
    (clients wait for it on stdio, ``docker stop`` on HTTP); frozen objects are
    skipped. Call only when the process is about to end.
    """
    import gc

    gc.freeze()


def build_http_app(
    memory: AsyncMemory,
    tokens: Mapping[str, Grant | Namespace],
    *,
    host: str,
    max_body: int,
    warmup: Warmup | None = None,
    default: Grant | None = None,
) -> ASGIApp:
    """The ASGI app: body limit, then bearer auth, then the MCP endpoint at ``/mcp``.

    A new app (and so a new session manager) is built per call: the SDK runs a
    session manager once. ``tokens`` maps each token to its grant (a bare namespace:
    that one, reading nothing else, as before grants existed); ``default`` is the
    grant of every client when no token is configured (the memory's namespace, when
    not given).
    """
    grants = {t: g if isinstance(g, Grant) else Grant(tuple(g)) for t, g in tokens.items()}
    default = default or Grant(memory.namespace)
    server = build_server(memory, require_token=bool(grants), warmup=warmup, grant=default)
    inner = server.streamable_http_app(
        stateless_http=True, json_response=True, host=host, max_request_body_size=max_body
    )
    guarded = JsonRpcGuardMiddleware(BusyStatusMiddleware(inner))
    return BodyLimitMiddleware(BearerNamespaceMiddleware(guarded, grants, default), max_body)


def _memory(settings: Settings, namespace: str | None) -> AsyncMemory:
    from hindsight_core import AsyncMemory

    return AsyncMemory(stdio_grant(settings, namespace, None).write, settings=settings)


def _warm_memory(settings: Settings, namespace: Namespace) -> AsyncMemory:
    """A memory whose model and database are being made ready in the background."""
    from hindsight_core import AsyncMemory

    memory = AsyncMemory(namespace, settings=settings)
    Warmup(memory).start()
    return memory


def serve_stdio(
    settings: Settings | None = None,
    *,
    namespace: str | None = None,
    read: Sequence[str] | None = None,
) -> None:
    """Serve one local client over stdin/stdout, in the configured namespace, until it
    closes stdin or a signal comes; then end the process (exit clean-up included).

    ``read`` (``--read``; else ``HINDSIGHT_MCP_READ``) names the namespaces or
    ``prefix/*`` the client may read besides its own (docs/sharing.md).

    ``initialize`` does not wait for the engine: the main thread imports the SDK and
    the tools' schemas, nothing of the engine (the CLI's URL check included;
    tests/test_mcp_stdio.py checks it), and the memory is built (and warmed up) by a
    thread of its own once the server serves (:class:`PendingMemory`).

    The process ends through :func:`_exit_now` in both cases: the warm-up's daemon
    threads may still be inside C code (the database driver, numpy, an HTTP request to a dead
    embedder), and the interpreter's own finalization under them crashed once in a
    while (exit status -11 seen at end of input).
    """
    settings = settings or Settings()
    grant = stdio_grant(settings, namespace, read)  # a bad one fails now, not later
    ns = grant.write
    exit_on_signals(SERVER_SIGNALS)
    server = build_server(PendingMemory(ns, lambda: _warm_memory(settings, ns)), grant=grant)
    try:
        server.run("stdio")
    except SystemExit as stop:
        _exit_now(stop)
    _exit_now(SystemExit(0))


def _exit_now(stop: SystemExit) -> NoReturn:
    """Leave at once, with the exit clean-up but without joining threads.

    The SDK reads stdin in a worker thread, blocked in a read that nothing
    interrupts: the interpreter's exit would wait for it (for the client to close
    stdin). The exit functions still run (releasing the embedded PostgreSQL among
    them), then the process ends with the signal's code.
    """
    import atexit
    import os

    fast_exit()
    code = stop.code if isinstance(stop.code, int) else 1
    signalled = code > 128  # the CLI's and exit_on_signals' SystemExit(128 + signum)
    if signalled:  # the exit stops the embedded server under a warm-up still starting
        logging.getLogger("hindsight.warmup").disabled = True
    atexit._run_exitfuncs()
    if signalled:  # the line the CLI prints on a signal (it never sees this exit)
        with contextlib.suppress(ValueError):
            sys.stderr.write(f"hindsight: stopped by {signal.Signals(code - 128).name}\n")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def serve_http(
    settings: Settings | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    namespace: str | None = None,
    read: Sequence[str] | None = None,
    announce: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until SIGINT/SIGTERM.

    ``announce`` is called once, as the server starts, with where it listens
    (``{"server": "mcp", "url": ..., "tokens": n}``); ``hindsight mcp --json`` prints it.

    Raises:
        ConfigurationError: a non-loopback host with no token configured, or a
            malformed token setting (checked before anything is loaded).
    """
    import uvicorn

    settings = settings or Settings()
    host = host or settings.mcp_host
    port = port or settings.mcp_port
    tokens = load_tokens(settings)
    check_bind(host, tokens)
    default = stdio_grant(settings, namespace, read)  # the grant when no token is set
    memory = _memory(settings, namespace)
    if not tokens:
        log.warning(
            "no MCP tokens configured: every local client shares namespace %s",
            "/".join(memory.namespace),
        )
    exit_on_signals(SERVER_SIGNALS)
    app = build_http_app(
        memory,
        tokens,
        host=host,
        max_body=settings.mcp_max_body_bytes,
        warmup=Warmup(memory).start(),
        default=default,
    )
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/mcp"
    sys.stderr.write(f"Hindsight MCP server on {url} ({len(tokens)} token(s))\n")
    if announce is not None:
        announce({"server": "mcp", "transport": "http", "url": url, "tokens": len(tokens)})
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=3)
    finally:
        fast_exit()
