"""docs/sharing.md, run: its Python block against the real database (the shell lines
are checked in test_operations.py, the MCP behaviour in test_mcp_sharing.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

DOC = (Path(__file__).parent.parent / "docs" / "sharing.md").read_text(encoding="utf-8")


def test_the_sharing_page_python_runs(
    fresh_db: str, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HINDSIGHT_DATABASE_URL", fresh_db)
    import hindsight_core.memory.base as base

    monkeypatch.setattr(base, "embedder_from_settings", lambda settings: embedder)
    block = DOC.split("```python", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(compile(block, "docs/sharing.md", "exec"), scope)  # noqa: S102
    mem = scope["mem"]
    try:
        assert {h.record.id for h in scope["everything"]} == {scope["shared"].id, scope["mine"].id}
        given = mem.feedback(scope["shared"].id, namespace=("acme", "shared"))
        assert [(f.helpful, f.by) for f in given] == [(True, "agent-a")]
    finally:
        mem.close()
