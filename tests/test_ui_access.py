"""The inspector's view of sharing (docs/sharing.md): every token's grant with its
secret masked, the namespace of hits and lessons, and who gave feedback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from hindsight_core import Memory, Settings

pytest.importorskip("starlette", reason="the ui extra is not installed")
from _mcp_util import serving

from hindsight_adapters.ui import create_app

RUN = f"uiacc{uuid.uuid4().hex[:8]}"
A, B, S = "A" * 30 + "a1", "B" * 30 + "b2", "S" * 30 + "s3"
TOKENS = f"{A}={RUN}/a;read={RUN}/shared;name=agent-a,{B}={RUN}/b;read={RUN}/*,{S}={RUN}/shared"


def serve(settings: Settings, embedder: object, **options: object) -> Iterator[str]:
    app = create_app(settings=settings, embedder=embedder, **options)  # type: ignore[arg-type]
    with serving(app) as base:
        yield base


@pytest.fixture(scope="module")
def base(database_url: str, embedder: object) -> Iterator[str]:
    settings = Settings(
        database_url=database_url,
        mcp_tokens=TOKENS,
        namespace=f"{RUN}/solo",
        mcp_read=f"{RUN}/shared",
    )
    yield from serve(settings, embedder, namespace=(RUN, "shared"))


def test_access_page_shows_each_grant_never_a_secret(base: str) -> None:
    page = httpx.get(f"{base}/access")
    assert page.status_code == 200, page.text
    html = page.text
    for secret in (A, B, S):
        assert secret not in html and secret[-4:] not in html
    assert html.count("•••• 32 chars") == 3
    rows = html.split('<tr class="grant">')[1:]
    assert len(rows) == 4  # three tokens and the stdio server
    agent_a = next(r for r in rows if "agent-a" in r)
    assert f">{RUN}/a</a>" in agent_a and f">{RUN}/shared</a>" in agent_a
    b = next(r for r in rows if f"mcp:{RUN}/b" in r)
    assert f"{RUN}/*" in b
    stdio = next(r for r in rows if "stdio" in r)
    assert f"mcp:{RUN}/solo" in stdio and f">{RUN}/shared</a>" in stdio


def test_lesson_page_shows_namespace_readers_and_who_gave_feedback(
    base: str, settings: Settings, embedder: object
) -> None:
    with Memory((RUN, "shared"), settings=settings, embedder=embedder) as mem:  # type: ignore[arg-type]
        rid = mem.write({"trigger": "a CI runner is fresh", "lesson": "Warm the CI cache"}).id
        mem.mark_used(rid, True, by="agent-a")
    page = httpx.get(f"{base}/records/{rid}?ns={RUN}&ns=shared")
    assert page.status_code == 200, page.text
    assert f'<dd id="record-ns">{RUN}/shared' in page.text
    assert f"also read by agent-a, mcp:{RUN}/b" in page.text
    assert 'by <b class="by">agent-a</b>' in page.text
    hits = httpx.get(f"{base}/search", params=[("ns", RUN), ("ns", "shared"), ("q", "CI cache")])
    assert f"namespace {RUN}/shared" in hits.text


def test_bad_token_settings_are_shown_not_a_crash(database_url: str, embedder: object) -> None:
    settings = Settings(database_url=database_url, mcp_tokens=f"{A}={RUN}/a;read=x/*/y")
    for base in serve(settings, embedder, namespace=(RUN, "a")):
        page = httpx.get(f"{base}/access")
        assert page.status_code == 200
        assert "token 1 (writes" in page.text and "may only be the last label" in page.text
        assert A not in page.text


def test_a_scoped_inspector_shows_only_grants_that_touch_its_scope(
    database_url: str, embedder: object
) -> None:
    tokens = f"{TOKENS},{'O' * 32}=other/ns"
    settings = Settings(database_url=database_url, mcp_tokens=tokens)
    for base in serve(settings, embedder, namespace=(RUN, "b"), scope=(RUN, "b")):
        html = httpx.get(f"{base}/access").text
        assert f"mcp:{RUN}/b" in html  # writes the scope
        assert "agent-a" not in html and "other/ns" not in html
