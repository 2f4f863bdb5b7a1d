"""What the docs and the inspector name exists: every MCP tool they tell a user to
call is one the server has."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from hindsight_core import AsyncMemory, Settings

ROOT = Path(__file__).parent.parent
SPAN = re.compile(r"`([^`\n]+)`|<code>([^<]+)</code>")
IDENTIFIER = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
NEAR = 150  # characters before a name in which "tool" makes it a tool's name


def _texts() -> list[Path]:
    ui = ROOT / "hindsight_adapters" / "ui"
    return [  # not the CHANGELOG: history, which names LangGraph's nodes and tools too
        *(p for p in ROOT.glob("*.md") if p.name != "CHANGELOG.md"),
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "docker").glob("*.md"),
        *(ROOT / "integrations").rglob("*.md"),
        *ui.rglob("*.md"),
        *ui.rglob("*.html"),
        *ui.rglob("*.js"),
    ]


def named_tools(path: Path) -> set[str]:
    """The names a text gives MCP tools: code spans in a paragraph about MCP with the
    word "tool" shortly before them."""
    names = set()
    for para in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
        if not re.search(r"(?i)\bmcp\b", para):
            continue
        for match in SPAN.finditer(para):
            name = match.group(1) or match.group(2)
            before = para[max(0, match.start() - NEAR) : match.start()]
            if IDENTIFIER.fullmatch(name) and re.search(r"(?i)\btools?\b", before):
                names.add(name)
    return names


def server_tools() -> set[str]:
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    from mcp import Client

    from hindsight_adapters.mcp.server import build_server

    async def listed() -> set[str]:
        # Listing tools touches no database: the URL is never connected.
        memory = AsyncMemory(("docs",), settings=Settings(database_url="postgresql://x@h/db"))
        async with Client(build_server(memory)) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    return asyncio.run(listed())


def test_every_mcp_tool_the_docs_and_the_inspector_name_exists() -> None:
    """Before: the inspector's empty page said to call ``hindsight_write``."""
    tools = server_tools()
    named = {path.relative_to(ROOT).as_posix(): named_tools(path) for path in _texts()}
    unknown = {where: sorted(names - tools) for where, names in named.items() if names - tools}
    assert unknown == {}
    # The scan sees what it should (the README's list of tools, the empty page's hint).
    assert {"search_memory", "write_memory", "reflect_task"} <= named["README.md"]
    assert "write_memory" in named["hindsight_adapters/ui/templates/index.html"]
