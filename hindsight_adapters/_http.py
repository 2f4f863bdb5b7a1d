"""Guards shared by the HTTP servers (the MCP server and the inspector): pure ASGI,
no framework import, so each server keeps its own optional extra."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from hindsight_core.errors import ConfigurationError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("hindsight")

MIN_TOKEN_CHARS = 16
"""Tokens shorter than this get a warning: they can be guessed."""

Reply = Callable[["Send", int], Awaitable[None]]
"""Sends the 413 response: ``reply(send, limit)``."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address to bind, or a request's host name; IPv6 in
    brackets or not) is this machine's loopback interface only."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def masked(token: str) -> str:
    """A token for people: never a character of it, only its length (``•••• 32 chars``).

    Messages and pages name a token by its label (``_grants.Grant.label``) and show
    this beside it, so that two tokens can be told apart without revealing either.
    """
    return f"•••• {len(token)} chars"


def check_tokens(tokens: Iterable[str], *, source: str) -> None:
    """Refuse blank tokens and warn about short ones.

    A blank token (``HINDSIGHT_UI_TOKEN='   '``) would otherwise read as "a token is
    set" and open the server to anyone who sends a blank one.

    Raises:
        ConfigurationError: a token is empty or only whitespace.
    """
    tokens = list(tokens)
    if any(not t.strip() for t in tokens):
        raise ConfigurationError(
            f"{source} is blank: set a long random token (e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`) or unset it"
        )
    short = sum(len(t.strip()) < MIN_TOKEN_CHARS for t in tokens)
    if short:
        log.warning(
            "%s: %d token(s) shorter than %d characters: use long random tokens "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)",
            source,
            short,
            MIN_TOKEN_CHARS,
        )


class _TooLarge(Exception):
    pass


class BodyLimitMiddleware:
    """Answer 413 to request bodies over ``limit`` bytes, declared or streamed.

    A body sent chunked (no Content-Length) is counted as it arrives. The inner app
    may catch the error raised at the limit and start a response of its own (the
    MCP SDK answers 500): once over the limit, whatever the inner app sends is
    dropped and the 413 sent instead.

    Args:
        app: the application to guard.
        limit: the largest body accepted, in bytes.
        reply: sends the 413 (a JSON-RPC error for MCP, plain text for the inspector).
    """

    def __init__(self, app: ASGIApp, limit: int, reply: Reply | None = None) -> None:
        self.app = app
        self.limit = limit
        self.reply = reply or plain_too_large

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self.reply(send, self.limit)
            return
        received = 0
        over = started = False

        async def limited_receive() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    over = True
                    raise _TooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if over:
                return  # the inner app's answer to the error we raised
            started = started or message["type"] == "http.response.start"
            await send(message)

        with contextlib.suppress(_TooLarge):  # the 413 is sent below
            await self.app(scope, limited_receive, guarded_send)
        if over and not started:
            await self.reply(send, self.limit)


async def plain_too_large(send: Send, limit: int) -> None:
    """A plain-text 413."""
    body = f"Request body too large (limit {limit} bytes)".encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


__all__ = ["MIN_TOKEN_CHARS", "BodyLimitMiddleware", "check_tokens", "masked", "plain_too_large"]
