"""Who is calling: bearer tokens mapped to grants, and the HTTP guards.

Over HTTP every request must carry ``Authorization: Bearer <token>``; the token
decides the grant (:class:`~hindsight_adapters._grants.Grant`: the one namespace
written, what else may be read), so a client sees only what it was granted and
changes only its own records. The grant travels to the tools in a context variable
(the SDK carries the request's context into tool and resource handlers), so even
the static ``memory://stats`` resource is per tenant. The token grammar is in
``_grants.py``.
"""

from __future__ import annotations

import contextvars
import hmac
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hindsight_core.errors import ConfigurationError

from .. import _http
from .._grants import Grant, load_tokens, parse_namespace, parse_tokens

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("hindsight.mcp")

__all__ = [
    "CURRENT_GRANT",
    "PUBLIC_PATHS",
    "BearerNamespaceMiddleware",
    "BodyLimitMiddleware",
    "Grant",
    "check_bind",
    "load_tokens",
    "parse_namespace",
    "parse_tokens",
]

CURRENT_GRANT: contextvars.ContextVar[Grant | None] = contextvars.ContextVar(
    "hindsight_mcp_grant", default=None
)
"""The grant of the request being served (set by :class:`BearerNamespaceMiddleware`)."""

PUBLIC_PATHS = frozenset({"/healthz"})


def check_bind(host: str, tokens: Mapping[str, Grant]) -> None:
    """Refuse to serve a non-loopback address with no token configured."""
    if not tokens and not _http.is_loopback(host):
        raise ConfigurationError(
            f"refusing to serve MCP over HTTP on {host} without authentication: set "
            "HINDSIGHT_MCP_TOKENS='<token>=<namespace>' (or HINDSIGHT_MCP_TOKENS_FILE), "
            "or bind to 127.0.0.1"
        )


def _find(tokens: Mapping[str, Grant], presented: str) -> Grant | None:
    """Constant-time lookup (no early exit on the first match)."""
    found = None
    for token, grant in tokens.items():
        if hmac.compare_digest(token.encode(), presented.encode()):
            found = grant
    return found


async def _reply(
    send: Send,
    status: int,
    message: str,
    code: int,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BearerNamespaceMiddleware:
    """Pure ASGI: map the bearer token to its grant, or answer 401.

    Args:
        app: the MCP Starlette app.
        tokens: token -> grant. Empty means open access with ``default`` (only
            allowed on loopback; see :func:`check_bind`).
        default: the grant used when no tokens are configured.
    """

    def __init__(self, app: ASGIApp, tokens: Mapping[str, Grant], default: Grant) -> None:
        self.app = app
        self.tokens = dict(tokens)
        self.default = default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        grant: Grant | None = self.default
        if self.tokens:
            header = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, token = header.decode("latin-1").partition(" ")
            grant = _find(self.tokens, token.strip()) if scheme.lower() == "bearer" else None
        if grant is None:
            await _reply(
                send,
                401,
                "Unauthorized: missing or invalid bearer token",
                -32001,
                [(b"www-authenticate", b"Bearer")],
            )
            return
        scope.setdefault("state", {})["namespace"] = grant.write
        reset = CURRENT_GRANT.set(grant)
        try:
            await self.app(scope, receive, send)
        finally:
            CURRENT_GRANT.reset(reset)


class BodyLimitMiddleware(_http.BodyLimitMiddleware):
    """Answer 413 (a JSON-RPC error) to request bodies over ``limit`` bytes, declared
    or streamed (see :class:`hindsight_adapters._http.BodyLimitMiddleware`)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        super().__init__(app, limit, _too_large)


async def _too_large(send: Send, limit: int) -> None:
    await _reply(send, 413, f"Request body too large (limit {limit} bytes)", -32600)
