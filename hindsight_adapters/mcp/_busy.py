"""A busy database as MCP reports it: a JSON-RPC error with retry data, 503 over HTTP.

A pool checkout that gave up (:class:`~hindsight_core.errors.DatabaseBusyError`) is
not a failed tool call: nothing was written and the same call succeeds a moment
later. So a tool answers it with a JSON-RPC error (:data:`BUSY`, ``data``: ``busy``
and ``retry_after`` seconds) that a client can tell from a tool's own error, and on
the HTTP transport :class:`BusyStatusMiddleware` gives that response the status an
HTTP client and a load balancer retry on: 503 with ``Retry-After``.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError

from hindsight_core.errors import DatabaseBusyError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

BUSY = -32050
"""The JSON-RPC error code of "the memory database is busy, retry" (an
implementation-defined server error: -32000 to -32099, none of the SDK's)."""


def busy_error(exc: DatabaseBusyError) -> MCPError:
    """The JSON-RPC error for a busy database."""
    retry_after = max(1, math.ceil(exc.retry_after))
    return MCPError(
        code=BUSY,
        message=f"memory database busy, retry in {retry_after} s: {exc}",
        data={"busy": True, "retry_after": retry_after},
    )


def _busy_retry_after(body: bytes) -> int | None:
    """``retry_after`` of a JSON-RPC response (or batch) that reports :data:`BUSY`."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    for message in doc if isinstance(doc, list) else [doc]:
        error = message.get("error") if isinstance(message, dict) else None
        if isinstance(error, dict) and error.get("code") == BUSY:
            data = error.get("data")
            after = data.get("retry_after") if isinstance(data, dict) else None
            return after if isinstance(after, int) and after > 0 else 1
    return None


class BusyStatusMiddleware:
    """Give a JSON response that reports :data:`BUSY` the status 503 and ``Retry-After``.

    JSON responses (the stateless transport's, one body) are held until complete and
    looked at; anything else (an event stream) passes straight through.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def hold(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and _is_json(message):
                start = message
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            await send(_restated(start, body))
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, hold)


def _is_json(start: Message) -> bool:
    return any(
        name.lower() == b"content-type" and value.split(b";")[0].strip() == b"application/json"
        for name, value in start.get("headers", [])
    )


def _restated(start: Message, body: bytes) -> dict[str, Any]:
    """``start``, or, for a busy body, 503 with ``Retry-After``."""
    after = _busy_retry_after(body)
    if after is None:
        return dict(start)
    headers = [(n, v) for n, v in start.get("headers", []) if n.lower() != b"retry-after"]
    return {**start, "status": 503, "headers": [*headers, (b"retry-after", str(after).encode())]}
