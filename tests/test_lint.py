"""The habits CI checks: ruff's lint rules and format, and mypy (strict) on the code.

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
