"""Start-up: how soon each entry point answers, with the local model and the embedded
PostgreSQL (no ``HINDSIGHT_DATABASE_URL``), as a new user runs them.

    flock /tmp/hindsight-quiet.lock python bench/bench_startup.py   # ~2 min quiet
    python bench/bench_startup.py --runs 5 --json bench/results/startup.json
    python bench/bench_startup.py --only imports,mcp_stdio          # the import targets
    # against an earlier checkout, the two taking turns (a ratio that survives load):
    git archive <commit> | tar -x -C /tmp/before
    PYTHONPATH=$PWD python bench/bench_startup.py --only imports,mcp_stdio --before /tmp/before

The code measured is the one first on ``PYTHONPATH`` (else the installed package):
the commands run in the home directory, not here, because ``python -c`` puts the
working directory first on the path. Measured from the launch of the process
(``python -c``, as the console script runs it), in a fresh ``HINDSIGHT_HOME`` primed
once (initdb, migrations, one record):

- imports (``--import-runs`` each, nothing else running): ``python -c pass`` (the
  interpreter's own floor), ``import hindsight_core``, ``from hindsight_core import
  Memory, AsyncMemory`` and ``hindsight --version``, wall time to exit;
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
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

CLI = [sys.executable, "-c", "from hindsight_adapters.cli import main; main()"]
IMPORTS = {
    "python": [sys.executable, "-c", "pass"],
    "import_core": [sys.executable, "-c", "import hindsight_core"],
    "import_memory": [sys.executable, "-c", "from hindsight_core import Memory, AsyncMemory"],
    "cli_version": [*CLI, "--version"],
}
GROUPS = ("imports", "mcp_stdio", "mcp_http", "ui", "cli_search")
ROWS = [  # group, measure, key of the group's runs, target
    ("imports", "python -c pass (the interpreter alone)", "python_s", ""),
    ("imports", "import hindsight_core", "import_core_s", "≤ 0.3 s"),
    ("imports", "from hindsight_core import Memory, AsyncMemory", "import_memory_s", ""),
    ("imports", "hindsight --version", "cli_version_s", "≤ 0.3 s"),
    ("imports", "  CPU: import hindsight_core", "import_core_cpu_s", ""),
    ("imports", "  CPU: from hindsight_core import Memory, AsyncMemory", "import_memory_cpu_s", ""),
    ("imports", "  CPU: hindsight --version", "cli_version_cpu_s", ""),
    ("mcp_stdio", "mcp stdio: initialize", "initialize_s", "≤ 1 s"),
    ("mcp_stdio", "  CPU: the mcp process until initialize is answered", "initialize_cpu_s", ""),
    ("mcp_stdio", "mcp stdio: tools/list", "tools_list_s", ""),
    ("mcp_stdio", "mcp stdio: first search_memory (waits for the model)", "first_search_s", ""),
    ("mcp_http", "mcp --http: initialize", "initialize_s", "≤ 2 s"),
    ("mcp_http", "mcp --http: tools/list", "tools_list_s", ""),
    ("ui", "ui: /healthz", "healthz_s", ""),
    ("ui", "ui: model loaded", "model_ready_s", ""),
    ("ui", "ui: first search, after the model loaded", "first_search_after_model_s", "≤ 1 s"),
    ("cli_search", "CLI search: wall time", "wall_s", "≤ 5 s"),
]
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

    out: dict[str, Any] = {"initialize_s": call(INIT), "initialize_cpu_s": process_cpu(proc.pid)}
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


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a running process has used so far (Linux; else NaN)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def imports(env: dict[str, str]) -> dict[str, float]:
    """Per command of ``IMPORTS``: the wall time (launch to exit) and the CPU time it
    used (which a loaded machine inflates less than the wall time)."""
    out = {}
    for name, command in IMPORTS.items():
        t0, cpu0 = time.monotonic(), children_cpu()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        out[f"{name}_s"] = time.monotonic() - t0
        out[f"{name}_cpu_s"] = children_cpu() - cpu0
    return out


SERVERS: dict[str, Callable[[dict[str, str], Path], dict[str, Any]]] = {
    "mcp_stdio": mcp_stdio,
    "mcp_http": mcp_http,
    "ui": ui,
    "cli_search": cli_search,
}


def measure(
    trees: dict[str, dict[str, str]], home: Path, groups: list[str], runs: int, import_runs: int
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every group's runs for each tree, the trees taking turns (so that a change of
    machine load falls on both)."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {
        tree: {name: [] for name in groups} for tree in trees
    }
    if "imports" in groups:
        for _ in range(import_runs):
            for tree, env in trees.items():
                out[tree]["imports"].append(imports(env))
    for _ in range(runs):
        for name in groups:
            for tree, env in trees.items():
                if name != "imports":
                    out[tree][name].append(SERVERS[name](env, home))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--import-runs", type=int, default=9, help="runs of each import")
    parser.add_argument(
        "--only", default=",".join(GROUPS), help=f"comma-separated subset of {','.join(GROUPS)}"
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="also measure the checkout in this directory (put first on PYTHONPATH), "
        "taking turns with the code under test, and print the ratio",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    groups = [g for g in args.only.split(",") if g]
    if unknown := set(groups) - set(GROUPS):
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")

    home = Path(tempfile.mkdtemp(prefix="hindsight-bench-startup-"))
    home.chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HINDSIGHT_") or k == "HINDSIGHT_EMBEDDING_MODEL"
    }
    env["HINDSIGHT_HOME"] = str(home)
    if env.get("PYTHONPATH"):  # made absolute: the commands run in the home directory
        env["PYTHONPATH"] = os.pathsep.join(
            str(Path(p).resolve()) for p in env["PYTHONPATH"].split(os.pathsep)
        )
    json_path = args.json and args.json.resolve()
    before = args.before and args.before.resolve()
    # In the home, not here: ``python -c`` puts the working directory first on the path,
    # and a checkout's own package would win over the one under test.
    os.chdir(home)
    trees = {"after": env}
    if before:
        trees = {"before": {**env, "PYTHONPATH": str(before)}, "after": env}
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
        runs = measure(trees, home, groups, args.runs, args.import_runs)
    finally:
        os.chdir(Path(tempfile.gettempdir()))
        shutil.rmtree(home, ignore_errors=True)

    medians = {
        tree: {
            name: round(float(statistics.median(r[key] for r in tree_runs[group])), 2)
            for group, name, key, _ in ROWS
            if group in tree_runs
        }
        for tree, tree_runs in runs.items()
    }
    load = os.getloadavg()
    print(
        f"primed in {primed:.1f} s; median of {args.runs} runs "
        f"({args.import_runs} of each import); load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"{'measure':55} {'  '.join(f'{t:>7}' for t in trees)}  {'ratio':>6}  target")
    for group, name, _, target in ROWS:
        if group not in groups:
            continue
        values = [medians[tree][name] for tree in trees]
        ratio = f"{values[1] / values[0]:6.2f}" if len(values) == 2 and values[0] else " " * 6
        print(f"{name:55} {'  '.join(f'{v:7.2f}' for v in values)}  {ratio}  {target}")
    for tree, tree_runs in runs.items():
        exits = {
            name: sorted({(r["exit_code"], r["embedded_stopped"]) for r in tree_runs[name]})
            for name in ("mcp_stdio", "mcp_http", "ui")
            if name in groups
        }
        print(f"{tree}: SIGTERM (exit code, embedded server stopped):", exits)
        if "cli_search" in groups:
            print(
                f"{tree}: CLI search stopped the embedded server:",
                all(r["embedded_stopped"] for r in tree_runs["cli_search"]),
            )
    if json_path:
        json_path.write_text(
            json.dumps(
                {
                    "python": platform.python_version(),
                    "load": load,
                    "primed_s": primed,
                    "median": medians,
                    "runs": runs,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
