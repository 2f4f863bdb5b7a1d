"""``hindsight db upgrade | status``: the schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from hindsight_core.items import Items
from hindsight_core.settings import Settings
from hindsight_core.storage.embedded import pgdata_dir
from hindsight_core.storage.engine import db_errors, resolve_url

from ._app import JsonOpt, app, cli_errors, console, emit_json, err_console, open_memory

db_app = typer.Typer(
    help="The database: schema upgrade and status, backup and restore.", no_args_is_help=True
)
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
    if mem.settings.database_url is None:  # where the data lives, shared by the user's processes
        info["data"] = str(pgdata_dir(mem.settings.home).resolve())
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


@db_app.command()
def backup(
    path: Path = typer.Argument(..., help="File to write (pg_dump's custom format)."),
    as_json: bool = JsonOpt,
) -> None:
    """Back the whole database up to one file (with pg_dump; the embedded one by default)."""
    from hindsight_core.storage import backup as dump

    with cli_errors():
        url = resolve_url(Settings())
        dump.backup(url, path)
    size = path.stat().st_size
    if as_json:
        emit_json({"path": str(path), "bytes": size})
    else:
        console.print(f"backed up to {escape(str(path))} ({size} bytes)", highlight=False)


@db_app.command()
def restore(
    path: Path = typer.Argument(..., help="A file written by `hindsight db backup`."),
    yes: bool = typer.Option(False, "--yes", help="Do not ask before replacing the database."),
    as_json: bool = JsonOpt,
) -> None:
    """Replace the database by a backup (stop the servers using it first)."""
    from hindsight_core.storage import backup as dump
    from hindsight_core.storage import migrate

    with cli_errors():
        dump.check_backup(path)
        if not yes and not typer.confirm(
            f"Replace everything in the database by {path}?", default=False, err=True
        ):
            raise typer.Exit(1)
        url = resolve_url(Settings())
        dump.restore(url, path)
        revision = migrate.revision_at(url)
    head = migrate.head_revision()
    hint = schema_hint(revision, head)
    if as_json:
        emit_json({"path": str(path), "revision": revision, "head": head, "hint": hint})
        return
    console.print(f"restored {escape(str(path))}: schema at revision {revision}", highlight=False)
    if hint is not None:
        console.print(f"hint: {hint}", highlight=False, markup=False)


def schema_hint(revision: str | None, head: str) -> str | None:
    """What to do about a schema that is not at ``head`` (None when it is)."""
    from hindsight_core.storage import migrate

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
