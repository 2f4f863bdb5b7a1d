"""Ready at once: the servers answer before the embedding model has loaded, and the
dimension comes from the database when the remote embedder is down.

"Not loaded yet" is made provable with a real OpenAI-compatible endpoint in this
process that holds every request until the test opens its gate (it then answers
with the real local model's vectors): until then the server's warm-up request is
pending, so its embedder cannot be ready.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from _mcp_util import CLI, free_port, http_client, start_cli, stop, text
from mcp import Client, StdioServerParameters

from hindsight_core import Memory, Settings
from hindsight_core.embeddings.openai import OpenAIEmbedder

DEAD = "http://127.0.0.1:1/v1"  # nothing listens on port 1


class GatedEndpoint:
    """``POST /v1/embeddings`` that holds each request until ``gate`` is set."""

    def __init__(self, embedder: Any) -> None:
        self.gate = threading.Event()
        self.waiting = threading.Event()  # a request arrived and is being held
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.waiting.set()
                if not outer.gate.wait(60):
                    self.send_error(503)
                    return
                vectors = embedder.embed(body["input"])
                data = [{"index": i, "embedding": list(v)} for i, v in enumerate(vectors)]
                payload = json.dumps({"data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> GatedEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.gate.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def recorded(memory: Memory) -> Memory:
    """The session database with its model recorded (all-MiniLM-L6-v2, 384 dims)."""
    memory.setup()
    return memory


def remote_env(base_url: str, namespace: tuple[str, ...]) -> dict[str, str]:
    """A remote embedder of the recorded model, dimension not configured."""
    env = {
        "HINDSIGHT_EMBEDDER": "openai",
        "HINDSIGHT_EMBEDDING_BASE_URL": base_url,
        "HINDSIGHT_EMBEDDING_MODEL": "all-MiniLM-L6-v2",
        "HINDSIGHT_NAMESPACE": "/".join(namespace),
    }
    return env


def health(base: str, until: Any, proc: Any, log: Path, timeout: float = 90.0) -> dict[str, Any]:
    """Poll ``/healthz`` until ``until(body)`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"server exited {proc.returncode}:\n{log.read_text()}"
        try:
            body: dict[str, Any] = httpx.get(f"{base}/healthz", timeout=2).json()
            if until(body):
                return body
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"healthz never satisfied:\n{log.read_text()}"
        time.sleep(0.05)


def test_database_gives_the_dimension_when_the_endpoint_is_down(
    recorded: Memory, settings: Settings
) -> None:
    embedder = OpenAIEmbedder(base_url=DEAD, model="all-MiniLM-L6-v2")
    with Memory(recorded.namespace, settings=settings, embedder=embedder) as mem:
        mem.setup()  # before: the dimension probe hit the dead endpoint and raised
        assert embedder.dim == 384
        assert mem.stats().embedding_dim == 384


async def test_mcp_http_answers_before_the_model_is_loaded(
    recorded: Memory, embedder: Any, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "mcp.log"
    base = f"http://127.0.0.1:{port}"
    with GatedEndpoint(embedder) as endpoint:
        proc = start_cli(
            ["mcp", "--http", "--port", str(port)],
            remote_env(endpoint.url, recorded.namespace),
            log,
        )
        try:
            body = health(base, lambda b: b.get("database") != "loading", proc, log)
            assert body == {
                "status": "ok",
                "server": "hindsight",
                "embedder": "loading",
                "database": "ready",
            }, body
            assert endpoint.waiting.wait(60)  # the warm-up request arrives and is held
            async with http_client(f"{base}/mcp", None) as client:  # initialize
                tools = {t.name for t in (await client.list_tools()).tools}
                assert {"search_memory", "write_memory"} <= tools
                assert not endpoint.gate.is_set()  # answered while the model was not ready
                endpoint.gate.set()
                health(base, lambda b: b.get("embedder") == "ready", proc, log)
                wrote = await client.call_tool(
                    "write_memory",
                    {
                        "scene": "deploy",
                        "trigger": "deploying on a Friday",
                        "action": "a",
                        "outcome": "success",
                        "lesson": "Run migrations before the deploy",
                    },
                )
                assert not wrote.is_error, text(wrote)
                found = await client.call_tool("search_memory", {"query": "friday deployment"})
                assert [r["id"] for r in found.structured_content["results"]] == [
                    wrote.structured_content["id"]
                ]
        finally:
            stop(proc)


async def test_mcp_stdio_starts_and_degrades_with_the_remote_embedder_down(
    recorded: Memory,
) -> None:
    """Before: ``hindsight mcp`` exited 1 (the dimension probe at start-up failed)."""
    params = StdioServerParameters(
        command=CLI[0],
        args=[*CLI[1:], "mcp"],
        env={**os.environ, **remote_env(DEAD, recorded.namespace)},
    )
    async with Client(params) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert "search_memory" in tools
        result = await client.call_tool("search_memory", {"query": "anything"})
        assert not result.is_error, text(result)
        assert result.structured_content["results"] == []
        assert "cannot reach embedding endpoint" in result.structured_content["warning"]
        stats = json.loads((await client.read_resource("memory://stats")).contents[0].text)
        assert stats["embedding_dim"] == 384


def test_ui_answers_before_the_model_is_loaded(
    recorded: Memory, embedder: Any, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "ui.log"
    base = f"http://127.0.0.1:{port}"
    with GatedEndpoint(embedder) as endpoint:
        proc = start_cli(
            ["ui", "--port", str(port), "-n", "/".join(recorded.namespace)],
            remote_env(endpoint.url, recorded.namespace),
            log,
        )
        try:
            body = health(base, lambda b: b.get("database") != "loading", proc, log)
            assert body["embedder"] == "loading" and body["database"] == "ready", body
            page = httpx.get(f"{base}/", timeout=10)
            assert page.status_code == 200 and "Hindsight" in page.text
            assert endpoint.waiting.wait(60) and not endpoint.gate.is_set()
            endpoint.gate.set()
            health(base, lambda b: b.get("embedder") == "ready", proc, log)
            search = httpx.get(f"{base}/search", params={"q": uuid.uuid4().hex}, timeout=30)
            assert search.status_code == 200
        finally:
            stop(proc)
