"""``hindsight db upgrade | status``: the schema."""

from __future__ import annotations

import typer

from hindsight_core.storage import migrate
from hindsight_core.storage.engine import db_errors

from ._app import JsonOpt, app, cli_errors, console, emit_json, open_memory

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
    """Show the database in use and its schema revision."""
    with cli_errors(), open_memory() as mem, db_errors(), mem.engine.connect() as conn:
        revision = migrate.current_revision(conn)
        url = mem.engine.url.render_as_string(hide_password=True)
    head = migrate.head_revision()
    info = {
        "database": url,
        "revision": revision,
        "head": head,
        "up_to_date": revision == head,
        "embedded": mem.settings.database_url is None,
    }
    if as_json:
        emit_json(info)
        return
    for key, value in info.items():
        console.print(f"{key:>11}: {value}")


__all__ = ["db_app"]
