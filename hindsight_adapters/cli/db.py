"""``hindsight db upgrade | status``: the schema."""

from __future__ import annotations

from typing import Any

import typer

from hindsight_core.items import Items
from hindsight_core.storage import migrate
from hindsight_core.storage.engine import db_errors

from ._app import JsonOpt, app, cli_errors, console, emit_json, err_console, open_memory

db_app = typer.Typer(help="Database schema: upgrade and status.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command()
def upgrade(as_json: bool = JsonOpt) -> None:
    """Apply pending migrations (also done automatically on first use)."""
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
    hint = schema_hint(revision, head)
    if as_json:
        emit_json({**info, "hint": hint, "item_indexes": [h.as_dict() for h in indexes]})
        return
    for key, value in info.items():
        console.print(f"{key:>11}: {value}")
    if hint is not None:
        console.print(f"{'hint':>11}: {hint}", highlight=False, markup=False)
    for h in indexes:
        built = "?" if h.built_rows is None else h.built_rows
        line = f"{h.kind} {h.dims}-d, {h.rows} vectors (built on {built})"
        console.print(f"{'item index':>11}: {h.name}: {line}", highlight=False)
        if h.stale:
            err_console.print(f"warning: {h.advice()}", highlight=False)


def schema_hint(revision: str | None, head: str) -> str | None:
    """What to do about a schema that is not at ``head`` (None when it is)."""
    if revision == head:
        return None
    if revision is None:
        return "no schema yet: run `hindsight db upgrade` (the first write also creates it)"
    if revision in migrate.known_revisions():
        return f"run `hindsight db upgrade` to migrate from {revision} to {head}"
    return (
        f"revision {revision} is newer than this package knows (head {head}): the database "
        "was migrated by a newer Hindsight; upgrade the package (pip install -U agent-hindsight)"
    )


__all__ = ["db_app", "schema_hint"]
