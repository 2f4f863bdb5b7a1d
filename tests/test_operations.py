"""docs/operations.md, run: where the data lives, a PostgreSQL of your own with the
documented grants (and the error when pgvector cannot be installed), upgrading and
what an older version does with a newer schema, backup and restore of the embedded
database.

Internals: ``storage.embedded`` and ``storage.migrate``, to stand up, stop and downgrade
servers and schemas as the operator's guide does with the CLI."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from _mcp_util import CLI
from alembic import command
from typer.testing import CliRunner

from hindsight_adapters.cli import COMMAND_MODULES, app
from hindsight_core import Memory, Settings
from hindsight_core.storage import embedded, migrate

DOC = (Path(__file__).parent.parent / "docs" / "operations.md").read_text(encoding="utf-8")
runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def _commands(database_url: str) -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"hindsight_adapters.cli.{name}")


def sql_block(first_line: str) -> str:
    """The doc's ```sql block that starts with the comment ``first_line``."""
    for block in re.findall(r"```sql\n(.*?)```", DOC, flags=re.S):
        if block.startswith(first_line):
            return block
    raise AssertionError(f"no sql block starting {first_line!r}")


def statements(block: str, names: dict[str, str]) -> list[str]:
    """The block's statements with the doc's names replaced by the test's."""
    text = "\n".join(line for line in block.splitlines() if not line.startswith("--"))
    for old, new in names.items():
        text = re.sub(rf"\b{old}\b", new, text)
    return [s.strip() for s in text.split(";") if s.strip()]


# -- where the data lives ------------------------------------------------------------


def test_the_documented_default_data_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HINDSIGHT_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", "/home/someone")
    settings = Settings()
    assert embedded.pgdata_dir(settings.home) == Path("/home/someone/.local/share/hindsight/pgdata")
    assert "`~/.local/share/hindsight/pgdata`" in DOC
    monkeypatch.setenv("XDG_DATA_HOME", "/data")
    assert Settings().home == Path("/data/hindsight")
    assert "`$XDG_DATA_HOME/hindsight/pgdata`" in DOC


# -- a PostgreSQL of your own -------------------------------------------------------


@pytest.fixture
def own_database(database_url: str) -> Iterator[dict[str, Any]]:
    """A role and a database made with the doc's first block (as the superuser)."""
    suffix = uuid.uuid4().hex[:8]
    names = {"hindsight": f"ops_{suffix}"}
    admin = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for stmt in statements(sql_block("-- once, as a superuser, in any database"), names):
            conn.execute(sa.text(stmt))
    base = sa.make_url(database_url)
    target = base.set(database=names["hindsight"])
    yield {
        "names": names,
        "superuser_url": target.render_as_string(hide_password=False),
        # the embedded server trusts local connections: the role's password is not asked
        "role_url": target.set(username=names["hindsight"], password=None).render_as_string(
            hide_password=False
        ),
    }
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{names["hindsight"]}" WITH (FORCE)'))
        conn.execute(sa.text(f'DROP ROLE IF EXISTS "{names["hindsight"]}"'))
    admin.dispose()


