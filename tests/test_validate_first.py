"""Bad arguments are refused before any I/O: while the database does not answer yet
(it is starting, or it hangs), a NUL byte in ``scene`` is the validation error that
later calls give, not "memory unavailable ... recall timed out"."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from hindsight_core import AsyncMemory, Memory, Settings, ValidationError
from hindsight_core.embeddings.callable import CallableEmbedder


@pytest.fixture
def hung_url() -> Iterator[str]:
    """A database that does not answer (still starting, or hung): a socket that takes
    connections and never says a word, so a client that connected would wait."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield f"postgresql://nobody@127.0.0.1:{server.getsockname()[1]}/hindsight"


def _settings(url: str) -> Settings:
    return Settings(database_url=url, recall_timeout=0.5)


def _embedder() -> CallableEmbedder:
    return CallableEmbedder(
        lambda texts: np.ones((len(texts), 8), dtype=np.float32), dim=8, model_name="ones"
    )


BAD = [
    ({"scene": "deploy\x00"}, "scene"),
    ({"top_k": 0}, "top_k"),
    ({"query": "\x00"}, "query"),
]


@pytest.mark.parametrize(("args", "field"), BAD, ids=[f for _, f in BAD])
@pytest.mark.parametrize("call", ["recall", "search"])
def test_sync_refuses_before_waiting_for_the_database(
    hung_url: str, args: dict[str, Any], field: str, call: str
) -> None:
    kwargs = {"query": "deploy the app", **args}
    with (
        Memory(("v",), settings=_settings(hung_url), embedder=_embedder()) as mem,
        pytest.raises(ValidationError) as err,
    ):
        getattr(mem, call)(kwargs.pop("query"), **kwargs)
    assert err.value.field == field


@pytest.mark.parametrize(("args", "field"), BAD, ids=[f for _, f in BAD])
@pytest.mark.parametrize("call", ["recall", "search"])
async def test_async_refuses_before_waiting_for_the_database(
    hung_url: str, args: dict[str, Any], field: str, call: str
) -> None:
    kwargs = {"query": "deploy the app", **args}
    mem = AsyncMemory(("v",), settings=_settings(hung_url), embedder=_embedder())
    try:
        with pytest.raises(ValidationError) as err:
            await asyncio.wait_for(getattr(mem, call)(kwargs.pop("query"), **kwargs), 20)
    finally:
        await mem.aclose()
    assert err.value.field == field


async def test_search_memory_tool_gives_the_validation_error(hung_url: str) -> None:
    """Before: the first ``search_memory`` on a server whose database was still starting
    answered "memory unavailable ... recall timed out" (not an error) to a NUL scene."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    from mcp import Client

    from hindsight_adapters.mcp.server import build_server

    mem = AsyncMemory(("v",), settings=_settings(hung_url), embedder=_embedder())
    async with Client(build_server(mem)) as client:
        result = await client.call_tool(
            "search_memory", {"query": "deploy the app", "scene": "deploy\x00"}
        )
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error, text
    assert "scene" in text and "NUL" in text, text
    assert "unavailable" not in text and "timed out" not in text, text
