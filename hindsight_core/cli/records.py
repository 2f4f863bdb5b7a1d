"""Commands on experience records: write, search, used, forget, stats, maintain,
export, import, reindex."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import ValidationError
from ._app import (
    JsonOpt,
    NamespaceOpt,
    app,
    cli_errors,
    console,
    emit_json,
    err_console,
    open_memory,
)


def progress_bar(description: str) -> Progress:
    """A rich progress bar on stderr, for long operations."""
    return Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


@app.command()
def write(
    lesson: str = typer.Option(..., "--lesson", "-l", help="One actionable sentence."),
    trigger: str = typer.Option(..., "--trigger", "-t", help="When this lesson applies."),
    scene: str = typer.Option("general", "--scene", "-s"),
    action: str = typer.Option("", "--action", help="What was done."),
    outcome: str = typer.Option("", "--outcome", help="success / failure / partial, figures."),
    importance: str | None = typer.Option(None, "--importance", help="0..1"),
    critical: bool = typer.Option(False, "--critical", help="Never decays or gets evicted."),
    namespace: str = NamespaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write one lesson (merged into a near-duplicate if there is one)."""
    record: dict[str, Any] = {"lesson": lesson, "trigger": trigger, "scene": scene,
                              "action": action, "outcome": outcome, "critical": critical}
    if importance is not None:
        record["importance"] = importance
    with cli_errors(), open_memory(namespace) as mem:
        result = mem.write(record)
    if as_json:
        emit_json(result)
    elif result.status == "merged":
        console.print(f"merged into [bold]{result.id}[/bold] (similarity {result.similarity})")
    else:
        console.print(f"inserted [bold]{result.id}[/bold]")


@app.command()
def search(
    query: str = typer.Argument(..., help="What the agent is about to do."),
    scene: str | None = typer.Option(None, "--scene", "-s"),
    top_k: int = typer.Option(5, "--top-k", "-k"),
    namespace: str = NamespaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Recall the lessons most relevant to a query, with the score breakdown."""
    with cli_errors(), open_memory(namespace) as mem:
        hits = mem.search(query, scene=scene, top_k=top_k)
    if as_json:
        emit_json([{**h.compact(), "breakdown": h.breakdown.model_dump()} for h in hits])
        return
    if not hits:
        console.print("no lessons found")
        return
    table = Table("score", "lesson", "trigger", "scene", "sem", "kw", "decay", "id")
    for h in hits:
        b = h.breakdown
        table.add_row(f"{h.score:.3f}", h.record.lesson, h.record.trigger, h.record.scene,
                      f"{b.semantic:.2f}", f"{b.keyword:.2f}", f"{b.decay:.2f}", str(h.record.id))
    console.print(table)


@app.command()
def used(
    record_id: str = typer.Argument(..., help="Id of a recalled lesson."),
    unhelpful: bool = typer.Option(False, "--unhelpful", help="It was used but did not help."),
    namespace: str = NamespaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Give feedback on a recalled lesson (helpful by default)."""
    with cli_errors(), open_memory(namespace) as mem:
        record = mem.mark_used(record_id, helpful=not unhelpful)
    if as_json:
        emit_json(record)
    else:
        console.print(f"{record.id}: score {record.score:.2f}, used {record.use_count}x")


@app.command()
def forget(record_id: str = typer.Argument(...), namespace: str = NamespaceOpt,
           as_json: bool = JsonOpt) -> None:
    """Delete a lesson for good."""
    with cli_errors(), open_memory(namespace) as mem:
        mem.forget(record_id)
    if as_json:
        emit_json({"id": record_id, "deleted": True})
    else:
        console.print(f"deleted {record_id}")


@app.command()
def stats(namespace: str | None = typer.Option(None, "--namespace", "-n"),
          as_json: bool = JsonOpt) -> None:
    """Counts of records, namespaces, scenes, items and LLM token usage."""
    with cli_errors(), open_memory(namespace or "default") as mem:
        result = mem.stats(namespace=tuple(namespace.split("/")) if namespace else None)
    if as_json:
        emit_json(result)
        return
    table = Table("what", "value", show_header=False)
    for key, value in result.model_dump().items():
        table.add_row(key, json.dumps(value, ensure_ascii=False) if isinstance(value, dict)
                      else str(value))
    console.print(table)


@app.command()
def maintain(namespace: str | None = typer.Option(None, "--namespace", "-n",
                                                   help="Default: every namespace."),
             as_json: bool = JsonOpt) -> None:
    """Archive decayed lessons (below the eviction score) and sweep expired items."""
    with cli_errors(), open_memory(namespace or "default") as mem:
        report = mem.maintain(namespace=tuple(namespace.split("/")) if namespace else None)
    if as_json:
        emit_json(report)
    else:
        console.print(f"archived {report.archived} decayed lessons, swept "
                      f"{report.expired_items} expired items and {report.expired_tasks} tasks")


@app.command()
def export(
    path: Path = typer.Argument(..., help="JSON-lines file to write ('-' for stdout)."),
    namespace: str = NamespaceOpt,
    all_namespaces: bool = typer.Option(False, "--all", help="Every namespace."),
) -> None:
    """Export lessons (archived too) as JSON lines."""
    with cli_errors(), open_memory(namespace) as mem:
        target = sys.stdout if str(path) == "-" else path
        count = mem.export(target, all_namespaces=all_namespaces)
    if str(path) != "-":
        console.print(f"exported {count} records to {path}")


@app.command("import")
def import_(
    path: Path = typer.Argument(..., help="JSON-lines file written by `hindsight export`."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid",
                                      help="Import the good lines, report the bad ones."),
    as_json: bool = JsonOpt,
) -> None:
    """Import lessons from JSON lines (nothing is imported if a line is bad)."""
    if not path.exists():
        with cli_errors():
            raise ValidationError(f"no such file: {path}", field="path")
    with cli_errors(), open_memory() as mem, progress_bar("importing") as bar:
        task = bar.add_task("import", total=None)
        report = mem.import_records(
            path, skip_invalid=skip_invalid,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    if as_json:
        emit_json(report)
    else:
        console.print(f"imported {report['imported']} records"
                      + (f"; {report['already_present']} were already present (kept)"
                         if report["already_present"] else "")
                      + (f"; skipped lines {report['skipped_lines']}"
                         if report["skipped_lines"] else ""))


@app.command()
def reindex(
    force: bool = typer.Option(False, "--force",
                               help="Re-embed every record, even those already up to date."),
    as_json: bool = JsonOpt,
) -> None:
    """Re-embed the lessons whose vector came from another model or other text."""
    with cli_errors(), open_memory() as mem, Progress(
            TextColumn("re-embedding"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=err_console, transient=False) as bar:  # stdout stays valid JSON
        task = bar.add_task("reindex", total=None)
        report = mem.reindex(
            force=force,
            progress=lambda done, total: bar.update(task, completed=done, total=total))
    model = mem.embedder.model_name
    if as_json:
        emit_json({"reembedded": report.reembedded, "skipped": report.skipped, "model": model})
    else:
        console.print(f"re-embedded {report.reembedded} records with {model}; "
                      f"{report.skipped} were up to date (--force re-embeds them too)")
