"""The inspector's pages and actions; each one is a call into the core's API.

The handlers are plain functions: each finds the shared :class:`~.app.UIState` on
``request.app.state.ui``, where ``create_app`` puts it.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from hindsight_core.arguments import MAX_OFFSET, check_int, parse_id
from hindsight_core.errors import NotFoundError, ValidationError
from hindsight_core.models import Experience, Namespace

from . import access
from .auth import COOKIE, safe_next, same_token, session_value, token_ok
from .charts import activity_chart, decay_chart, utc_today
from .fmt import nsq

if TYPE_CHECKING:
    from hindsight_core import AsyncMemory

    from .app import UIState

ACTIVITY_DAYS = 30
SORTABLE = (
    "lesson",
    "score",
    "use_count",
    "occurrences",
    "last_used_at",
    "created_at",
    "updated_at",
)
STATUSES = {"live": False, "archived": True, "all": None}
EDITABLE = ("lesson", "trigger", "scene", "action", "outcome", "importance")
MESSAGES = {
    "archived": "Archived: it will not be recalled until restored.",
    "restored": "Restored: it can be recalled again.",
    "critical": "Marked critical: it never decays and is never evicted.",
    "uncritical": "No longer critical: it decays like any other record.",
    "edited": "Saved and re-embedded.",
    "deleted": "Deleted for good.",
}


def _choice(
    value: str | None, allowed: tuple[str, ...] | dict[str, Any], default: str, field: str
) -> str:
    if value in (None, ""):
        return default
    if value not in allowed:
        raise ValidationError(
            f"{field} must be one of {', '.join(allowed)}; got {value!r}", field=field
        )
    return str(value)


def _state(request: Request) -> UIState:
    """The inspector's shared state (``create_app`` puts it on the application)."""
    state: UIState = request.app.state.ui
    return state


def _ui(request: Request) -> tuple[UIState, AsyncMemory]:
    """The shared state and the memory it inspects."""
    state = _state(request)
    return state, state.memory


