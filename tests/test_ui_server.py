"""The inspector's HTTP hardening, against a real uvicorn server (no browser): body
limits however the body is sent, paging out of range, token checks, and the
``hindsight ui`` command's one-line errors."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hindsight_core import Memory, Settings
from hindsight_core.errors import ConfigurationError

pytest.importorskip("starlette", reason="the ui extra is not installed")
from _mcp_util import free_port, serving

from hindsight_adapters.ui import create_app

TOKEN = "ui-server-test-token-0123456789"
CLI = [
    sys.executable,
    "-c",
    "import sys; sys.path[:0] = sys.argv[1:2]; del sys.argv[1]; "
    "from hindsight_adapters.cli import main; main()",
]


@pytest.fixture(scope="module")
def base(database_url: str, embedder: object) -> Iterator[str]:
    settings = Settings(database_url=database_url, ui_max_body_bytes=10_000)
    # Owned by the app (closed on shutdown, on the server's loop).
    app = create_app(
        settings=settings,
        embedder=embedder,
        namespace=("ui-server", "t"),  # type: ignore[arg-type]
        token=TOKEN,
    )
    with serving(app) as base:
        yield base


@pytest.fixture
def record_id(settings: Settings, embedder: object) -> str:
    with Memory(("ui-server", "t"), settings=settings, embedder=embedder) as mem:  # type: ignore[arg-type]
        return str(mem.write({"trigger": "deploying", "lesson": "Run migrations first"}).id)


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_oversized_body_is_413_declared_or_chunked(
    base: str, record_id: str, settings: Settings
) -> None:
    url = f"{base}/records/{record_id}/edit?ns=ui-server&ns=t"
    form = b"lesson=" + b"x" * 20_000
    headers = {**AUTH, "Content-Type": "application/x-www-form-urlencoded"}
    declared = httpx.post(url, content=form, headers=headers)
    assert declared.status_code == 413, declared.text

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(form), 4096):
            yield form[start : start + 4096]

    chunked = httpx.post(url, content=chunks(), headers=headers)
    assert chunked.request.headers.get("transfer-encoding") == "chunked"
    assert chunked.status_code == 413 and "too large" in chunked.text
    with Memory(("ui-server", "t"), settings=settings) as mem:
        assert mem.get(record_id).lesson == "Run migrations first"  # unchanged
    small = httpx.post(url, data={"lesson": "Run the migrations first"}, headers=AUTH)
    assert small.status_code == 303  # under the limit: saved


def test_a_lesson_page_shows_its_versions(base: str, settings: Settings, embedder: object) -> None:
    """The inspector shows a lesson's chain of versions (docs/versions.md) on the page of
    each version, and marks an old one superseded; an edit of the text saves a version."""
    with Memory(("ui-server", "t"), settings=settings, embedder=embedder) as mem:  # type: ignore[arg-type]
        old = mem.write({"trigger": "a schema change", "lesson": "Run migrations by hand"})
        new = mem.supersede(
            old.id,
            {"trigger": "a schema change", "lesson": "Let the deploy run migrations"},
            reason="manual runs were forgotten",
            actor="reviewer",
        )
    for rid in (old.id, new.id):
        page = httpx.get(f"{base}/records/{rid}?ns=ui-server&ns=t", headers=AUTH)
        assert page.status_code == 200, page.text
        assert 'id="versions"' in page.text and "Run migrations by hand" in page.text
        assert "manual runs were forgotten" in page.text and "current" in page.text
    assert (
        'id="superseded"'
        in httpx.get(f"{base}/records/{old.id}?ns=ui-server&ns=t", headers=AUTH).text
    )
    edited = httpx.post(
        f"{base}/records/{new.id}/edit?ns=ui-server&ns=t",
        headers={**AUTH, "Origin": base},
        data={
            "lesson": "Let the deploy job run migrations",
            "trigger": "a schema change",
            "scene": "general",
        },
        follow_redirects=False,
    )
    assert edited.status_code == 303, edited.text
    assert str(new.id) not in edited.headers["location"]  # the new version's page


@pytest.mark.parametrize("page", ["100000000000000000000", "9007199254740993", "0"])
def test_page_out_of_range_is_400(base: str, page: str) -> None:
    response = httpx.get(f"{base}/?ns=ui-server&ns=t&page={page}", headers=AUTH)
    assert response.status_code == 400, response.text
    assert "page must be an integer from 1 to" in response.text


def test_blank_token_refused_short_token_warned(
    caplog: pytest.LogCaptureFixture, settings: Settings
) -> None:
    for blank in ("", "   ", "\t\n"):
        with pytest.raises(ConfigurationError, match="blank"):
            create_app(settings=settings, token=blank)
    with caplog.at_level(logging.WARNING):
        create_app(settings=settings, token="short")
    assert "shorter than 16 characters" in caplog.text


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "HINDSIGHT_UI_TOKEN"} | env
    return subprocess.run(
        [*CLI, str(tmp_path), *args], env=environ, capture_output=True, text=True, timeout=120
    )


def test_cli_refuses_a_blank_token_in_one_line(tmp_path: Path) -> None:
    for host in ("127.0.0.1", "0.0.0.0"):
        done = _cli(tmp_path, "ui", "--host", host, "--port", "1", HINDSIGHT_UI_TOKEN="   ")
        assert done.returncode == 1, done.stderr
        assert "blank" in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_cli_without_the_ui_extra_says_which_to_install(tmp_path: Path) -> None:
    blocker = tmp_path / "starlette"
    blocker.mkdir()
    (blocker / "__init__.py").write_text(
        "raise ImportError('no starlette here', name='starlette')\n"
    )
    done = _cli(tmp_path, "ui")
    assert done.returncode == 1, done.stderr
    assert "[ui]'" in done.stderr and "pip install" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_cli_malformed_database_url_is_one_line(tmp_path: Path) -> None:
    for url in ("not a url", "postgresql://u@host:notaport/db"):
        done = _cli(tmp_path, "ui", HINDSIGHT_DATABASE_URL=url)
        assert done.returncode == 1, done.stderr
        assert "HINDSIGHT_DATABASE_URL is not a valid URL" in done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_cli_json_announces_where_it_listens(tmp_path: Path, database_url: str) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, str(tmp_path), "ui", "--port", str(port), "--json"],
        env={k: v for k, v in os.environ.items() if k != "HINDSIGHT_UI_TOKEN"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert json.loads(line) == {
            "server": "ui",
            "url": f"http://127.0.0.1:{port}/",
            "token_required": False,
        }, line
        deadline = time.monotonic() + 60
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
                break
            except httpx.ConnectError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err
