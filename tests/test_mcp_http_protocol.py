"""The MCP HTTP transport's protocol edges, from outside: a request id of the wrong
type, ``GET /mcp`` on the stateless server, the version ``initialize`` announces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _mcp_util import SIGTERM_EXIT, free_port, start_cli, stop, wait_healthy

from hindsight_core import __version__

HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-06-18",
}


@pytest.fixture(scope="module")
def mcp_url(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log: Path = tmp_path_factory.mktemp("mcp-protocol") / "server.log"
    env = {
        "HINDSIGHT_EMBEDDER": "openai",  # no model to load: nothing here embeds
        "HINDSIGHT_EMBEDDING_BASE_URL": "http://127.0.0.1:1/v1",
        "HINDSIGHT_EMBEDDING_DIMENSIONS": "384",
    }
    proc = start_cli(["mcp", "--http", "--port", str(port)], env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, log, ready=False)
        yield f"{base}/mcp"
    finally:
        assert stop(proc) == SIGTERM_EXIT, log.read_text()
        assert "Traceback" not in log.read_text()


def post(url: str, message: dict[str, Any]) -> httpx.Response:
    return httpx.post(url, json=message, headers=HEADERS, timeout=30)


@pytest.mark.parametrize(
    "request_id", [{"a": 1}, 1.5, [1], None, True], ids=["object", "float", "array", "null", "bool"]
)
def test_a_request_id_of_the_wrong_type_is_an_invalid_request(
    mcp_url: str, request_id: Any
) -> None:
    """Before: 202 with an empty body (taken for a notification)."""
    answer = post(mcp_url, {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
    assert answer.status_code == 400, (answer.status_code, answer.text)
    body = answer.json()
    assert body["error"]["code"] == -32600 and body["id"] is None, body


@pytest.mark.parametrize("request_id", [7, "seven"])
def test_string_and_integer_ids_are_answered(mcp_url: str, request_id: Any) -> None:
    answer = post(mcp_url, {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["id"] == request_id and "write_memory" in answer.text


def test_a_notification_is_still_accepted(mcp_url: str) -> None:
    answer = post(mcp_url, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert answer.status_code == 202, answer.text


def test_get_on_the_stateless_endpoint_is_405_not_a_stream_held_open(mcp_url: str) -> None:
    """Before: an event stream that a stateless server never writes to, held open."""
    answer = httpx.get(mcp_url, headers={"Accept": "text/event-stream"}, timeout=10)
    assert answer.status_code == 405, answer.text
    assert "POST" in answer.headers["allow"]


def test_initialize_announces_the_package_version(mcp_url: str) -> None:
    """Before: an empty server version."""
    answer = post(
        mcp_url,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        },
    )
    assert answer.status_code == 200, answer.text
    info = answer.json()["result"]["serverInfo"]
    assert info == {**info, "name": "hindsight", "version": __version__}, info
