"""CLI edges: an import that is not UTF-8, ``db status`` before the first migration."""

from __future__ import annotations

import importlib
import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hindsight_adapters.cli import COMMAND_MODULES, app
from hindsight_core import Memory, Settings

runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def _commands(database_url: str) -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"hindsight_adapters.cli.{name}")


GOOD = json.dumps({"trigger": "deploying on Fridays", "lesson": "Deploy before Thursday noon"})


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ((GOOD + "\n" + GOOD.replace("noon", "midi \xe9t\xe9") + "\n").encode("latin-1"), 2),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", 1),
    ],
    ids=["latin-1", "binary"],
)
def test_import_of_a_file_that_is_not_utf8_exits_2_and_writes_nothing(
    content: bytes, line: int, tmp_path: Path, settings: Settings
) -> None:
    """Before: a traceback ending in UnicodeDecodeError, exit 1."""
    ns = f"cli-edges/{uuid.uuid4().hex[:8]}"
    path = tmp_path / "lessons.jsonl"
    path.write_bytes(content)
    result = runner.invoke(app, ["import", str(path), "-n", ns])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: line {line}: not UTF-8"), lines
    assert "Nothing was imported" in lines[0]
    with Memory(tuple(ns.split("/")), settings=settings) as mem:
        assert mem.namespaces(prefix=tuple(ns.split("/"))) == []


def test_db_status_before_the_first_migration_says_what_to_do(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: ``revision: None, up_to_date: False`` and no hint."""
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", fresh_db)
    result = runner.invoke(app, ["db", "status"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "hint: no schema yet: run `hindsight db upgrade`" in result.output
    assert "first write" in result.output
    status = json.loads(runner.invoke(app, ["db", "status", "--json"]).stdout)
    assert status["revision"] is None and "hindsight db upgrade" in status["hint"]
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    status = json.loads(runner.invoke(app, ["db", "status", "--json"]).stdout)
    assert status["up_to_date"] is True and status["hint"] is None
