"""Token configuration, the bind check and the HTTP guards, without a server process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hindsight_adapters._http import is_loopback
from hindsight_adapters.mcp import (
    CURRENT_GRANT,
    BearerNamespaceMiddleware,
    BodyLimitMiddleware,
    Grant,
    check_bind,
    load_tokens,
    parse_tokens,
)
from hindsight_core import Settings
from hindsight_core.errors import ConfigurationError, ValidationError

LONG_A, LONG_B = "a" * 32, "b" * 32


def test_tokens_from_environment_string() -> None:
    tokens = parse_tokens(f" {LONG_A}=acme/agent , {LONG_B}=other/ns/deep ")
    assert tokens == {LONG_A: Grant(("acme", "agent")), LONG_B: Grant(("other", "ns", "deep"))}


@pytest.mark.parametrize("bad", ["justatoken", "=acme", "tok=", "tok=acme//agent"])
def test_malformed_tokens_are_configuration_errors(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="HINDSIGHT_MCP_TOKENS") as excinfo:
        parse_tokens(bad)
    assert "justatoken" not in str(excinfo.value)  # may be a secret: never echoed


@pytest.mark.parametrize(
    "content",
    [
        json.dumps({LONG_A: "acme/agent", LONG_B: ["other", "ns"]}),
        f"# tokens\n{LONG_A}=acme/agent\n\n{LONG_B}=other/ns  # second\n",
    ],
)
def test_tokens_file_json_or_lines(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tokens"
    path.write_text(content)
    settings = Settings(mcp_tokens_file=path, mcp_tokens=None)
    expected = {LONG_A: Grant(("acme", "agent")), LONG_B: Grant(("other", "ns"))}
    assert load_tokens(settings) == expected


def test_tokens_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_tokens(Settings(mcp_tokens_file=tmp_path / "missing"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigurationError, match="bad.json.*invalid JSON"):
        load_tokens(Settings(mcp_tokens_file=bad))


def test_environment_variable_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_MCP_TOKENS", f"{LONG_A}=env/ns")
    assert load_tokens(Settings()) == {LONG_A: Grant(("env", "ns"))}
    assert "env/ns" not in repr(Settings())  # a secret: never printed


def test_public_bind_needs_a_token() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert is_loopback(host)
        check_bind(host, {})
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
        assert not is_loopback(host)
        with pytest.raises(ConfigurationError, match="refusing.*HINDSIGHT_MCP_TOKENS"):
            check_bind(host, {})
        check_bind(host, {LONG_A: Grant(("acme",))})


class Recorder:
    """A tiny ASGI app that records the namespace and reads the whole body."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        grant = CURRENT_GRANT.get()
        self.seen.append((grant and grant.write, len(body)))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def call(app: Any, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, bytes]:
    scope = {
        "type": "http",
        "path": "/mcp",
        "method": "POST",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def test_bearer_middleware_sets_namespace_per_request() -> None:
    inner = Recorder()
    app = BearerNamespaceMiddleware(
        inner, {LONG_A: Grant(("a",)), LONG_B: Grant(("b",))}, Grant(("default",))
    )
    assert (await call(app, {"Authorization": f"Bearer {LONG_B}"}, [b"x"]))[0] == 200
    assert (await call(app, {"Authorization": f"bearer {LONG_A}"}, [b"x"]))[0] == 200
    for headers in ({}, {"Authorization": f"Basic {LONG_A}"}, {"Authorization": "Bearer x"}):
        status, body = await call(app, headers, [b"x"])
        assert status == 401 and json.loads(body)["error"]["code"] == -32001
    assert inner.seen == [(("b",), 1), (("a",), 1)]
    assert CURRENT_GRANT.get() is None  # reset after each request


async def test_body_limit_counts_streamed_chunks() -> None:
    inner = Recorder()
    app = BodyLimitMiddleware(inner, limit=1000)
    assert (await call(app, {}, [b"x" * 600, b"y" * 300]))[0] == 200
    assert (await call(app, {"Content-Length": "5000"}, [b"x"]))[0] == 413
    status, body = await call(app, {}, [b"x" * 600, b"y" * 600])  # no Content-Length
    assert status == 413 and b"too large" in body
    assert inner.seen == [(None, 900)]


def test_missing_extra_is_a_clear_error(tmp_path: Path) -> None:
    """With the mcp package hidden, `hindsight mcp` says which extra to install."""
    blocker = tmp_path / "mcp"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('no mcp here', name='mcp')\n")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); "
            "from hindsight_adapters.cli import main; sys.argv = ['hindsight', 'mcp']; main()",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "pip install 'agent-hindsight[mcp]'" in done.stderr


def test_stdio_namespace_from_settings_or_option() -> None:
    from hindsight_adapters.mcp._serve import _memory

    assert _memory(Settings(namespace="acme/agent"), None).namespace == ("acme", "agent")
    assert _memory(Settings(namespace="acme/agent"), "cli/ns").namespace == ("cli", "ns")
    with pytest.raises(ValidationError, match="namespace"):
        _memory(Settings(namespace="acme//agent"), None)


def test_blank_tokens_refused_short_ones_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blank = tmp_path / "blank.json"
    blank.write_text(json.dumps({"   ": "acme/agent"}))
    with pytest.raises(ConfigurationError, match="blank"):
        load_tokens(Settings(mcp_tokens_file=str(blank)))
    short = load_tokens(Settings(mcp_tokens="short=acme/agent"))
    assert short == {"short": Grant(("acme", "agent"))}
    assert "shorter than 16 characters" in caplog.text


async def test_body_limit_answers_413_even_if_the_app_answers_the_error() -> None:
    """The MCP SDK catches the error raised at the limit and answers 500 itself."""

    async def swallowing(scope: Any, receive: Any, send: Any) -> None:
        try:
            while (await receive()).get("more_body"):
                pass
        except Exception:  # noqa: BLE001 - what the SDK does
            await send({"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": b"Internal Server Error"})

    app = BodyLimitMiddleware(swallowing, limit=1000)
    status, body = await call(app, {}, [b"x" * 600, b"y" * 600])
    assert status == 413 and b"too large" in body


@pytest.mark.parametrize("args", [["mcp"], ["mcp", "--http", "--port", "1"], ["worker", "--once"]])
def test_malformed_database_url_is_one_line_at_start(args: list[str]) -> None:
    """Not a traceback, and not a server that starts and then cannot work."""
    import os

    env = {**os.environ, "HINDSIGHT_DATABASE_URL": "postgresql://u@host:notaport/db"}
    done = subprocess.run(
        [sys.executable, "-c", "from hindsight_adapters.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "not a valid URL" in done.stderr, done.stderr
