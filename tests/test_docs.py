"""The README matches the code: its Python tour runs, its settings table is complete,
and the CLI commands it shows exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hindsight_core import Settings

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def test_every_setting_is_documented() -> None:
    missing = [
        f"HINDSIGHT_{name.upper()}"
        for name in Settings.model_fields
        if f"`HINDSIGHT_{name.upper()}`" not in README
    ]
    assert missing == []


def test_documented_settings_exist() -> None:
    documented = set(re.findall(r"`HINDSIGHT_([A-Z_]+)`", README))
    assert documented <= {name.upper() for name in Settings.model_fields}


def test_documented_defaults_are_the_settings_defaults() -> None:
    """A default the table gives as a plain number or word is the field's default (the
    ones given as "unset" are None; "the model's" and such are described in words)."""
    rows = re.findall(r"^\| `HINDSIGHT_([A-Z_]+)` \| ([^|]*) \|", README, flags=re.M)
    checked, wrong = 0, []
    for name, cell in rows:
        default = Settings.model_fields[name.lower()].default
        cell = cell.strip()
        if cell == "unset":
            ok = default is None
        elif isinstance(default, str) and re.fullmatch(r"[\w.-]+", cell):
            ok = cell == default
        elif re.fullmatch(r"[0-9.]+", cell):
            ok = isinstance(default, int | float) and float(cell) == default
        else:
            continue
        checked += 1
        if not ok:
            wrong.append((name, cell, default))
    assert checked > 30 and wrong == []


def test_python_tour_runs(
    fresh_db: str,
    embedder,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    # its own database: the tour's maintain() sweeps every namespace
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", fresh_db)
    block = README.split("### Python", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    import hindsight_core.embeddings as embeddings

    # the tour builds its embedder from the settings; reuse the session's loaded model
    monkeypatch.setattr(embeddings, "embedder_from_settings", lambda settings: embedder)
    import hindsight_core.memory.base as base

    monkeypatch.setattr(base, "embedder_from_settings", lambda settings: embedder)
    namespace: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    first = namespace["result"]
    assert first.status == "inserted"  # type: ignore[attr-defined]  # a fresh database
    # the reflection example continues with the same `mem`
    reflection = README.split("## Reflection", 1)[1].split("```python", 1)[1].split("```")[0]
    exec(compile(reflection, "README.md", "exec"), namespace)
    written = namespace["result"].written  # type: ignore[attr-defined]
    assert written and written[0].status == "inserted"
    mem = namespace["mem"]
    try:
        assert "--user" in mem.get(written[0].id).lesson  # type: ignore[attr-defined]
        # the tour's search found its lesson and marked it used
        assert mem.get(first.id).use_count == 1  # type: ignore[attr-defined]
    finally:
        mem.close()  # type: ignore[attr-defined]


def test_cli_commands_in_readme_exist() -> None:
    import importlib

    from hindsight_adapters.cli import COMMAND_MODULES, app

    for name in COMMAND_MODULES:
        importlib.import_module(f"hindsight_adapters.cli.{name}")
    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    names |= {g.name for g in app.registered_groups}
    shown = set(re.findall(r"^hindsight ([a-z]+)", README, flags=re.M))
    assert shown and shown <= names, shown - names
