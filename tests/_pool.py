"""Watching a pool from outside: which connections it hands out, through SQLAlchemy's
public pool events (no private attribute of the library's objects)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine


def checkouts(engine: sa.Engine | AsyncEngine) -> list[int]:
    """A list that grows by one (the DBAPI connection's id) each time ``engine``'s pool
    hands out a connection: a call on a warm connection adds none."""
    sync = engine.sync_engine if isinstance(engine, AsyncEngine) else engine
    seen: list[int] = []

    def on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        seen.append(id(dbapi_conn))

    sa.event.listen(sync, "checkout", on_checkout)
    return seen


def tagged(url: str, app: str) -> str:
    """``url`` with libpq's ``application_name`` set to ``app``: the server shows it with
    each backend of the connections made from it (``pg_stat_activity``)."""
    tagged_url = sa.make_url(url).update_query_dict({"application_name": app})
    return tagged_url.render_as_string(hide_password=False)


def backends(url: str, app: str) -> list[dict[str, Any]]:
    """The server's view of the client backends named ``app`` (see :func:`tagged`):
    ``pid``, ``state``, ``query`` (the last statement) and ``query_start``, by pid."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT pid, state, query, query_start FROM pg_stat_activity"
                    " WHERE application_name = :app AND backend_type = 'client backend'"
                    " AND pid <> pg_backend_pid() ORDER BY pid"
                ),
                {"app": app},
            )
            return [dict(r) for r in rows.mappings()]
    finally:
        engine.dispose()