def _page(value: str | None, page_size: int) -> int:
    try:
        page = int(value or "1")
    except ValueError:
        raise ValidationError(f"page must be a whole number, got {value!r}", field="page") from None
    # Further would page past the core's offset limit.
    return check_int(page, "page", 1, MAX_OFFSET // page_size + 1)


async def index(request: Request) -> Response:
    state, mem = _ui(request)
    ns = state.namespace(request)
    qp = request.query_params
    scene = qp.get("scene") or None
    status = _choice(qp.get("status"), STATUSES, "live", "status")
    sort = _choice(qp.get("sort"), SORTABLE, "created_at", "sort")
    direction = _choice(qp.get("dir"), ("asc", "desc"), "desc", "dir")
    page = _page(qp.get("page"), state.page_size)
    archived = STATUSES[status]
    await mem.setup()  # once: the pages below run their queries concurrently
    namespaces, scenes, total, records, activity = await asyncio.gather(
        mem.namespaces(prefix=state.scope),
        mem.scenes(namespace=ns),
        mem.count_records(namespace=ns, scene=scene, archived=archived),
        mem.list_records(
            namespace=ns,
            scene=scene,
            archived=archived,
            order_by=sort,
            descending=direction == "desc",
            limit=state.page_size,
            offset=(page - 1) * state.page_size,
        ),
        mem.activity(namespace=ns, days=ACTIVITY_DAYS),
    )
    pages = max(1, math.ceil(total / state.page_size))
    return state.render(
        request,
        "index.html",
        ns=ns,
        namespaces=namespaces,
        scenes=scenes,
        scene=scene,
        status=status,
        sort=sort,
        dir=direction,
        page=page,
        pages=pages,
        total=total,
        records=records,
        msg=MESSAGES.get(qp.get("msg", "")),
        activity=activity_chart(activity, days=ACTIVITY_DAYS, today=utc_today(mem.clock())),
        activity_total=sum(p.count for p in activity),
    )


async def search(request: Request) -> Response:
    state, mem = _ui(request)
    ns = state.namespace(request)
    qp = request.query_params
    query = qp.get("q", "")
    scene = qp.get("scene") or None
    top_k = qp.get("top_k") or "10"
    hits, error = [], None
    if query.strip():
        try:
            hits = await mem.search(query, namespace=ns, scene=scene, top_k=top_k)  # type: ignore[arg-type]
        except ValidationError as exc:
            error = str(exc)
    s = mem.settings
    return state.render(
        request,
        "search.html",
        status_code=400 if error else 200,
        ns=ns,
        q=query,
        scene=scene,
        top_k=top_k,
        hits=hits,
        error=error,
        w_sem=s.semantic_weight,
        w_kw=round(mem.keyword_weight, 3),
        score_weight=s.score_weight,
    )


async def record(request: Request) -> Response:
    state, mem = _ui(request)
    ns = state.namespace(request)
    rec = await mem.get(request.path_params["id"], namespace=ns)
    return await _record_page(request, ns, rec)


async def _record_page(
    request: Request, ns: Namespace, rec: Experience, *, status_code: int = 200, **extra: Any
) -> Response:
    state, mem = _ui(request)
    await mem.setup()
    links = [*rec.merged_from, *([rec.merged_into] if rec.merged_into else [])]
    related: dict[Any, Experience | None] = {}
    for rid in links:
        try:
            related[rid] = await mem.get(rid, namespace=ns)
        except NotFoundError:
            related[rid] = None  # deleted since
    curve, history, versions = await asyncio.gather(
        mem.decay_curve(rec.id, namespace=ns),
        mem.events(rec.id, namespace=ns),
        mem.history(rec.id, namespace=ns),  # its chain of versions (docs/versions.md)
    )
    extra.setdefault("form", {k: getattr(rec, k) for k in EDITABLE})
    return state.render(
        request,
        "record.html",
        status_code=status_code,
        ns=ns,
        rec=rec,
        related=related,
        decay=decay_chart(curve),
        curve=curve,
        history=history,
        versions=versions,
        readers=access.readers(state, ns),
        msg=MESSAGES.get(request.query_params.get("msg", "")),
        **extra,
    )


def back(ns: Namespace, rid: Any, msg: str) -> RedirectResponse:
    return RedirectResponse(f"/records/{rid}?{nsq(ns, msg=msg)}", status_code=303)


async def set_critical(request: Request) -> Response:
    state, mem = _ui(request)
    ns = state.namespace(request)
    form = await request.form()
    on = form.get("critical") == "1"
    rec = await mem.set_critical(request.path_params["id"], on, namespace=ns)
    return back(ns, rec.id, "critical" if on else "uncritical")


async def archive(request: Request) -> Response:
    state, mem = _ui(request)
    ns = state.namespace(request)
    rec = await mem.archive(request.path_params["id"], namespace=ns)
    return back(ns, rec.id, "archived")


async def restore(request: Request) -> Response:
    state, mem = _ui(request)
    ns = state.namespace(request)
    rec = await mem.restore(request.path_params["id"], namespace=ns)
    return back(ns, rec.id, "restored")


async def delete(request: Request) -> Response:
    state, mem = _ui(request)
    ns = state.namespace(request)
    if request.method == "GET":
        rec = await mem.get(request.path_params["id"], namespace=ns)
        return state.render(request, "confirm_delete.html", ns=ns, rec=rec)
    form = await request.form()
    rid = parse_id(request.path_params["id"])
    if form.get("confirm") != "yes":
        raise ValidationError("deleting needs confirmation", field="confirm")
    await mem.forget(rid, namespace=ns)
    return RedirectResponse(f"/?{nsq(ns, msg='deleted')}", status_code=303)


async def edit(request: Request) -> Response:
    state, mem = _ui(request)
    ns = state.namespace(request)
    rec = await mem.get(request.path_params["id"], namespace=ns)
    form = await request.form()
    changes: dict[str, Any] = {}
    for key in EDITABLE:
        value = form.get(key)
        if value is None:
            continue
        value = str(value)
        if key == "importance":
            changes[key] = value.strip() or None
        else:
            changes[key] = value
    try:
        saved = await mem.edit(rec.id, namespace=ns, **changes)
    except ValidationError as exc:
        return await _record_page(
            request,
            ns,
            rec,
            status_code=400,
            edit_error=str(exc),
            form={**{k: getattr(rec, k) for k in EDITABLE}, **changes},
            editing=True,
        )
    return back(ns, saved.id, "edited")


async def login(request: Request) -> Response:
    state = _state(request)
    target = safe_next(request.query_params.get("next"))
    if state.token is None:
        return RedirectResponse(target, status_code=303)
    error = None
    if request.method == "POST":
        form = await request.form()
        given = str(form.get("token", "")).strip()
        if given and same_token(given, state.token):
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(
                COOKIE,
                session_value(state.token),
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
                max_age=30 * 86400,
            )
            return response
        error = "That token is not right."
    elif token_ok(request, state.token):
        return RedirectResponse(target, status_code=303)
    return state.render(
        request,
        "login.html",
        status_code=401 if error else 200,
        error=error,
        next=target,
        auth=False,
    )


async def logout(request: Request) -> Response:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


async def healthz(request: Request) -> Response:
    state = _state(request)
    warm = state.warmup.status() if state.warmup else {}
    return JSONResponse({"status": "ok", "server": "hindsight-ui", **warm})


ROUTES = [
    Route("/", index),
    Route("/search", search),
    Route("/records/{id}", record),
    Route("/records/{id}/critical", set_critical, methods=["POST"]),
    Route("/records/{id}/archive", archive, methods=["POST"]),
    Route("/records/{id}/restore", restore, methods=["POST"]),
    Route("/records/{id}/delete", delete, methods=["GET", "POST"]),
    Route("/records/{id}/edit", edit, methods=["POST"]),
    Route("/login", login, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
    Route("/healthz", healthz),
    Route("/access", access.access),
]
