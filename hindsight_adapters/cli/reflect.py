"""``hindsight reflect FILE`` and ``hindsight review FILE``: reflection from the shell.

FILE holds a trajectory as JSON (``-`` reads standard input)::

    {"goal": "...", "outcome": "success", "scene": "file-cleanup",
     "steps": [{"kind": "tool_call", "tool": "shell", "args": {"cmd": "..."}},
               {"kind": "tool_result", "tool": "shell", "content": "..."}],
     "recalled": ["<record id>", ...], "used": ["<record id>", ...]}

The model is the one ``HINDSIGHT_LLM_BASE_URL`` / ``HINDSIGHT_LLM_MODEL`` describe;
without them (or with ``--rule-based``) the rule-based distiller is used, and the
output says which.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from hindsight_core.errors import ValidationError

from . import _app
from ._app import JsonOpt, NamespaceOpt, app, cli_errors, console, emit_json, err_console

FileArg = typer.Argument(..., help="Trajectory JSON file ('-' for standard input).")
RuleOpt = typer.Option(
    False, "--rule-based", help="Use the rule-based distiller even if an LLM is configured."
)


def _load(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"cannot read {path}: {exc.strerror or exc}", field="FILE") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}", field="FILE"
        ) from None
    if not isinstance(data, dict):
        raise ValidationError(f"{path} must hold one trajectory object", field="FILE")
    return data


def _reflector(namespace: str, rule_based: bool) -> tuple[Any, str]:
    from hindsight_core.reflection import Reflector, llm_from_settings

    memory = _app.open_memory(namespace)
    llm = None if rule_based else llm_from_settings(memory.settings)
    if llm is not None:
        note = f"distiller: {llm.model_name} via {getattr(llm, 'base_url', 'LLM')}"
    elif rule_based:
        note = "distiller: rule-based (--rule-based)"
    else:
        note = (
            "distiller: rule-based (no LLM configured; set HINDSIGHT_LLM_BASE_URL and "
            "HINDSIGHT_LLM_MODEL to distill with a model)"
        )
    return Reflector(memory, llm), note


def _run(
    file: str, namespace: str, rule_based: bool, action: Callable[[Any, dict[str, Any]], Any]
) -> tuple[Any, str]:
    """Load FILE's trajectory, call ``action(reflector, trajectory)``, close the memory.

    Returns:
        The action's result and the note on which distiller was used.
    """
    with cli_errors():
        data = _load(file)
        reflector, note = _reflector(namespace, rule_based)
        try:
            return action(reflector, data), note
        finally:
            reflector.memory.close()


@app.command()
def reflect(
    file: str = FileArg,
    namespace: str = NamespaceOpt,
    rule_based: bool = RuleOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Distill a finished run (trajectory JSON) into 0-3 lessons and store them."""
    result, note = _run(file, namespace, rule_based, lambda r, data: r.reflect(data))
    if as_json:
        emit_json(result)
    else:
        err_console.print(note, highlight=False)
        for rec, res in zip(result.records, result.written, strict=False):
            console.print(f"{res.status:8} {res.id}  {rec['lesson']}", highlight=False)
        for res in result.reinforced:
            console.print(f"reinforced {res.id}  (a recalled lesson, repeated)", highlight=False)
        for d in result.dropped:
            console.print(f"dropped   {d['reason']}", highlight=False)
        if not result.written and not result.reinforced and not result.skipped:
            console.print("no new lesson")
    if result.skipped:
        err_console.print(f"[red]skipped:[/red] {result.error}", highlight=False)
        raise typer.Exit(1)


@app.command()
def review(
    file: str = FileArg,
    namespace: str = NamespaceOpt,
    rule_based: bool = RuleOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Review a run: reinforce used records, decay unused ones, merge near-duplicates."""
    result, note = _run(file, namespace, rule_based, lambda r, data: r.review(data))
    if as_json:
        emit_json(result)
        return
    err_console.print(note, highlight=False)
    for d in result.decisions:
        ids = ", ".join(str(i) for i in d.ids)
        extra = f" -> {d.into}: {d.lesson}" if d.into else (f": {d.lesson}" if d.lesson else "")
        console.print(f"{d.action:9} {ids}{extra}  ({d.reason})", highlight=False)
    if not result.decisions:
        console.print("nothing to review (no recalled records, no near-duplicates)")
    for error in result.errors:
        err_console.print(f"[yellow]warning:[/yellow] {error}", highlight=False)
