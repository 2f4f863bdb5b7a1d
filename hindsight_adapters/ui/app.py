"""The inspector's Starlette application: wiring, auth, templates, error pages.

``create_app`` builds it around an :class:`~hindsight_core.AsyncMemory`; every
page is rendered on the server from the core's API (``routes.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hindsight_core import AsyncMemory, Embedder, Settings
from hindsight_core.errors import DatabaseError, HindsightError, NotFoundError, ValidationError
from hindsight_core.models import Namespace, validate_namespace
from hindsight_core.warmup import Warmup

from .._http import BodyLimitMiddleware, check_tokens
from .auth import GuardMiddleware
from .fmt import fmt_day, fmt_time, nsq, show_ns

HERE = Path(__file__).parent
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        b"frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


class UIState:
    """What the routes share: the memory, the templates and the namespace rules.

    Attributes:
        default_namespace: shown when a request names none.
        scope: when set, only namespaces equal to or under it can be opened.
        token: the bearer token, when one is required.
        page_size: records per page of the table.
    """

    def __init__(
        self,
        memory: AsyncMemory,
        *,
        default_namespace: Namespace,
        scope: Namespace | None,
        token: str | None,
        page_size: int = 20,
    ) -> None:
        self.memory = memory
        self.warmup: Warmup | None = None
        self.page_size = page_size
        self.default_namespace = default_namespace
        self.scope = scope
        self.token = token
        env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.globals.update(nsq=nsq, show_ns=show_ns)
        env.filters["ts"] = fmt_time
        env.filters["day"] = fmt_day
        self.templates = Jinja2Templates(env=env)

    def namespace(self, request: Request) -> Namespace:
        """The namespace a request asks for (``?ns=a&ns=b``), checked against the scope."""
        labels = request.query_params.getlist("ns")
        ns = validate_namespace(labels, field="ns") if labels else self.default_namespace
        if not self.allowed(ns):
            raise HTTPException(
                403,
                f"namespace {show_ns(ns)} is outside this inspector's "
                f"scope {show_ns(self.scope or ())}",
            )
        return ns

    def allowed(self, ns: Namespace) -> bool:
        return self.scope is None or ns[: len(self.scope)] == self.scope

    def render(
        self, request: Request, name: str, status_code: int = 200, **context: Any
    ) -> Response:
        context.setdefault("ns", None)
        context.setdefault("auth", self.token is not None)  # shows "Sign out"
        context["lesson_max"] = self.memory.settings.lesson_max_chars
        return self.templates.TemplateResponse(request, name, context, status_code=status_code)


class SecurityHeaders:
    """Adds a strict Content-Security-Policy and friends to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers if scope["type"] == "http" else send)


async def error_page(request: Request, exc: Exception) -> Response:
    """The page for a refused or failed request: the core's errors by kind, HTTP errors
    by status."""
    status, title = 500, "Something went wrong"
    if isinstance(exc, ValidationError):
        status, title = 400, "Bad input"
    elif isinstance(exc, NotFoundError):
        status, title = 404, "Not found"
    elif isinstance(exc, DatabaseError):
        status, title = 503, "The database is unavailable"
    elif isinstance(exc, HTTPException):
        status, title = exc.status_code, "Refused" if exc.status_code == 403 else "Error"
    message = exc.detail if isinstance(exc, HTTPException) else str(exc)
    state: UIState = request.app.state.ui
    return state.render(request, "error.html", status, title=title, message=message)


def create_app(
    memory: AsyncMemory | None = None,
    *,
    settings: Settings | None = None,
    embedder: Embedder | None = None,
    namespace: Namespace | str = ("default",),
    scope: Namespace | str | None = None,
    token: str | None = None,
    loopback_only: bool = True,
    page_size: int = 20,
    warm_up: bool = False,
) -> Starlette:
    """Build the inspector.

    Request bodies over ``settings.ui_max_body_bytes`` get 413, however sent.

    Args:
        memory: the memory to inspect (the caller closes it); default: an
            ``AsyncMemory`` from ``settings`` and ``embedder``, closed on shutdown.
        namespace: opened when a request names none.
        scope: restrict the inspector to this namespace and those under it.
        token: require this bearer token (header, or the cookie set by ``/login``);
            a blank one is refused, a short one warned about.
        loopback_only: accept only loopback host names (set when bound to loopback).
        page_size: records per page of the table.
        warm_up: at start-up, load the model and set up the database in the
            background (``hindsight ui`` does): pages answer meanwhile, and the
            first search does not pay for the model.
    """
    from . import routes

    if token is not None:  # a blank one must not read as "a token is set"
        check_tokens([token], source="the inspector's token (HINDSIGHT_UI_TOKEN)")
    owned = memory is None
    mem = memory or AsyncMemory(namespace, settings=settings or Settings(), embedder=embedder)
    scope_ns = None if scope is None else validate_namespace(scope, field="scope")
    if not 1 <= page_size <= 1000:
        raise ValidationError("page_size must be from 1 to 1000", field="page_size")
    state = UIState(
        mem,
        default_namespace=validate_namespace(namespace),
        scope=scope_ns,
        token=token,
        page_size=page_size,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if warm_up and state.warmup is None:
            state.warmup = Warmup(mem).start()
        yield
        if owned:
            await mem.aclose()

    app = Starlette(
        routes=list(routes.ROUTES),  # the handlers find the state on app.state.ui
        middleware=[
            Middleware(BodyLimitMiddleware, limit=mem.settings.ui_max_body_bytes),
            Middleware(SecurityHeaders),
            Middleware(GuardMiddleware, token=token, loopback_only=loopback_only),
        ],
        exception_handlers={HindsightError: error_page, HTTPException: error_page},
        lifespan=lifespan,
    )
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.state.ui = state
    return app
