"""The habits CI checks: ruff's lint rules and format, and mypy (strict) on the code,
benchmarks included (``[tool.mypy] files`` in ``pyproject.toml`` lists bench/).

Run from the repository root with the dev tools (``bash scripts/install.sh --dev``);
the versions are pinned in ``pyproject.toml`` so that a new release cannot move the
formatting under a green tree. To fix what these report: ``ruff format .``,
``ruff check --fix .``, and mypy's messages name file and line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize(
    "command",
    [
        ("ruff", "check", "."),
        ("ruff", "format", "--check", "."),
        ("mypy",),
    ],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_tree_is_clean(command: tuple[str, ...]) -> None:
    done = _run(*command)
    assert done.returncode == 0, f"{' '.join(command)} found:\n{done.stdout}{done.stderr}"


def test_mypy_checks_the_benchmarks() -> None:
    """bench/ is type-checked like the package (it had drifted: a stale ``embed`` call)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert {"hindsight_core", "hindsight_adapters", "bench"} <= set(config["files"])
    assert config["strict"] is True
