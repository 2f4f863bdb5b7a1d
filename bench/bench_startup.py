"""Start-up: how soon each entry point answers, with the local model and the embedded
PostgreSQL (no ``HINDSIGHT_DATABASE_URL``), as a new user runs them.

    nice python bench/bench_startup.py            # 3 runs of each, ~2 min quiet
    nice python bench/bench_startup.py --runs 5 --json bench/results/startup.json

Measured from the launch of the process (``python -m``-style, like the console
script), in a fresh ``HINDSIGHT_HOME`` primed once (initdb, migrations, one record):

- ``hindsight mcp`` over stdio: the ``initialize`` answer, ``tools/list``, and the
  first ``search_memory`` (which waits for the model if it is still loading);
- ``hindsight mcp --http``: the first answered ``initialize`` POST, ``tools/list``;
- ``hindsight ui``: ``/healthz``, the model loaded (``/healthz`` says so), then the
  first search page *after* the model has loaded (its own time);
- CLI ``hindsight search``: wall time of the whole command.

Each server is then stopped with SIGTERM; its exit code and whether the embedded
server of the home was stopped are reported too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

CLI = [sys.executable, "-c", "from hindsight_adapters.cli import main; main()"]
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}
TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
SEARCH = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "search_memory", "arguments": {"query": "remove stale downloads"}},
}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def deadline_loop(timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        yield
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def server_stopped(home: Path, timeout: float = 20) -> bool:
    pidfile = home / "pgdata" / "postmaster.pid"
    end = time.monotonic() + timeout
    while pidfile.exists() and time.monotonic() < end:
        time.sleep(0.05)
    return not pidfile.exists()


def terminate(proc: subprocess.Popen[Any], home: Path) -> dict[str, Any]:
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait(10)
    return {
        "exit_code": code,
        "exit_s": round(time.monotonic() - started, 2),
        "embedded_stopped": server_stopped(home),
    }


def mcp_stdio(env: dict[str, str], home: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*CLI, "mcp"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdin and proc.stdout

    def call(message: dict[str, Any]) -> float:
        proc.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        while True:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise SystemExit("the stdio server closed its output")
            answer = json.loads(line)
            if answer.get("id") == message["id"]:
                assert "error" not in answer, answer
                return time.monotonic() - t0

    out = {"initialize_s": call(INIT)}
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    out["tools_list_s"] = call(TOOLS)
    out["first_search_s"] = call(SEARCH)
    out.update(terminate(proc, home))
    proc.stdin.close()
    proc.stdout.close()
    return out


def mcp_http(env: dict[str, str], home: Path) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*CLI, "mcp", "--http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out: dict[str, Any] = {}
    with httpx.Client(timeout=30) as client:
        for _ in deadline_loop(120, "the HTTP server's initialize"):
            try:
                if client.post(url, json=INIT, headers=HEADERS).status_code == 200:
                    out["initialize_s"] = time.monotonic() - t0
                    break
            except httpx.HTTPError:
                pass
        assert client.post(url, json=TOOLS, headers=HEADERS).status_code == 200
        out["tools_list_s"] = time.monotonic() - t0
    out.update(terminate(proc, home))
    return out


def ui(env: dict[str, str], home: Path) -> dict[str, Any]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*CLI, "ui", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out: dict[str, Any] = {}
    with httpx.Client(timeout=60) as client:
        for _ in deadline_loop(120, "the inspector's /healthz"):
            try:
                answer = client.get(f"{base}/healthz")
            except httpx.HTTPError:
                continue
            if answer.status_code == 200:
                out.setdefault("healthz_s", time.monotonic() - t0)
                body = (
                    answer.headers.get("content-type", "").startswith("application/json")
                    and answer.json()
                    or {}
                )
                # Before servers loaded the model in the background, /healthz said "ok"
                # as text and the model loaded on the first search.
                if body.get("embedder", "ready") != "loading":
                    out["model_ready_s"] = time.monotonic() - t0
                    break
        started = time.monotonic()
        page = client.get(f"{base}/search", params={"q": "remove stale downloads"})
        assert page.status_code == 200, page.status_code
        out["first_search_after_model_s"] = time.monotonic() - started
    out.update(terminate(proc, home))
    return out


def cli_search(env: dict[str, str], home: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    subprocess.run(
        [*CLI, "search", "remove stale downloads"], env=env, check=True, stdout=subprocess.DEVNULL
    )
    return {"wall_s": time.monotonic() - t0, "embedded_stopped": server_stopped(home)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="hindsight-bench-startup-"))
    home.chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HINDSIGHT_") or k == "HINDSIGHT_EMBEDDING_MODEL"
    }
    env["HINDSIGHT_HOME"] = str(home)
    try:
        t0 = time.monotonic()
        subprocess.run(
            [
                *CLI,
                "write",
                "-l",
                "Check the extension before deleting",
                "-t",
                "deleting old files",
                "-s",
                "file-cleanup",
            ],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        primed = time.monotonic() - t0
        runs: dict[str, list[dict[str, Any]]] = {
            "mcp_stdio": [],
            "mcp_http": [],
            "ui": [],
            "cli_search": [],
        }
        for _ in range(args.runs):
            runs["mcp_stdio"].append(mcp_stdio(env, home))
            runs["mcp_http"].append(mcp_http(env, home))
            runs["ui"].append(ui(env, home))
            runs["cli_search"].append(cli_search(env, home))
    finally:
        shutil.rmtree(home, ignore_errors=True)

    def med(name: str, key: str) -> float:
        return round(float(statistics.median(r[key] for r in runs[name])), 2)

    rows = [
        ("mcp stdio: initialize", med("mcp_stdio", "initialize_s"), "≤ 2 s"),
        ("mcp stdio: tools/list", med("mcp_stdio", "tools_list_s"), ""),
        (
            "mcp stdio: first search_memory (waits for the model)",
            med("mcp_stdio", "first_search_s"),
            "",
        ),
        ("mcp --http: initialize", med("mcp_http", "initialize_s"), "≤ 2 s"),
        ("mcp --http: tools/list", med("mcp_http", "tools_list_s"), ""),
        ("ui: /healthz", med("ui", "healthz_s"), ""),
        ("ui: model loaded", med("ui", "model_ready_s"), ""),
        (
            "ui: first search, after the model loaded",
            med("ui", "first_search_after_model_s"),
            "≤ 1 s",
        ),
        ("CLI search: wall time", med("cli_search", "wall_s"), "≤ 5 s"),
    ]
    load = os.getloadavg()
    print(f"primed in {primed:.1f} s; median of {args.runs} runs; load {load[0]:.1f}")
    print(f"{'measure':55} {'seconds':>8}  target")
    for name, value, target in rows:
        print(f"{name:55} {value:8.2f}  {target}")
    exits = {
        name: sorted({(r["exit_code"], r["embedded_stopped"]) for r in runs[name]})
        for name in ("mcp_stdio", "mcp_http", "ui")
    }
    print("SIGTERM (exit code, embedded server stopped):", exits)
    print(
        "CLI search stopped the embedded server:",
        all(r["embedded_stopped"] for r in runs["cli_search"]),
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "python": platform.python_version(),
                    "load": load,
                    "primed_s": primed,
                    "median": {name: value for name, value, _ in rows},
                    "runs": runs,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
