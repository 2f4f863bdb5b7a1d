"""``hindsight demo``: a first run goes wrong, its lesson is stored, a second run recalls it."""

from __future__ import annotations

import typer

from ._app import JsonOpt, app, cli_errors, console, emit_json


@app.command()
def demo(
    keep: bool = typer.Option(
        False,
        "--keep",
        help="Keep the demo's namespace (demo/<hex>) "
        "instead of dropping it at the end, e.g. to browse it in "
        "`hindsight ui`.",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Show the point of Hindsight in under a minute, offline, on the embedded database."""
    from hindsight_core.demo import run_demo
    from hindsight_core.memory import Memory

    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if not as_json:
            console.print(line, highlight=False, markup=False)

    with cli_errors(), Memory(("demo",)) as mem:
        # The model first: without it (no `local` extra, an endpoint down) the story
        # stopped half-way, after a run with "no lesson written".
        mem.embedder.embed_documents(["Check the extension before deleting dated files"])
        if not as_json:
            where = "embedded PostgreSQL" if mem.settings.database_url is None else "configured"
            console.print(
                "Hindsight demo: a file-cleanup agent learns from its mistake.\n"
                f"(embedding model: {mem.embedder.model_name}; database: {where})",
                highlight=False,
            )
        summary = run_demo(say, mem, keep=keep)
    if as_json:
        emit_json({**summary, "log": lines})
    if summary["second_broke_build"]:
        raise typer.Exit(1)
