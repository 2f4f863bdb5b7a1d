"""Helpers for the MCP and Docker tests: real server processes and real SDK clients."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx

CLI = [sys.executable, "-c", "from hindsight_adapters.cli import main; main()"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_cli(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``hindsight <args>`` with ``env`` added to this process's environment."""
    with log.open("wb") as handle:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [*CLI, *args],
            env={**os.environ, **env},
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def wait_healthy(
    proc: subprocess.Popen[bytes],
    base: str,
    log: Path,
    timeout: float = 90.0,
    *,
    ready: bool = True,
) -> dict[str, Any]:
    """Poll ``base/healthz`` until it answers 200 and, with ``ready``, until the
    background start-up (model, database) has ended; returns the last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()}")
        try:
            answer = httpx.get(f"{base}/healthz", timeout=1)
            if answer.status_code == 200:
                body: dict[str, Any] = answer.json()
                if not ready or "loading" not in body.values():
                    return body
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    stop(proc)
    raise AssertionError(f"server not healthy in {timeout}s:\n{log.read_text()}")


# What a server's graceful exit on SIGTERM returns (SystemExit(128 + signum)).
SIGTERM_EXIT = 128 + signal.SIGTERM


def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """SIGTERM and wait; returns the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
            raise AssertionError("server did not stop on SIGTERM") from None
    return int(proc.returncode)


@asynccontextmanager
async def http_client(url: str, token: str | None) -> AsyncIterator[Any]:
    """An ``mcp.Client`` over streamable HTTP sending ``Authorization: Bearer <token>``."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    hc = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120))
    async with hc, Client(streamable_http_client(url, http_client=hc)) as client:
        yield client


def text(result: Any) -> str:
    """The text of a tool result (error messages included)."""
    return "\n".join(getattr(c, "text", "") for c in result.content)


@asynccontextmanager
async def stdio_client(args: list[str]) -> AsyncIterator[Any]:
    """An ``mcp.Client`` on ``hindsight <args>`` over stdio, held by a task of its own:
    the client's cancel scope is entered and left in one task, whichever task uses it
    (a module-scoped fixture is set up and torn down in different ones)."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=CLI[0], args=[*CLI[1:], *args], env=dict(os.environ))
    ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def hold() -> None:
        try:
            async with Client(params) as client:
                ready.set_result(client)
                await done.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    task = asyncio.create_task(hold())
    try:
        yield await asyncio.wait_for(ready, 120)
    finally:
        done.set()
        await asyncio.wait_for(task, 30)


@contextmanager
def serving(app: Any, *, start_timeout: float = 30.0, **config: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn in a daemon thread; yields its base URL."""
    import uvicorn

    port = free_port()
    options = {"host": "127.0.0.1", "port": port, "log_level": "warning", **config}
    server = uvicorn.Server(uvicorn.Config(app, **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
    assert not thread.is_alive(), "uvicorn did not stop"  # (not reached if the body raised)
