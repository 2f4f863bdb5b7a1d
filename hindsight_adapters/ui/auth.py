"""Who may use the inspector: bearer token or cookie, host and origin checks.

- With a token configured, every request (but the login page and static files)
  needs ``Authorization: Bearer <token>`` or the session cookie that ``/login``
  sets after the token was entered once. The cookie holds an HMAC of the token,
  not the token itself, and is ``HttpOnly`` and ``SameSite=Strict``.
- Bound to loopback, only loopback host names are accepted (DNS rebinding).
- Requests that change something (POST) must come from the inspector's own
  origin when the browser says where they come from (cross-site forms).
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import quote, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .._http import is_loopback

COOKIE = "hindsight_ui_session"
OPEN_PATHS = ("/login", "/static/", "/healthz")


def session_value(token: str) -> str:
    """The cookie value for a token: an HMAC, so the cookie does not reveal the token."""
    return hmac.new(token.encode(), b"hindsight-ui-session", hashlib.sha256).hexdigest()


def same_token(given: str, token: str) -> bool:
    """Whether ``given`` is ``token``, compared in constant time."""
    return hmac.compare_digest(given.encode(), token.encode())


def token_ok(request: Request, token: str) -> bool:
    """Whether the request carries the token (header) or a valid session cookie."""
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() == "bearer" and same_token(given.strip(), token):
        return True
    cookie = request.cookies.get(COOKIE, "")
    return bool(cookie) and same_token(cookie, session_value(token))


class GuardMiddleware:
    """Host, origin and token checks in front of every route."""

    def __init__(self, app: ASGIApp, *, token: str | None, loopback_only: bool) -> None:
        self.app = app
        self.token = token
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        response = self._check(request)
        if response is not None:
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _check(self, request: Request) -> Response | None:
        host = (request.url.hostname or "").lower()
        if self.loopback_only and not is_loopback(host):
            return PlainTextResponse(f"host {host!r} not allowed", status_code=400)
        if request.method not in ("GET", "HEAD", "OPTIONS") and not same_origin(request):
            return PlainTextResponse("cross-site request refused", status_code=403)
        path = request.url.path
        if self.token is None or path.startswith(OPEN_PATHS) or token_ok(request, self.token):
            return None
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target)}", status_code=303)
        return PlainTextResponse(
            "a token is required: send 'Authorization: Bearer <token>'",
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="hindsight"'},
        )


def same_origin(request: Request) -> bool:
    """False when the browser says the request comes from another site."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return source != "null"
    parts = urlsplit(source)
    return (parts.scheme, parts.netloc) == (request.url.scheme, request.url.netloc)


def safe_next(target: str | None) -> str:
    """A redirect target after login: a local path only (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
