"""``hindsight db upgrade | status``: the schema."""

from __future__ import annotations

from typing import Any

import typer

from hindsight_core.items import Items
from hindsight_core.storage.engine import db_errors

from ._app import JsonOpt, app, cli_errors, console, emit_json, err_console, open_memory

db_app = typer.Typer(help="Database schema: upgrade and status.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command()
def upgrade(as_json: bool = JsonOpt) -> None:
    """Apply pending migrations (also done automatically on first use)."""
    from hindsight_core.storage import migrate  # Alembic: loaded by these commands only

    with cli_errors(), open_memory() as mem:
        mem.setup()
        with db_errors(), mem.engine.connect() as conn:
            revision = migrate.current_revision(conn)
    head = migrate.head_revision()
    if as_json:
        emit_json({"revision": revision, "head": head, "up_to_date": revision == head})
    else:
        console.print(f"schema at revision {revision} (head {head})")


@db_app.command()
def status(as_json: bool = JsonOpt) -> None:
    """Show the database in use, its schema revision and the items' vector indexes."""
    from hindsight_core.storage import migrate

    with cli_errors(), open_memory() as mem:
        with db_errors(), mem.engine.connect() as conn:
            revision = migrate.current_revision(conn)
        url = mem.engine.url.render_as_string(hide_password=True)
        head = migrate.head_revision()
        # (Reading them migrates: only when there is nothing to migrate.)
        indexes = Items(mem).index_health() if revision == head else []
    info: dict[str, Any] = {
        "database": url,
        "revision": revision,
        "head": head,
        "up_to_date": revision == head,
        "embedded": mem.settings.database_url is None,
    }
    if as_json:
        emit_json({**info, "item_indexes": [h.as_dict() for h in indexes]})
        return
    for key, value in info.items():
        console.print(f"{key:>11}: {value}")
    for h in indexes:
        built = "?" if h.built_rows is None else h.built_rows
        line = f"{h.kind} {h.dims}-d, {h.rows} vectors (built on {built})"
        console.print(f"{'item index':>11}: {h.name}: {line}", highlight=False)
        if h.stale:
            err_console.print(f"warning: {h.advice()}", highlight=False)


__all__ = ["db_app"]
