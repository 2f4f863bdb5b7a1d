"""The access page: each MCP token's grant (what it writes and reads), secrets masked.

The inspector reads the same settings as ``hindsight mcp --http``
(``HINDSIGHT_MCP_TOKENS`` / ``HINDSIGHT_MCP_TOKENS_FILE``, docs/sharing.md) and shows
every token by its label with its secret masked, plus the stdio server's grant
(``HINDSIGHT_NAMESPACE`` and ``HINDSIGHT_MCP_READ``). An inspector limited to a scope
shows only the grants that touch it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from hindsight_core.errors import ConfigurationError

from .._grants import PREFIX, Grant, load_tokens, show, stdio_grant
from .._http import masked

if TYPE_CHECKING:
    from hindsight_core.models import Namespace

    from .app import UIState


def _touches(state: UIState, grant: Grant) -> bool:
    """Whether the grant writes or reads anything inside the inspector's scope."""
    if state.scope is None:
        return True
    for p in grant.readable:
        base = p[:-1] if p[-1] == PREFIX else p
        under_scope = state.allowed(base)
        # A prefix above the scope (acme/* for scope acme/team) reads into it too.
        if under_scope or (p[-1] == PREFIX and state.scope[: len(base)] == base):
            return True
    return False


def grants(state: UIState) -> tuple[list[dict[str, Any]], str | None]:
    """The rows of the access page, and the configuration error if the settings are bad."""
    settings = state.memory.settings
    rows: list[dict[str, Any]] = []
    try:
        tokens = load_tokens(settings)
        local = stdio_grant(settings, None, None)
    except ConfigurationError as exc:
        return rows, str(exc)
    for token, grant in tokens.items():
        if _touches(state, grant):
            rows.append(_row(grant, masked(token), "HTTP token"))
    if _touches(state, local):
        rows.append(_row(local, "—", "stdio (HINDSIGHT_NAMESPACE, HINDSIGHT_MCP_READ)"))
    return rows, None


def _row(grant: Grant, secret: str, kind: str) -> dict[str, Any]:
    return {
        "label": grant.label,
        "secret": secret,
        "kind": kind,
        "write": grant.write,
        "reads": [(show(p), None if p[-1] == PREFIX else p) for p in grant.read],
    }


def readers(state: UIState, ns: Namespace) -> list[str]:
    """Labels of the tokens that may read ``ns`` without writing it (none if the
    settings are bad: the access page says why)."""
    try:
        tokens = load_tokens(state.memory.settings)
    except ConfigurationError:
        return []
    return sorted({g.label for g in tokens.values() if g.write != ns and g.reads(ns)})


async def access(request: Request) -> Response:
    state: UIState = request.app.state.ui
    rows, error = grants(state)
    return state.render(request, "access.html", rows=rows, error=error)
