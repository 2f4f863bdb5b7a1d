"""JSON-RPC and transport rules the SDK's stateless HTTP transport lets through.

- A request whose ``id`` is not a string or an integer (an object, a float, null)
  was taken for a notification: 202 and an empty body. JSON-RPC says -32600 Invalid
  Request, and MCP requires a string or integer id.
- ``GET /mcp`` opened a server-to-client event stream that a stateless server never
  writes to, held open until the client gave up. The transport allows 405 instead.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._auth import _reply

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send


def invalid_id(message: Any) -> bool:
    """Whether ``message`` is a request (it has a method) with an id MCP refuses."""
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return False
    request_id = message["id"]
    return isinstance(request_id, bool) or not isinstance(request_id, str | int)


class JsonRpcGuardMiddleware:
    """405 to GET on the MCP endpoint; -32600 to a request with an id of the wrong type.

    Sits inside the body limit (the body it reads whole is bounded) and the bearer
    check (an unauthorised caller learns nothing more).
    """

    def __init__(self, app: ASGIApp, path: str = "/mcp") -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != self.path:
            await self.app(scope, receive, send)
            return
        if scope["method"] == "GET":
            await _reply(
                send,
                405,
                "Method Not Allowed: this stateless server opens no event stream; POST requests",
                -32600,
                [(b"allow", b"POST")],
            )
            return
        if scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None  # the SDK answers the parse error
        if invalid_id(parsed):
            await _reply(
                send, 400, "Invalid Request: the id must be a string or an integer", -32600
            )
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


__all__ = ["JsonRpcGuardMiddleware", "invalid_id"]
