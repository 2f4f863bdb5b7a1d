"""Commands on versions of a lesson: supersede, history (docs/versions.md)."""

from __future__ import annotations

from typing import Any

import typer
from rich.markup import escape

from ._app import JsonOpt, NamespaceOpt, app, cli_errors, console, emit_json, open_memory


@app.command()
def supersede(
    record_id: str = typer.Argument(..., help="Id of the lesson to correct (any version)."),
    lesson: str = typer.Option(..., "--lesson", "-l", help="The corrected lesson."),
    trigger: str | None = typer.Option(None, "--trigger", "-t", help="Default: the old one's."),
    scene: str | None = typer.Option(None, "--scene", "-s", help="Default: the old one's."),
    reason: str | None = typer.Option(None, "--reason", "-r", help="Why it is corrected."),
    by: str | None = typer.Option(None, "--by", help="Who corrects it (default: the namespace)."),
    namespace: str = NamespaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write a corrected lesson as the new version of one; the old one is kept in its
    history and no longer recalled."""
    record: dict[str, Any] = {"lesson": lesson}  # the rest from the old version
    record |= {k: v for k, v in (("trigger", trigger), ("scene", scene)) if v is not None}
    with cli_errors(), open_memory(namespace) as mem:
        result = mem.supersede(record_id, record, reason=reason, actor=by)
    if as_json:
        emit_json(result)
    else:
        console.print(f"[bold]{result.id}[/bold] supersedes {result.supersedes}")


@app.command()
def history(
    record_id: str = typer.Argument(..., help="Id of any version of the lesson."),
    namespace: str = NamespaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Every version of a lesson, oldest first: when, why and by whom each was replaced."""
    with cli_errors(), open_memory(namespace) as mem:
        chain = mem.history(record_id)
    if as_json:
        emit_json(chain)
        return
    for r in chain:
        state = (
            f"superseded {r.superseded_at:%Y-%m-%d %H:%M} by {escape(r.superseded_actor or '?')}"
            + (f": {escape(r.superseded_reason)}" if r.superseded_reason else "")
            if r.superseded_by
            else "current" + (" (archived)" if r.archived_at else "")
        )
        console.print(
            f"v{r.version}  {escape(r.lesson)}\n      {state}  id {r.id}", highlight=False
        )
