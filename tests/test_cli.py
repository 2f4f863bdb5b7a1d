"""The ``hindsight`` CLI, in-process through Typer's runner, on the session database."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hindsight_core.cli import COMMAND_MODULES, app, main  # noqa: F401

runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def _commands(database_url: str) -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"hindsight_core.cli.{name}")


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "250"})
    return result.exit_code, result.output


@pytest.fixture
def ns() -> str:
    return f"cli/{uuid.uuid4().hex[:8]}"


def test_write_search_used_forget(ns: str) -> None:
    code, out = invoke("write", "-n", ns, "-s", "api", "-t", "the API returns 429",
                       "-l", "Retry with exponential backoff", "--importance", "0.7", "--json")
    assert code == 0, out
    rid = json.loads(out)["id"]
    code, out = invoke("write", "-n", ns, "-s", "api", "-t", "the API returns 429",
                       "-l", "Retry using exponential backoff", "--json")
    assert json.loads(out)["status"] == "merged"
    code, out = invoke("search", "rate limited by the API", "-n", ns, "--json")
    hits = json.loads(out)
    assert hits[0]["id"] == rid and set(hits[0]["breakdown"]) >= {"semantic", "keyword", "final"}
    code, out = invoke("search", "rate limited by the API", "-n", ns)
    assert code == 0 and "Retry with exponential backoff" in out
    code, out = invoke("used", rid, "-n", ns, "--json")
    assert json.loads(out)["use_count"] == 1
    code, out = invoke("stats", "-n", ns, "--json")
    assert json.loads(out)["records"] == 1 and json.loads(out)["scenes"] == {"api": 1}
    code, out = invoke("forget", rid, "-n", ns)
    assert code == 0
    code, out = invoke("forget", rid, "-n", ns)
    assert code == 1 and "no record" in out


def test_bad_input_exits_2_with_the_field(ns: str) -> None:
    code, out = invoke("write", "-n", ns, "-t", "x", "-l", "y" * 80)
    assert code == 2 and "lesson" in out
    code, out = invoke("write", "-n", ns, "-t", "x", "-l", "ok", "--importance", "high")
    assert code == 2 and "importance" in out
    code, out = invoke("used", "not-an-id", "-n", ns)
    assert code == 2 and "id" in out


def test_export_import(ns: str, tmp_path: Path) -> None:
    invoke("write", "-n", ns, "-t", "deploying", "-l", "Run migrations before the deploy")
    out_file = tmp_path / "lessons.jsonl"
    code, out = invoke("export", str(out_file), "-n", ns)
    assert code == 0 and out_file.read_text().count("\n") == 1
    # importing the same ids again imports nothing new (kept as they are)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(out_file.read_text() + "{broken\n")
    code, out = invoke("import", str(bad))
    assert code == 1 or code == 2
    assert "line 2" in out
    code, out = invoke("import", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "no such file" in out


def test_db_status_and_maintain(fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # its own database: maintain sweeps every namespace
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", fresh_db)
    code, out = invoke("db", "status", "--json")
    assert code == 0 and json.loads(out)["revision"] is None
    code, out = invoke("db", "upgrade")
    assert code == 0 and "schema at revision" in out
    code, out = invoke("db", "status", "--json")
    info = json.loads(out)
    assert code == 0 and info["up_to_date"] is True and info["embedded"] is False
    code, out = invoke("maintain", "--json")
    assert code == 0 and "archived" in json.loads(out)


def test_demo_shows_the_mistake_avoided() -> None:
    code, out = invoke("demo", "--json")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["first_broke_build"] is True
    assert summary["second_broke_build"] is False
    assert summary["lessons"] >= 1 and summary["recalled"] >= 1
    assert summary["merged"] == "merged"
    assert summary["records_before"] == summary["records_after"]


def test_help_lists_the_documented_commands() -> None:
    code, out = invoke("--help")
    for command in ("write", "search", "used", "forget", "stats", "maintain", "export",
                    "import", "reindex", "db", "demo"):
        assert command in out
