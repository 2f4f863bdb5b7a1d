"""Clean exit: SIGTERM and SIGINT stop every server and a library process gracefully,
and the embedded PostgreSQL they started is stopped; a dead user in its handle file
does not keep it alive.

Real processes, real signals, their own embedded server (no ``HINDSIGHT_DATABASE_URL``)
in one home for the module; the remote embedder is down on purpose (no model to
load: these tests are about the exit).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from _mcp_util import CLI, free_port

SYNC_LIBRARY = """
import sys
from hindsight_core import Memory
Memory(("lib",)).setup()
print("ready", flush=True)
sys.stdin.readline()
"""

ASYNC_LIBRARY = """
import asyncio
from hindsight_core import AsyncMemory
async def main():
    await AsyncMemory(("lib",)).setup()
    print("ready", flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""

COMMANDS = {
    "mcp-http": lambda: [*CLI, "mcp", "--http", "--port", str(free_port())],
    "mcp-stdio": lambda: [*CLI, "mcp"],
    "ui": lambda: [*CLI, "ui", "--port", str(free_port())],
    "worker": lambda: [*CLI, "worker", "--interval", "3600"],
    "library": lambda: [sys.executable, "-c", SYNC_LIBRARY],
    "async-library": lambda: [sys.executable, "-c", ASYNC_LIBRARY],
}


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hindsight-exit-"))
    path.chmod(0o755)  # the server may run as its own user (root in CI)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HINDSIGHT_DATABASE_URL"}
    env.update(
        HINDSIGHT_HOME=str(home),
        HINDSIGHT_EMBEDDER="openai",
        HINDSIGHT_EMBEDDING_BASE_URL="http://127.0.0.1:1/v1",
        HINDSIGHT_EMBEDDING_DIMENSIONS="384",
    )
    return env


def handle_pids(home: Path) -> list[int]:
    path = home / "pgdata" / ".handle_pids.json"
    try:
        return list(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError):
        return []


def server_pid(home: Path) -> int | None:
    """The postmaster's pid while a server of ``home`` runs, else ``None``."""
    try:
        pid = int((home / "pgdata" / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None
    return pid if psutil.pid_exists(pid) else None


@contextmanager
def running(
    command: list[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """The process, its stdin a pipe held open (the stdio server serves until EOF);
    killed on the way out if it is still there."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, env=env, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        assert proc.stdin is not None
        proc.stdin.close()


def wait_until_user(
    proc: subprocess.Popen[bytes],
    home: Path,
    log: Path,
    timeout: float = 120,
    *,
    script: bool = True,
) -> int:
    """Wait until ``proc`` uses the running server; returns the postmaster's pid."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text()}"
        pid = server_pid(home)
        said_ready = "ready" in log.read_text()  # the library scripts say when set up
        if pid is not None and proc.pid in handle_pids(home) and (said_ready or not script):
            return pid
        assert time.monotonic() < deadline, f"never used the server:\n{log.read_text()}"
        time.sleep(0.05)


def wait_gone(pid: int, timeout: float = 30) -> bool:
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        return False
    return True


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("what", list(COMMANDS))
def test_signal_stops_the_process_and_its_embedded_server(
    what: str, sig: signal.Signals, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    if what == "library" and sig == signal.SIGINT:
        pytest.skip(
            "SIGINT in a plain script is Python's KeyboardInterrupt (exits 1 with "
            "a traceback, clean-up included); the SIGTERM case is what changed"
        )
    log = tmp_path / "out.log"
    with running(COMMANDS[what](), env, log) as proc:
        postmaster = wait_until_user(proc, home, log, script="library" in what)
        proc.send_signal(sig)
        code = proc.wait(30)
    output = log.read_text()
    # The worker handles both signals itself (it stops between steps, exit 0).
    expected = 0 if what == "worker" else 128 + sig
    if what == "async-library" and sig == signal.SIGINT:
        expected = -sig  # Python's own: KeyboardInterrupt, clean-up, then the signal
    assert code == expected, output
    if expected == -sig:  # Python reports the KeyboardInterrupt, then dies of the signal
        assert "KeyboardInterrupt" in output, output
    else:
        assert "Traceback" not in output, output
    assert wait_gone(postmaster), "the embedded PostgreSQL is still running"
    assert not (home / "pgdata" / "postmaster.pid").exists()
    assert handle_pids(home) == []


def test_a_killed_user_does_not_keep_the_server_alive(
    home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Before: the killed process's pid stayed in the handle file, so the last live
    user never counted as the last and the server ran on for good."""
    with running([sys.executable, "-c", SYNC_LIBRARY], env, tmp_path / "a.log") as killed:
        postmaster = wait_until_user(killed, home, tmp_path / "a.log")
        killed.kill()  # no clean-up at all
        killed.wait(10)
    assert killed.pid in handle_pids(home)  # the dead user is on the list

    with running([sys.executable, "-c", SYNC_LIBRARY], env, tmp_path / "b.log") as last:
        assert wait_until_user(last, home, tmp_path / "b.log") == postmaster
        last.communicate(b"\n", timeout=60)  # a normal exit
    assert last.returncode == 0, (tmp_path / "b.log").read_text()
    assert wait_gone(postmaster), "the last live user did not stop the server"
    assert handle_pids(home) == []


def test_a_live_user_keeps_the_server(home: Path, env: dict[str, str], tmp_path: Path) -> None:
    library = [sys.executable, "-c", SYNC_LIBRARY]
    with (
        running(library, env, tmp_path / "a.log") as first,
        running(library, env, tmp_path / "b.log") as second,
    ):
        postmaster = wait_until_user(first, home, tmp_path / "a.log")
        assert wait_until_user(second, home, tmp_path / "b.log") == postmaster
        first.send_signal(signal.SIGTERM)
        assert first.wait(30) == 128 + signal.SIGTERM
        assert server_pid(home) == postmaster, "stopped while another process used it"
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 128 + signal.SIGTERM
        assert wait_gone(postmaster)
