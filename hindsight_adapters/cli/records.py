"""Commands on experience records: write, search, used, feedback, forget, stats,
maintain, export, import, reindex."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from hindsight_core.errors import ValidationError
from hindsight_core.items import Items
from hindsight_core.memory.lifecycle import read_import_lines
from hindsight_core.models import show_namespace

from ._app import (
    JsonOpt,
    NamespaceOpt,
    app,
    cli_errors,
    console,
    emit_json,
    err_console,
    open_memory,
    parse_namespace,
    unknown_namespace,
)


def progress_bar(description: str) -> Progress:
    """A rich progress bar on stderr (stdout stays clean for ``--json``)."""
    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=False,
    )


@app.command()
def write(
    lesson: str = typer.Option(..., "--lesson", "-l", help="One actionable sentence."),
    trigger: str = typer.Option(..., "--trigger", "-t", help="When this lesson applies."),
    scene: str = typer.Option("general", "--scene", "-s"),
    action: str = typer.Option("", "--action", help="What was done."),
    outcome: str = typer.Option("", "--outcome", help="success / failure / partial, figures."),
    importance: str | None = typer.Option(None, "--importance", help="0..1"),
    confidence: str | None = typer.Option(
        None, "--confidence", help="0..1, how sure the lesson is (default 1.0)."
    ),
    critical: bool = typer.Option(False, "--critical", help="Never decays or gets evicted."),
    namespace: str = NamespaceOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write one lesson (merged into a near-duplicate if there is one)."""
    record: dict[str, Any] = {
        "lesson": lesson,
        "trigger": trigger,
        "scene": scene,
        "action": action,
        "outcome": outcome,
        "critical": critical,
    }
    if importance is not None:
        record["importance"] = importance
    if confidence is not None:
        record["confidence"] = confidence
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
    include_superseded: bool = typer.Option(
        False, "--include-superseded", help="Old versions of lessons too."
    ),
    namespace: str = NamespaceOpt,
    read: list[str] = typer.Option(
        [],
        "--read",
        "-r",
        help="Also search this namespace (labels joined by '/'; ending in '/*', it and "
        "every namespace under it, e.g. acme/team/*), ranked with --namespace's as one "
        "collection; repeatable. Each hit names the namespace it lives in (give that "
        "namespace to `hindsight used`).",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Recall the lessons most relevant to a query, with the score breakdown."""
    with cli_errors(), open_memory(namespace) as mem:
        if read:
            hits = mem.search(
                query,
                namespaces=[mem.namespace, *read],
                scene=scene,
                top_k=top_k,
                include_superseded=include_superseded,
            )
        else:
            hits = mem.search(
                query, scene=scene, top_k=top_k, include_superseded=include_superseded
            )
            if not hits and (error := unknown_namespace(mem, mem.namespace)):
                raise error
    if as_json:
        emit_json(
            [
                {
                    **h.compact(),
                    "namespace": show_namespace(h.namespace),
                    "breakdown": h.breakdown.model_dump(),
                }
                for h in hits
            ]
        )
        return
    if not hits:
        console.print(
            f"no lessons found in {escape(', '.join([namespace, *read]))}"
            + (f" (scene {escape(scene)})" if scene else ""),
            highlight=False,
        )
        return
    # One block per hit rather than a table: at 80 columns (or piped) a table cut the
    # ids to "dbe4744c…", and they must stay whole to be pasted into `hindsight used`.
    for h in hits:
        b = h.breakdown
        console.print(
            f"[bold]{h.score:.3f}[/bold]  {escape(h.record.lesson)}  "
            f"(scene {escape(h.record.scene)})\n"
            f"       when: {escape(h.record.trigger)}\n"
            f"       semantic {b.semantic:.2f}, keyword {b.keyword:.2f}, decay {b.decay:.2f}"
            f"  id {h.record.id}"
            + (f"\n       in {escape(show_namespace(h.namespace))}" if read else ""),
            highlight=False,
        )


@app.command()
def used(
    record_id: str = typer.Argument(..., help="Id of a recalled lesson."),
    unhelpful: bool = typer.Option(False, "--unhelpful", help="It was used but did not help."),
    namespace: str = typer.Option(
        "default",
        "--namespace",
        "-n",
        help="The namespace the lesson lives in (a shared one's, as `search --read` "
        "shows it), labels joined by '/'.",
    ),
    by: str | None = typer.Option(
        None, "--by", help="Who gives the feedback, recorded with it (default: --namespace)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Give feedback on a recalled lesson (helpful by default)."""
    with cli_errors(), open_memory(namespace) as mem:
        record = mem.mark_used(record_id, helpful=not unhelpful, by=by)
    if as_json:
        emit_json(record)
    else:
        console.print(f"{record.id}: score {record.score:.2f}, used {record.use_count}x")


@app.command()
def feedback(
    record_id: str = typer.Argument(..., help="Id of a lesson."),
    namespace: str = NamespaceOpt,
    limit: int = typer.Option(100, "--limit"),
    as_json: bool = JsonOpt,
) -> None:
    """The feedback given on a lesson (`hindsight used`), newest first: when, helpful or
    not, and by whom."""
    with cli_errors(), open_memory(namespace) as mem:
        given = mem.feedback(record_id, limit=limit)
    if as_json:
        emit_json(given)
        return
    if not given:
        console.print(f"no feedback on {escape(record_id)} yet", highlight=False)
    for f in given:
        console.print(
            f"{f.at.isoformat()}  {'helpful' if f.helpful else 'unhelpful'}  "
            f"by {escape(f.by or 'unknown')}",
            highlight=False,
        )


@app.command()
def forget(
    record_id: str = typer.Argument(...), namespace: str = NamespaceOpt, as_json: bool = JsonOpt
) -> None:
    """Delete a lesson for good."""
    with cli_errors(), open_memory(namespace) as mem:
        mem.forget(record_id)
    if as_json:
        emit_json({"id": record_id, "deleted": True})
    else:
        console.print(f"deleted {record_id}")


@app.command()
def stats(
    namespace: str | None = typer.Option(None, "--namespace", "-n"), as_json: bool = JsonOpt
) -> None:
    """Counts of records, namespaces, scenes, items and LLM token usage."""
    with cli_errors(), open_memory(namespace or "default") as mem:
        ns = parse_namespace(namespace) if namespace else None
        result = mem.stats(namespace=ns)
        if ns is not None and not result.records and (error := unknown_namespace(mem, ns)):
            raise error
    if as_json:
        emit_json(result)
        return
    table = Table("what", "value", show_header=False)
    for key, value in result.model_dump().items():
        table.add_row(
            key, json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else str(value)
        )
    console.print(table)


@app.command()
def maintain(
    namespace: str | None = typer.Option(
        None, "--namespace", "-n", help="Default: every namespace."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Archive decayed lessons (below the eviction score) and sweep expired items."""
    with cli_errors(), open_memory(namespace or "default") as mem:
        report = mem.maintain(namespace=parse_namespace(namespace) if namespace else None)
    if as_json:
        emit_json(report)
    else:
        console.print(
            f"archived {report.archived} decayed lessons, swept "
            f"{report.expired_items} expired items and {report.expired_tasks} tasks"
        )


@app.command()
def export(
    path: Path = typer.Argument(..., help="JSON-lines file to write ('-' for stdout)."),
    namespace: str = NamespaceOpt,
    all_namespaces: bool = typer.Option(False, "--all", help="Every namespace."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the count as JSON (with '-' the JSON lines are the output)."
    ),
) -> None:
    """Export lessons (archived too) as JSON lines."""
    to_stdout = str(path) == "-"
    with cli_errors(), open_memory(namespace) as mem:
        if not all_namespaces and (error := unknown_namespace(mem, mem.namespace)):
            raise error
        count = mem.export(sys.stdout if to_stdout else path, all_namespaces=all_namespaces)
    if to_stdout:
        return
    if as_json:
        emit_json({"exported": count, "path": str(path)})
    else:
        console.print(f"exported {count} records to {escape(str(path))}", highlight=False)


@app.command("import")
def import_(
    path: Path = typer.Argument(
        ...,
        help="JSON-lines file: written by `hindsight export`, "
        "or one record per line (lesson, trigger, ...).",
    ),
    namespace: str = typer.Option(
        "default",
        "--namespace",
        "-n",
        help="Namespace of lines that name none (labels joined by '/').",
    ),
    skip_invalid: bool = typer.Option(
        False, "--skip-invalid", help="Import the good lines, report the bad ones."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Import lessons from JSON lines (nothing is imported if a line is bad).

    Lines with an ``id`` (an export) are restored as they were, unless already
    present. Lines without one are new lessons: written like ``hindsight write``,
    so a near-duplicate merges into a stored lesson.
    """
    if not path.exists():
        with cli_errors():
            raise ValidationError(f"no such file: {path}", field="path")
    with cli_errors():  # read first: a file that is not UTF-8 is one line, no database
        lines = read_import_lines(path)
    with cli_errors(), open_memory(namespace) as mem, progress_bar("importing") as bar:
        task = bar.add_task("import", total=None)
        report = mem.import_records(
            lines,
            skip_invalid=skip_invalid,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    if as_json:
        emit_json(report)
        return
    parts = [f"imported {report['imported']} records"]
    if report["merged"]:
        parts.append(f"{report['merged']} merged into near-duplicates")
    if report["already_present"]:
        parts.append(f"{report['already_present']} were already present (kept)")
    if report["skipped_lines"]:
        parts.append(f"skipped lines {report['skipped_lines']}")
    console.print("; ".join(parts), highlight=False)


@app.command()
def reindex(
    force: bool = typer.Option(
        False,
        "--force",
        help="Re-embed every record, even those up to date (with --indexes-only: rebuild "
        "every item index).",
    ),
    indexes_only: bool = typer.Option(
        False,
        "--indexes-only",
        help="Only rebuild the stale ivfflat indexes of items; re-embed nothing.",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Re-embed the lessons whose vector came from another model or other text, and
    rebuild the items' ivfflat indexes built on far fewer rows than they hold."""
    report = None
    with cli_errors(), open_memory() as mem:
        if not indexes_only:
            with progress_bar("re-embedding") as bar:
                task = bar.add_task("reindex", total=None)
                report = mem.reindex(
                    force=force,
                    progress=lambda done, total: bar.update(task, completed=done, total=total),
                )
        rebuilt = Items(mem).rebuild_indexes(force=force and indexes_only)
    model = None if report is None else mem.embedder.model_name
    if as_json:
        out: dict[str, Any] = {"rebuilt_indexes": [h.as_dict() for h in rebuilt]}
        if report is not None:
            out.update(reembedded=report.reembedded, skipped=report.skipped, model=model)
        emit_json(out)
        return
    if report is not None:
        console.print(
            f"re-embedded {report.reembedded} records with {model}; "
            f"{report.skipped} were up to date (--force re-embeds them too)"
        )
    for h in rebuilt:
        console.print(f"rebuilt item index {h.name} on {h.rows} vectors", highlight=False)
