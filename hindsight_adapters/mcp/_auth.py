"""Who is calling: bearer tokens mapped to namespaces, and the HTTP guards.

Over HTTP every request must carry ``Authorization: Bearer <token>``; the token
decides the namespace, so a client can only see and change its own records.
The namespace travels to the tools in a context variable (the SDK carries the
request's context into tool and resource handlers), so even the static
``memory://stats`` resource is per tenant.
"""

from __future__ import annotations

import contextvars
import hmac
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hindsight_core.errors import ConfigurationError, ValidationError
from hindsight_core.models import Namespace, validate_namespace
from hindsight_core.settings import Settings

from .. import _http

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("hindsight.mcp")

CURRENT_NAMESPACE: contextvars.ContextVar[Namespace | None] = contextvars.ContextVar(
    "hindsight_mcp_namespace", default=None
)
"""The namespace of the request being served (set by :class:`BearerNamespaceMiddleware`)."""

PUBLIC_PATHS = frozenset({"/healthz"})


def parse_namespace(text: str, *, field: str = "namespace") -> Namespace:
    """``'acme/agent'`` -> ``('acme', 'agent')``, validated."""
    return validate_namespace(tuple(text.strip().split("/")), field=field)


def parse_tokens(text: str, *, source: str = "HINDSIGHT_MCP_TOKENS") -> dict[str, Namespace]:
    """Parse ``token=ns`` pairs separated by commas or new lines (``#`` starts a comment)."""
    tokens: dict[str, Namespace] = {}
    for raw in text.replace(",", "\n").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        token, sep, ns = line.partition("=")
        token = token.strip()
        if not sep or not token or not ns.strip():
            raise ConfigurationError(f"{source}: expected 'token=acme/agent', got {line[:20]!r}...")
        tokens[token] = _ns(ns, source)
    return tokens


def _ns(value: object, source: str) -> Namespace:
    try:
        if isinstance(value, list):
            return validate_namespace(tuple(value))
        if isinstance(value, str):
            return parse_namespace(value)
    except ValidationError as exc:
        raise ConfigurationError(f"{source}: {exc}") from None
    raise ConfigurationError(f"{source}: a namespace must be 'a/b' or a list of labels")


def load_tokens(settings: Settings) -> dict[str, Namespace]:
    """All configured tokens: ``HINDSIGHT_MCP_TOKENS`` plus ``HINDSIGHT_MCP_TOKENS_FILE``.

    The file is either a JSON object ``{"token": "acme/agent"}`` (a list of labels
    works too) or lines of ``token=acme/agent``.
    """
    tokens: dict[str, Namespace] = {}
    if settings.mcp_tokens is not None:
        tokens.update(parse_tokens(settings.mcp_tokens.get_secret_value()))
    path = settings.mcp_tokens_file
    if path is not None:
        source = f"HINDSIGHT_MCP_TOKENS_FILE ({path})"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"{source}: cannot read: {exc.strerror}") from None
        if text.lstrip().startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"{source}: invalid JSON: {exc}") from None
            tokens.update({str(k): _ns(v, source) for k, v in data.items()})
        else:
            tokens.update(parse_tokens(text, source=source))
    _http.check_tokens(tokens, source="HINDSIGHT_MCP_TOKENS")
    return tokens


def check_bind(host: str, tokens: Mapping[str, Namespace]) -> None:
    """Refuse to serve a non-loopback address with no token configured."""
    if not tokens and not _http.is_loopback(host):
        raise ConfigurationError(
            f"refusing to serve MCP over HTTP on {host} without authentication: set "
            "HINDSIGHT_MCP_TOKENS='<token>=<namespace>' (or HINDSIGHT_MCP_TOKENS_FILE), "
            "or bind to 127.0.0.1"
        )


def _find(tokens: Mapping[str, Namespace], presented: str) -> Namespace | None:
    """Constant-time lookup (no early exit on the first match)."""
    found = None
    for token, ns in tokens.items():
        if hmac.compare_digest(token.encode(), presented.encode()):
            found = ns
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
    """Pure ASGI: map the bearer token to a namespace, or answer 401.

    Args:
        app: the MCP Starlette app.
        tokens: token -> namespace. Empty means open access to ``default`` (only
            allowed on loopback; see :func:`check_bind`).
        default: the namespace used when no tokens are configured.
    """

    def __init__(self, app: ASGIApp, tokens: Mapping[str, Namespace], default: Namespace) -> None:
        self.app = app
        self.tokens = dict(tokens)
        self.default = default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        ns: Namespace | None = self.default
        if self.tokens:
            header = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, token = header.decode("latin-1").partition(" ")
            ns = _find(self.tokens, token.strip()) if scheme.lower() == "bearer" else None
        if ns is None:
            await _reply(
                send,
                401,
                "Unauthorized: missing or invalid bearer token",
                -32001,
                [(b"www-authenticate", b"Bearer")],
            )
            return
        scope.setdefault("state", {})["namespace"] = ns
        reset = CURRENT_NAMESPACE.set(ns)
        try:
            await self.app(scope, receive, send)
        finally:
            CURRENT_NAMESPACE.reset(reset)


class BodyLimitMiddleware(_http.BodyLimitMiddleware):
    """Answer 413 (a JSON-RPC error) to request bodies over ``limit`` bytes, declared
    or streamed (see :class:`hindsight_adapters._http.BodyLimitMiddleware`)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        super().__init__(app, limit, _too_large)


async def _too_large(send: Send, limit: int) -> None:
    await _reply(send, 413, f"Request body too large (limit {limit} bytes)", -32600)