def _upgrade_fails(url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", url)
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert migrate.revision_at(url) is None  # nothing half-created
    return lines[0]


def test_a_role_without_the_schema_grant_is_told_which_grant(
    own_database: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "database error: permission denied for schema public", nothing more."""
    line = _upgrade_fails(own_database["role_url"], monkeypatch)
    assert "permission denied for schema public" in line, line
    assert "GRANT USAGE, CREATE ON SCHEMA public TO" in line, line


def test_a_role_that_may_not_create_the_extension_gets_one_clear_line(
    own_database: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "database error: permission denied to create extension "vector"" (the
    server has pgvector; this database does not, and the role may not install it)."""
    block = sql_block("-- once, as a superuser, in the hindsight database")
    grants = [s for s in statements(block, own_database["names"]) if "EXTENSION" not in s]
    superuser = sa.create_engine(own_database["superuser_url"], isolation_level="AUTOCOMMIT")
    with superuser.connect() as conn:
        for stmt in grants:
            conn.execute(sa.text(stmt))
    superuser.dispose()
    line = _upgrade_fails(own_database["role_url"], monkeypatch)
    assert "may not install it" in line and "CREATE EXTENSION vector;" in line, line


def test_the_documented_grants_are_enough(
    own_database: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    embedder: Any,
) -> None:
    superuser = sa.create_engine(own_database["superuser_url"], isolation_level="AUTOCOMMIT")
    block = sql_block("-- once, as a superuser, in the hindsight database")
    with superuser.connect() as conn:
        for stmt in statements(block, own_database["names"]):
            conn.execute(sa.text(stmt))
        is_super = conn.execute(
            sa.text("SELECT rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = :r"),
            {"r": own_database["names"]["hindsight"]},
        ).scalar_one()
    superuser.dispose()
    assert is_super is False  # the role is an ordinary one
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", own_database["role_url"])
    result = runner.invoke(app, ["db", "upgrade", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["up_to_date"] is True
    settings = Settings(database_url=own_database["role_url"])
    with Memory(("ops",), settings=settings, embedder=embedder) as mem:
        mem.write({"trigger": "deploying on Friday", "lesson": "Deploy before Thursday noon"})
        assert [h.record.lesson for h in mem.search("deploy on friday")] == [
            "Deploy before Thursday noon"
        ]


# -- upgrading ------------------------------------------------------------------------


def _at_revision(url: str, revision: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        command.downgrade(migrate.alembic_config(conn), revision)
    engine.dispose()


def test_upgrade_after_an_older_version(fresh_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", fresh_db)
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    head = migrate.head_revision()
    older = sorted(migrate.known_revisions())[-2]
    _at_revision(fresh_db, older)  # as a previous release left it
    status = json.loads(runner.invoke(app, ["db", "status", "--json"]).stdout)
    assert status["revision"] == older
    assert status["hint"] == f"run `hindsight db upgrade` to migrate from {older} to {head}"
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    assert json.loads(runner.invoke(app, ["db", "status", "--json"]).stdout)["up_to_date"]


def test_an_older_version_refuses_a_newer_schema(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: Alembic's "Can't locate revision identified by ..." as a database error."""
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", fresh_db)
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    engine = sa.create_engine(fresh_db)
    with engine.begin() as conn:  # as a newer release would leave it
        conn.execute(sa.text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = 'ffff'"))
    engine.dispose()
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 1, result.output
    assert "newer than this Hindsight knows" in result.output
    assert "pip install -U agent-hindsight" in result.output
    status = json.loads(runner.invoke(app, ["db", "status", "--json"]).stdout)
    assert "newer than this package knows" in status["hint"]


# -- backup and restore of the embedded database --------------------------------------


@pytest.fixture
def homes() -> Iterator[tuple[Path, Path]]:
    made = []
    for _ in range(2):
        home = Path(tempfile.mkdtemp(prefix="hindsight-ops-"))
        home.chmod(0o755)  # the server runs as its own user when the tests run as root
        made.append(home)
    yield made[0], made[1]
    for home in made:
        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``hindsight <args>`` on the embedded database of ``home`` (no URL)."""
    env = {k: v for k, v in os.environ.items() if k != "HINDSIGHT_DATABASE_URL"}
    env["HINDSIGHT_HOME"] = str(home)
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=300)


def lessons(home: Path, embedder: Any) -> set[str]:
    with Memory(("ops",), settings=Settings(home=home), embedder=embedder) as mem:
        return {r.lesson for r in mem.list_records(limit=100)}


def test_backup_and_restore_round_trip(
    homes: tuple[Path, Path], embedder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HINDSIGHT_DATABASE_URL")
    first, second = homes
    kept = {"Deploy before Thursday noon", "Check the extension before deleting files"}
    with Memory(("ops",), settings=Settings(home=first), embedder=embedder) as mem:
        for i, lesson in enumerate(sorted(kept)):
            mem.write({"trigger": f"situation {i}", "lesson": lesson})
    dump = tmp_path / "lessons.dump"
    done = cli(first, "db", "backup", str(dump))
    assert done.returncode == 0, done.stderr
    assert dump.read_bytes()[:5] == b"PGDMP"

    # Into another home (another machine): its own lesson is replaced by the backup's.
    with Memory(("ops",), settings=Settings(home=second), embedder=embedder) as mem:
        mem.write({"trigger": "elsewhere", "lesson": "A lesson the restore replaces"})
    embedded.stop(second)  # the doc: stop what uses the database first
    status = cli(second, "db", "status")
    assert f"data: {(second / 'pgdata').resolve()}" in status.stdout, status.stdout
    done = cli(second, "db", "restore", str(dump), "--yes")
    assert done.returncode == 0, done.stderr
    assert f"schema at revision {migrate.head_revision()}" in done.stdout
    assert lessons(second, embedder) == kept


def test_restore_refuses_a_file_that_is_not_a_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_db: str
) -> None:
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", fresh_db)
    bogus = tmp_path / "lessons.jsonl"
    bogus.write_text('{"lesson": "x"}\n')
    result = runner.invoke(app, ["db", "restore", str(bogus), "--yes"])
    assert result.exit_code == 2 and "not a backup" in result.output, result.output
    result = runner.invoke(app, ["db", "restore", str(tmp_path / "missing.dump"), "--yes"])
    assert result.exit_code == 2 and "no such backup file" in result.output, result.output


@pytest.mark.parametrize(("page", "least"), [("operations.md", 4), ("sharing.md", 4)])
def test_every_command_the_doc_shows_exists(page: str, least: int) -> None:
    """The shell lines not run above (``pip install``, an example URL) name real
    commands and options (docs/sharing.md's example is run in test_mcp_sharing.py)."""
    import typer

    doc = (Path(__file__).parent.parent / "docs" / page).read_text(encoding="utf-8")
    root = typer.main.get_command(app)
    shown = 0
    for block in re.findall(r"```sh\n(.*?)```", doc, flags=re.S):
        for line in block.splitlines():
            words = line.split("#")[0].split()
            while words and "=" in words[0]:  # VAR=value before the command
                words.pop(0)
            if not words or words[0] != "hindsight":
                continue
            shown += 1
            command: Any = root
            for word in words[1:]:
                if word.startswith("-"):
                    names = {n for p in command.params for n in getattr(p, "opts", [])}
                    assert word in names, f"{line!r}: no option {word} on {command}"
                elif hasattr(command, "get_command"):  # a group (typer vendors click)
                    sub = command.get_command(None, word)
                    assert sub is not None, f"{line!r}: no command {word}"
                    command = sub
    assert shown >= least
