"""Helpers for the tests that run the docs' examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).parent.parent / "docs"


def run_python_block(
    page: str, database_url: str, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """Run the first ```python block of ``docs/<page>`` on ``database_url``, with the
    session's model for the embedder the block builds from its settings; returns its
    globals."""
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", database_url)
    import hindsight_core.memory.base as base

    monkeypatch.setattr(base, "embedder_from_settings", lambda settings: embedder)
    doc = (DOCS / page).read_text(encoding="utf-8")
    block = doc.split("```python", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(compile(block, f"docs/{page}", "exec"), scope)
    return scope
