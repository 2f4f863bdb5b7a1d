"""The MCP server over stdio (``hindsight mcp`` as a subprocess), and degraded recall.

The stdio session is started once for the module; the degradation tests serve
the HTTP app from a uvicorn thread in this process (reusing the session's model)
against a database that refuses connections or never answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from _mcp_util import http_client, serving, stdio_client, text
from mcp import Client, StdioServerParameters

from hindsight_adapters.mcp import build_http_app
from hindsight_core import AsyncMemory, Settings

UNREACHABLE = "postgresql+psycopg://u@127.0.0.1:1/x"


@pytest.fixture(scope="module")
def stdio_namespace() -> tuple[str, str]:
    return ("stdio", uuid.uuid4().hex[:10])


@pytest.fixture(scope="module")
async def stdio(database_url: str, stdio_namespace: tuple[str, str]) -> AsyncIterator[Any]:
    async with stdio_client(["mcp", "--namespace", "/".join(stdio_namespace)]) as client:
        yield client


async def test_stdio_round_trip_in_configured_namespace(
    stdio: Any, stdio_namespace: tuple[str, str]
) -> None:
    tools = {t.name: t for t in (await stdio.list_tools()).tools}
    assert {"search_memory", "write_memory", "update_memory_usage", "forget_memory"} <= set(tools)
    assert all(t.output_schema for t in tools.values())

    wrote = await stdio.call_tool(
        "write_memory",
        {
            "scene": "scraping",
            "trigger": "a site rate-limits requests",
            "action": "added sleep between pages",
            "outcome": "success",
            "lesson": "Throttle requests to rate-limited sites",
            "importance": "0.5",
        },
    )
    assert not wrote.is_error, text(wrote)
    rid = wrote.structured_content["id"]
    found = await stdio.call_tool(
        "search_memory", {"query": "site returns 429 errors", "scene": "scraping"}
    )
    assert [r["id"] for r in found.structured_content["results"]] == [rid]
    used = await stdio.call_tool("update_memory_usage", {"id": rid, "helpful": "false"})
    assert used.structured_content["helpful"] is False
    stats = json.loads((await stdio.read_resource("memory://stats")).contents[0].text)
    assert stats["namespace"] == list(stdio_namespace)
    assert stats["records"] == 1 and stats["scenes"] == {"scraping": 1}
    assert not (await stdio.call_tool("forget_memory", {"id": rid})).is_error
    stats = json.loads((await stdio.read_resource("memory://stats")).contents[0].text)
    assert stats["records"] == 0


async def test_stdio_oversized_argument_is_a_tool_error(stdio: Any) -> None:
    result = await stdio.call_tool(
        "write_memory",
        {"scene": "s", "trigger": "t", "action": "a" * 25_000, "outcome": "o", "lesson": "l"},
    )
    assert result.is_error and "action" in text(result)
    stats = json.loads((await stdio.read_resource("memory://stats")).contents[0].text)
    assert stats["records"] == 0


# What the engine is made of, past the URL check (which parses a configured URL with
# SQLAlchemy's core before serving): the driver, numpy, migrations, the memory's modules.
ENGINE = (
    "psycopg",
    "numpy",
    "alembic",
    "hindsight_core.storage.engine",
    "hindsight_core.memory",
    "hindsight_core.runtime",
)
# ``hindsight mcp`` with every import of the engine noted (thread, module) as it starts.
TRACED = f"""
import os, sys, threading
log = open(os.environ["IMPORT_LOG"], "w", buffering=1)
def hook(event, args):
    if event == "import" and args[0].startswith({ENGINE!r}):
        log.write(threading.current_thread().name + " " + args[0] + "\\n")
sys.addaudithook(hook)
from hindsight_adapters.cli import main
main()
"""


async def test_stdio_initialize_does_not_wait_for_the_engine(
    database_url: str, tmp_path: Path
) -> None:
    """The answer to ``initialize`` needs the SDK and the tools' schemas only: the
    server's own thread imports nothing of the engine until the client has it (the
    memory is built by a thread of its own), and the tools work once it is built."""
    log = tmp_path / "imports"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", TRACED, "mcp", "--namespace", f"stdio/{uuid.uuid4().hex[:10]}"],
        env={**os.environ, "IMPORT_LOG": str(log)},
    )
    async with Client(params) as client:  # initialize answered
        on_main = [line for line in log.read_text().splitlines() if line.startswith("MainThread")]
        found = await client.call_tool("search_memory", {"query": "deploy on a Friday"})
    assert on_main == [], on_main
    assert not found.is_error, text(found)
    loaded = log.read_text()  # the hook saw the engine load: by another thread
    assert " psycopg" in loaded and " hindsight_core.memory" in loaded, loaded


# ----------------------------------------------------------------- degraded database


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A port that accepts TCP connections and then never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"postgresql+psycopg://u@127.0.0.1:{sock.getsockname()[1]}/x"


@pytest.mark.parametrize("where", ["refused", "silent"])
async def test_search_degrades_when_database_is_down(where: str, blackhole: str) -> None:
    url = UNREACHABLE if where == "refused" else blackhole
    settings = Settings(database_url=url, recall_timeout=1.0, connect_timeout=10)
    memory = AsyncMemory(("down",), settings=settings)  # the model is never reached
    token = uuid.uuid4().hex * 2
    app = build_http_app(memory, {token: ("down",)}, host="127.0.0.1", max_body=100_000)
    with serving(app, start_timeout=10, timeout_graceful_shutdown=2) as base:
        async with http_client(f"{base}/mcp", token) as client:
            # bounded by the recall timeout (1 s), not the connect timeout (10 s)
            search = client.call_tool("search_memory", {"query": "deploy on Friday"})
            try:
                result = await asyncio.wait_for(search, settings.connect_timeout / 2)
            except TimeoutError:
                pytest.fail(
                    "search_memory still waiting after 5 s: not bounded by "
                    "HINDSIGHT_RECALL_TIMEOUT (1 s)"
                )
            assert not result.is_error, text(result)
            assert result.structured_content["results"] == []
            assert "memory unavailable" in result.structured_content["warning"]
            if where == "silent":
                assert "recall timed out" in result.structured_content["warning"]
            if where == "refused":
                wrote = await client.call_tool(
                    "write_memory",
                    {
                        "scene": "s",
                        "trigger": "t",
                        "action": "a",
                        "outcome": "o",
                        "lesson": "Some lesson",
                    },
                )
                assert wrote.is_error and "database unavailable" in text(wrote), text(wrote)


async def test_stats_resource_says_the_database_is_down(caplog: pytest.LogCaptureFixture) -> None:
    """Not the SDK's generic "Error reading resource" with two tracebacks in the log."""
    from mcp import MCPError

    memory = AsyncMemory(("down",), settings=Settings(database_url=UNREACHABLE, connect_timeout=5))
    token = uuid.uuid4().hex * 2
    app = build_http_app(memory, {token: ("down",)}, host="127.0.0.1", max_body=100_000)
    with serving(app, start_timeout=10, timeout_graceful_shutdown=2) as base:
        async with http_client(f"{base}/mcp", token) as client:
            with pytest.raises(MCPError) as info:
                await client.read_resource("memory://stats")
    assert "database unavailable" in str(info.value), str(info.value)
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records), (
        caplog.text
    )
