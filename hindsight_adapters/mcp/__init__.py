"""Hindsight as an MCP server (stdio and streamable HTTP), on the ``mcp`` SDK's MCPServer.

Run it with ``hindsight mcp`` (stdio) or ``hindsight mcp --http`` (port 8765); see
docker/README.md for deployment and docs/sharing.md for tokens that read other namespaces.
"""

from ._auth import (
    CURRENT_GRANT,
    BearerNamespaceMiddleware,
    BodyLimitMiddleware,
    Grant,
    check_bind,
    load_tokens,
    parse_tokens,
)
from ._serve import build_http_app, serve_http, serve_stdio
from .server import build_server

__all__ = [
    "CURRENT_GRANT",
    "BearerNamespaceMiddleware",
    "BodyLimitMiddleware",
    "Grant",
    "build_http_app",
    "build_server",
    "check_bind",
    "load_tokens",
    "parse_tokens",
    "serve_http",
    "serve_stdio",
]
