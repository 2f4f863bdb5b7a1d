"""Running the server: stdio for one local agent, streamable HTTP for a shared service."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from hindsight_core import AsyncMemory
from hindsight_core.errors import DatabaseError
from hindsight_core.settings import Settings

from ._auth import (
    BearerNamespaceMiddleware,
    BodyLimitMiddleware,
    check_bind,
    load_tokens,
    parse_namespace,
)
from .server import build_server

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from hindsight_core.models import Namespace

log = logging.getLogger("hindsight.mcp")


def fast_exit() -> None:
    """Spare the interpreter's final garbage collection over torch & co.

    With sentence-transformers imported, that collection takes seconds at exit
    (clients wait for it on stdio, ``docker stop`` on HTTP); frozen objects are
    skipped. Call only when the process is about to end.
    """
    import gc

    gc.freeze()


def warm_up(memory: AsyncMemory) -> None:
    """Load the embedding model now, so the first recall is not slowed by it.

    A failure (e.g. a remote embedder that is down) is logged, not fatal: recall
    degrades until the embedder answers.
    """
    try:
        memory.embedder.embed_queries(["warm up"])
    except Exception as exc:  # noqa: BLE001 - any provider failure; logged and survived
        log.warning("embedder warm-up failed (%s); recall degrades until it recovers", exc)


def build_http_app(memory: AsyncMemory, tokens: dict[str, Namespace], *, host: str,
                   max_body: int) -> ASGIApp:
    """The ASGI app: body limit, then bearer auth, then the MCP endpoint at ``/mcp``.

    A new app (and so a new session manager) is built per call: the SDK runs a
    session manager once.
    """
    server = build_server(memory, require_token=bool(tokens))
    inner = server.streamable_http_app(
        stateless_http=True, json_response=True, host=host, max_request_body_size=max_body
    )
    return BodyLimitMiddleware(BearerNamespaceMiddleware(inner, tokens, memory.namespace),
                               max_body)


def _memory(settings: Settings, namespace: str | None) -> AsyncMemory:
    ns = parse_namespace(namespace or settings.namespace)
    return AsyncMemory(ns, settings=settings)


def serve_stdio(settings: Settings | None = None, *, namespace: str | None = None) -> None:
    """Serve one local client over stdin/stdout, in the configured namespace."""
    settings = settings or Settings()
    memory = _memory(settings, namespace)
    prepare(memory)
    server = build_server(memory)
    server.run("stdio")
    fast_exit()


def serve_http(settings: Settings | None = None, *, host: str | None = None,
               port: int | None = None, namespace: str | None = None) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until SIGINT/SIGTERM.

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
    memory = _memory(settings, namespace)
    if not tokens:
        log.warning("no MCP tokens configured: every local client shares namespace %s",
                    "/".join(memory.namespace))
    prepare(memory)
    app = build_http_app(memory, tokens, host=host, max_body=settings.mcp_max_body_bytes)
    sys.stderr.write(f"Hindsight MCP server on http://{host}:{port}/mcp "
                     f"({len(tokens)} token(s))\n")
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=3)
    finally:
        fast_exit()


def prepare(memory: AsyncMemory) -> None:
    """Warm the model and migrate the database; a database that is down is only logged.

    Raises:
        ConfigurationError: e.g. the database was embedded with another model.
    """
    warm_up(memory)
    try:
        memory_setup(memory)
    except DatabaseError as exc:
        log.warning("database not ready at start-up (%s); tools will report it", exc)


def memory_setup(memory: AsyncMemory) -> None:
    """Migrate and check the database once, before serving (in a private event loop)."""
    import asyncio

    async def _setup() -> None:
        try:
            await memory.setup()
        finally:
            await memory.aclose()  # the pool is bound to this loop; the server makes its own

    asyncio.run(_setup())
