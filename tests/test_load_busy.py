"""A pool with no connection to give is "busy, retry", not "database unavailable".

The pool is made to stay full the way a queue of writes fills it: a one-connection
pool (plus its one overflow) whose writers wait on their namespace lock, held here.
A further write then waits ``pool_timeout`` with no connection given back, and gets
``DatabaseBusyError``; through the MCP server over HTTP, a JSON-RPC error with retry
data and the status 503 with ``Retry-After``. Once the lock is released the queued
writes go through: nothing was lost.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
from typing import Any

import httpx
import numpy as np
import pytest
import sqlalchemy as sa
from _locks import hold_namespace, wait_for_waiters
from _mcp_util import free_port

from hindsight_adapters.mcp import build_http_app
from hindsight_adapters.mcp._busy import BUSY
from hindsight_core import AsyncMemory, CallableEmbedder, Memory, Settings
from hindsight_core.errors import DatabaseBusyError, DatabaseError, DatabaseUnavailableError

DIM = 32
RECORD = {
    "scene": "busy",
    "trigger": "many agents write at once",
    "action": "wrote a lesson",
    "outcome": "success",
    "lesson": "Retry a busy database after a moment",
}


def _vectors(texts: list[str]) -> list[list[float]]:
    out = []
    for text in texts:
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8]))
        out.append(rng.standard_normal(DIM).tolist())
    return out


EMBEDDER = CallableEmbedder(_vectors, dim=DIM, model_name="hash-32")


def _small(url: str) -> Settings:
    return Settings(database_url=url, pool_size=1, pool_timeout=0.5)


def test_a_full_pool_is_busy_not_unavailable(fresh_db: str, admin: sa.Engine) -> None:
    mem = Memory(("busy", "sync"), settings=_small(fresh_db), embedder=EMBEDDER)
    lock = admin.connect()
    try:
        mem.write(RECORD)  # set up (migrations, model) before the pool fills
        hold_namespace(lock, mem.namespace_key(None))
        queued = [threading.Thread(target=mem.write, args=(RECORD,)) for _ in range(2)]
        for t in queued:
            t.start()
        wait_for_waiters(admin, 2)  # the pool's connection and its overflow, both in use
        with pytest.raises(DatabaseBusyError, match="busy") as raised:
            mem.write(RECORD)
        assert isinstance(raised.value, DatabaseError)  # what existing handlers catch
        assert not isinstance(raised.value, DatabaseUnavailableError)
        assert raised.value.retry_after > 0
        lock.rollback()
        for t in queued:
            t.join()
        (rec,) = mem.list_records()
        assert rec.occurrences == 3  # the queued writes went through; the busy one did not
    finally:
        lock.close()
        mem.close()


def _serve(app: Any) -> tuple[Any, threading.Thread, str]:
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(1000):
        if server.started:
            break
        assert thread.is_alive(), "uvicorn stopped"
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{port}/mcp"


def _call(i: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {"name": "write_memory", "arguments": RECORD},
    }


HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_mcp_over_http_answers_busy_with_503_and_retry_after(
    fresh_db: str, admin: sa.Engine
) -> None:
    ns = ("busy", uuid.uuid4().hex[:8])
    memory = AsyncMemory(ns, settings=_small(fresh_db), embedder=EMBEDDER)
    app = build_http_app(memory, {}, host="127.0.0.1", max_body=100_000)
    server, thread, url = _serve(app)
    lock = admin.connect()
    try:
        async with httpx.AsyncClient(headers=HEADERS, timeout=60) as client:
            first = await client.post(url, json=_call(1))
            assert first.status_code == 200 and "error" not in first.json(), first.text
            hold_namespace(lock, memory.namespace_key(None))
            queued = [asyncio.ensure_future(client.post(url, json=_call(2 + k))) for k in range(2)]
            await asyncio.to_thread(wait_for_waiters, admin, 2)
            busy = await client.post(url, json=_call(9))
            lock.rollback()
            done = await asyncio.gather(*queued)
        assert busy.status_code == 503, busy.text
        assert busy.headers["retry-after"] == "1"
        error = busy.json()["error"]
        assert error["code"] == BUSY and error["data"] == {"busy": True, "retry_after": 1}
        assert "retry" in error["message"]
        for answer in done:
            assert answer.status_code == 200, answer.text
            assert answer.json()["result"]["structuredContent"]["status"] == "merged"
    finally:
        lock.close()
        server.should_exit = True
        thread.join(timeout=15)


def test_edit_and_merge_hold_no_transaction_while_embedding(fresh_db: str) -> None:
    """While the model runs for ``edit`` and ``merge``, none of the memory's backends is in
    a transaction (one would hold a pooled connection, and the namespace lock, meanwhile)."""
    from _pool import backends, tagged

    app = f"embed-{uuid.uuid4().hex[:8]}"
    seen: list[list[str]] = []
    armed = threading.Event()

    def watching(texts: list[str]) -> list[list[float]]:
        if armed.is_set():
            seen.append([b["state"] for b in backends(fresh_db, app)])
        return _vectors(texts)

    embedder = CallableEmbedder(watching, dim=DIM, model_name="hash-32")
    settings = Settings(database_url=tagged(fresh_db, app))
    with Memory(("busy", uuid.uuid4().hex[:8]), settings=settings, embedder=embedder) as mem:
        a = mem.write(RECORD)
        b = mem.write({**RECORD, "lesson": "Back off for longer each retry"})
        armed.set()
        edited = mem.edit(a.id, lesson="Retry a busy database after a second")  # a new version
        mem.merge([edited.id, b.id], {**RECORD, "lesson": "Retry busy databases with backoff"})
    assert len(seen) == 2, seen
    assert all("idle in transaction" not in states for states in seen), seen
