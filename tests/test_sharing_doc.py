"""docs/sharing.md, run: its Python block against the real database (the shell lines
are checked in test_operations.py, the MCP behaviour in test_mcp_sharing.py)."""

from __future__ import annotations

from typing import Any

import pytest
from _docs import run_python_block


def test_the_sharing_page_python_runs(
    fresh_db: str, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = run_python_block("sharing.md", fresh_db, embedder, monkeypatch)
    mem = scope["mem"]
    try:
        assert {h.record.id for h in scope["everything"]} == {scope["shared"].id, scope["mine"].id}
        given = mem.feedback(scope["shared"].id, namespace=("acme", "shared"))
        assert [(f.helpful, f.by) for f in given] == [(True, "agent-a")]
    finally:
        mem.close()
