"""A signal at any moment of the embedded PostgreSQL's start-up: every command that
starts it exits 130/143 with one line, leaves no server, and the data directory
opens cleanly afterwards.

Real processes and signals, each run in a fresh home (so initdb runs) or in one
whose server is stopped (so only ``pg_ctl start`` runs). The moments are taken from
the start-up's own traces on disk (the data directory appears, initdb writes
``PG_VERSION``, the postmaster writes its pid file) rather than from fixed delays,
so that the same few steps land in the same phases on a fast or a loaded machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from _mcp_util import CLI, free_port
from test_startup import GatedEndpoint

DIM = 384


class HashVectors:
    """Fixed vectors per text, for the endpoint: no model needed."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [_vector(text) for text in texts]


def _vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [((digest[i % 32] + i) % 17 - 8) / 8 for i in range(DIM)]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[GatedEndpoint]:
    """``POST /v1/embeddings``, answering at once."""
    with GatedEndpoint(HashVectors()) as server:
        server.gate.set()
        yield server


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hindsight-sig-"))
    path.chmod(0o755)  # the server runs as its own user when the tests run as root
    yield path
    _kill_servers(path)
    shutil.rmtree(path, ignore_errors=True)


def _env(home: Path, endpoint: GatedEndpoint) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HINDSIGHT_DATABASE_URL"}
    env.update(
        HINDSIGHT_HOME=str(home),
        HINDSIGHT_EMBEDDER="openai",
        HINDSIGHT_EMBEDDING_BASE_URL=endpoint.url,
        HINDSIGHT_EMBEDDING_MODEL="hash-test",
        HINDSIGHT_EMBEDDING_DIMENSIONS=str(DIM),
    )
    return env


def _servers(home: Path) -> list[psutil.Process]:
    """PostgreSQL processes serving ``home``'s data directory."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["name"] == "postgres" and str(home) in cmdline:
            found.append(proc)
    return found


def _kill_servers(home: Path) -> None:
    for proc in _servers(home):
        proc.kill()


def _no_server_left(home: Path, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while _servers(home):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


COMMANDS: dict[str, Callable[[], list[str]]] = {
    "db-upgrade": lambda: ["db", "upgrade"],
    "demo": lambda: ["demo"],
    "ui": lambda: ["ui", "--port", str(free_port())],
    "mcp-http": lambda: ["mcp", "--http", "--port", str(free_port())],
}

# (a fresh home?, the file whose appearance is the moment, the signal). The steps on
# an initialised home run after a fresh one's re-open check, which leaves the data
# directory initialised and its server stopped: only ``pg_ctl start`` runs then.
STEPS = [
    (True, "pgdata", signal.SIGINT),  # initdb about to run
    (True, "pgdata/PG_VERSION", signal.SIGTERM),  # initdb half-way
    (True, "pgdata/postmaster.pid", signal.SIGINT),  # the first start
    (False, "pgdata/log", signal.SIGTERM),  # pg_ctl start of a stopped server
    (False, "pgdata/postmaster.pid", signal.SIGINT),
]


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _check_exit(proc: subprocess.Popen[bytes], sig: signal.Signals, home: Path, log: Path) -> None:
    code = proc.wait(60)
    output = log.read_text()
    assert code == 128 + sig, output
    assert "Traceback" not in output, output
    assert output.strip().splitlines()[-1] == f"hindsight: stopped by {sig.name}", output
    assert _no_server_left(home), f"the embedded PostgreSQL is still running:\n{output}"


def _check_reopens(home: Path, env: dict[str, str]) -> None:
    again = subprocess.run(
        [*CLI, "db", "upgrade", "--json"], env=env, capture_output=True, text=True, timeout=180
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["up_to_date"] is True
    assert _no_server_left(home)


@pytest.mark.parametrize("what", list(COMMANDS))
def test_a_signal_at_any_moment_of_start_up_leaves_no_server(
    what: str, home: Path, endpoint: GatedEndpoint, tmp_path: Path
) -> None:
    """Before: SIGINT inside the start gave demo an AssertionError traceback (exit 1)
    and an orphaned server; a signal inside initdb left a data directory that did not
    open ("database postgres does not exist"); one inside ``pg_ctl start`` left the
    server running with no user."""
    env = _env(home, endpoint)
    for step, (fresh, moment, sig) in enumerate(STEPS):
        if fresh:
            shutil.rmtree(home / "pgdata", ignore_errors=True)
        else:
            (home / "pgdata" / "log").unlink()
        log = tmp_path / f"{step}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*CLI, *COMMANDS[what]()], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            if not _wait_for(home / moment, proc):
                proc.kill()
                pytest.fail(f"step {step}: {moment} never appeared:\n{log.read_text()}")
            proc.send_signal(sig)
            _check_exit(proc, sig, home, log)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        _check_reopens(home, env)


def test_sigterm_to_the_inspector_while_its_database_loads(
    home: Path, endpoint: GatedEndpoint, tmp_path: Path
) -> None:
    """Before: SIGTERM right when ``/healthz`` first answered ("database": "loading")
    left the embedded PostgreSQL running: the exit hook that stops it was registered
    only once the warm-up thread's start had returned."""
    env = _env(home, endpoint)
    port, log = free_port(), tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*CLI, "ui", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).json()
                break
            except httpx.HTTPError:
                time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        _check_exit(proc, signal.SIGTERM, home, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert body["database"] == "loading", body  # the moment the report describes
    _check_reopens(home, env)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_stdio_server_while_its_database_starts(
    sig: signal.Signals, home: Path, endpoint: GatedEndpoint, tmp_path: Path
) -> None:
    """``hindsight mcp`` over stdio ends through ``os._exit`` (the SDK's stdin reader
    would hold the interpreter's exit): before, it exited 130/143 without the one line
    the other commands print."""
    env = _env(home, endpoint)
    log = tmp_path / "stdio.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*CLI, "mcp"], env=env, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        if not _wait_for(home / "pgdata" / "postmaster.pid", proc):
            proc.kill()
            pytest.fail(f"the server never started:\n{log.read_text()}")
        proc.send_signal(sig)
        _check_exit(proc, sig, home, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        assert proc.stdin is not None
        proc.stdin.close()
    _check_reopens(home, env)
