"""The memory inspector end to end, in a real headless Chromium (Debian's).

A real server (uvicorn on a free loopback port, in a thread) over the test
database; Playwright drives /usr/bin/chromium (``scripts/install-browser.sh``).
Screenshots of the main views go to test-artifacts/ui/; docs/inspector.png (the
README's) is written when missing or with HINDSIGHT_UPDATE_SCREENSHOTS=1.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from hindsight_core import Memory, NotFoundError, Settings

pytest.importorskip("starlette", reason="the ui extra is not installed")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(
        "Chromium is not installed: run scripts/install-browser.sh", allow_module_level=True
    )

import uvicorn  # noqa: E402

from hindsight_adapters.ui import create_app  # noqa: E402
from hindsight_adapters.ui.fmt import nsq  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "test-artifacts" / "ui"
DOCS_SHOT = ROOT / "docs" / "inspector.png"
TOKEN = "test-token-8c1f"
DEMO_NS = ("acme-ui-demo", "support-agent")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

SEED = [
    {
        "scene": "file-cleanup",
        "trigger": "deleting old files in downloads",
        "lesson": "Check the file extension before deleting",
        "outcome": "success",
        "source": {"agent": "cleaner", "task": "task-17", "tool": "shell.rm"},
    },
    {
        "scene": "file-cleanup",
        "trigger": "moving large folders between disks",
        "lesson": "Copy first; delete only after verifying",
        "outcome": "success: 40 GB moved",
    },
    {
        "scene": "web",
        "trigger": "calling a flaky HTTP API",
        "lesson": "Retry with exponential backoff",
        "outcome": "partial: 2 of 3 calls",
    },
    {
        "scene": "web",
        "trigger": "scraping product pages",
        "lesson": "Respect robots.txt and rate limits",
        "critical": True,
    },
    {
        "scene": "taxes",
        "trigger": "yearly tax filing",
        "lesson": "File before April 30 to avoid penalties",
        "critical": True,
    },
]
DEMO_EXTRA = [
    {
        "scene": "support",
        "trigger": "customer asks for a refund after 30 days",
        "lesson": "Offer store credit; refunds need a manager",
        "outcome": "success",
        "source": {"agent": "support-bot", "task": "ticket-4412", "tool": "crm.lookup"},
    },
    {
        "scene": "support",
        "trigger": "order shows delivered but customer has nothing",
        "lesson": "Open a carrier claim before reshipping",
        "outcome": "partial",
    },
    {
        "scene": "code-review",
        "trigger": "tests pass locally but fail in CI",
        "lesson": "Pin the timezone and locale in CI",
        "outcome": "success",
    },
    {
        "scene": "数据抓取",
        "trigger": "抓取商品页面时被封禁",
        "lesson": "降低请求频率并轮换代理",
        "outcome": "success",
    },
]


# ------------------------------------------------------------------ server and browser


class Server:
    """uvicorn serving the inspector on a free loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the inspector did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


def _serve(
    settings: Settings, embedder: Any, token: str | None, **options: Any
) -> Iterator[Server]:
    # The app creates its AsyncMemory and closes it on shutdown, on the server's loop.
    options.setdefault("namespace", ("ui", "default"))
    app = create_app(settings=settings, embedder=embedder, token=token, **options)
    with Server(app) as server:
        yield server


@pytest.fixture(scope="module")
def server(settings: Settings, embedder: Any) -> Iterator[Server]:
    yield from _serve(settings, embedder, None, page_size=4)


@pytest.fixture(scope="module")
def secured(settings: Settings, embedder: Any) -> Iterator[Server]:
    yield from _serve(settings, embedder, TOKEN)


@pytest.fixture(scope="module")
def scoped(settings: Settings, embedder: Any) -> Iterator[Server]:
    yield from _serve(settings, embedder, None, namespace=DEMO_NS, scope=DEMO_NS[:1])


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 760})
    pg = context.new_page()
    errors: list[str] = []  # script errors and assets that did not load (4xx pages are fine)
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("requestfailed", lambda r: errors.append(f"{r.url}: {r.failure}"))
    pg.on(
        "response",
        lambda r: (
            errors.append(f"{r.url}: {r.status}")
            if "/static/" in r.url and r.status != 200
            else None
        ),
    )
    yield pg
    context.close()
    assert not errors, f"errors in the page: {errors}"


@pytest.fixture
def seeded(memory: Memory) -> dict[str, Any]:
    """Records in the test's namespace, some feedback, one archived record."""
    ids = [r.id for r in memory.write_many(SEED)]
    memory.mark_used(ids[0])
    memory.mark_used(ids[2])
    memory.mark_used(ids[2], helpful=False)
    old = memory.write(
        {
            "scene": "web",
            "trigger": "parsing HTML",
            "lesson": "Use a parser, not regular expressions",
        }
    )
    memory.archive(old.id)
    return {"ids": ids, "archived": old.id}


def shot(pg: Any, name: str, *, docs: bool = False) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    if docs and (not DOCS_SHOT.exists() or os.environ.get("HINDSIGHT_UPDATE_SCREENSHOTS")):
        DOCS_SHOT.parent.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(DOCS_SHOT), full_page=False)


# ------------------------------------------------------------------ tests


def test_overview_namespaces_scenes_and_sortable_table(
    page: Any, server: Server, memory: Memory, seeded: dict[str, Any]
) -> None:
    ns = memory.namespace
    page.goto(f"{server.url}/?{nsq(ns)}")
    current = page.locator("#namespaces li.current")
    assert re.search(rf"{ns[1]}\s+5\s*\+1", current.inner_text())
    scenes = {
        li.locator("a").inner_text(): li.locator(".count").inner_text()
        for li in page.locator("#scenes li").all()[1:]
    }
    assert scenes == {"file-cleanup": "2", "web": "2 +1", "taxes": "1"}
    rows = page.locator("#records tbody tr")
    assert "5 live records" in page.locator("h1").inner_text()
    assert rows.count() == 4  # the test server shows 4 per page
    assert "page 1 of 2" in page.locator(".pager").inner_text()
    shot(page, "overview")
    page.click("a[rel=next]")
    assert rows.count() == 1 and "page 2 of 2" in page.locator(".pager").inner_text()
    page.click("a[rel=prev]")

    page.get_by_role("link", name=re.compile("^Score")).click()
    page.wait_for_url(re.compile("sort=score"))
    first_lesson = rows.first.locator("td.lesson a").inner_text()
    assert first_lesson in (SEED[0]["lesson"], SEED[2]["lesson"])  # used: score 1.1 or so
    scores = [float(c) for c in page.locator("#records tbody td.num[title]").all_inner_texts()]
    assert scores == sorted(scores, reverse=True) and len(scores) == 4
    page.get_by_role("link", name=re.compile("^Score")).click()  # toggles to ascending
    page.wait_for_url(re.compile("dir=asc"))
    low = [float(c) for c in page.locator("#records tbody td.num[title]").all_inner_texts()]
    assert low == sorted(low) and low[0] <= scores[-1]

    page.get_by_role("link", name="archived", exact=True).click()
    assert page.locator("#records tbody tr").count() == 1
    assert "Use a parser" in page.locator("#records tbody").inner_text()


def test_search_shows_the_score_breakdown(
    page: Any, server: Server, memory: Memory, seeded: dict[str, Any]
) -> None:
    page.goto(f"{server.url}/?{nsq(memory.namespace)}")
    page.fill("#q", "remove stale files from the downloads folder")
    page.press("#q", "Enter")
    page.wait_for_url(re.compile("/search"))
    hits = page.locator("#hits li.hit")
    assert hits.count() >= 3
    top = hits.first
    assert top.locator("a.lesson").inner_text() == SEED[0]["lesson"]
    expected = memory.search("remove stale files from the downloads folder", top_k=10)[0]
    parts = {
        p: float(top.locator(f'[data-part="{p}"]').inner_text())
        for p in ("semantic", "keyword", "relevance", "decay")
    }
    assert parts["semantic"] == pytest.approx(expected.breakdown.semantic, abs=1e-3)
    assert parts["keyword"] == pytest.approx(expected.breakdown.keyword, abs=1e-3)
    assert parts["decay"] == pytest.approx(expected.breakdown.decay, abs=1e-3)
    final = top.locator('[data-part="final"] b').inner_text()
    assert float(final) == pytest.approx(expected.score, abs=1e-3)
    assert float(top.locator(".final").inner_text()) == pytest.approx(expected.score, abs=1e-3)
    shot(page, "search")

    # bad input gets a message on the page, not a stack trace
    page.goto(f"{server.url}/search?{nsq(memory.namespace, q='files', top_k='500')}")
    assert "top_k must be an integer from 1 to 100" in page.locator(".flash.error").inner_text()


def test_archive_and_restore_reach_the_database(
    page: Any, server: Server, memory: Memory, seeded: dict[str, Any]
) -> None:
    rid = seeded["ids"][1]
    page.goto(f"{server.url}/records/{rid}?{nsq(memory.namespace)}")
    assert page.locator("#state").inner_text() == "live"
    page.click("#archive")
    page.wait_for_selector("text=Archived: it will not be recalled")
    assert page.locator("#state").inner_text().startswith("archived")
    assert memory.get(rid).archived_at is not None
    assert rid not in [h.record.id for h in memory.search("move big folders", top_k=10)]

    page.click("#restore")
    page.wait_for_selector("text=Restored: it can be recalled again.")
    assert page.locator("#state").inner_text() == "live"
    assert memory.get(rid).archived_at is None
    history = page.locator("#history").inner_text()
    assert "archive" in history and "restore" in history
    assert "svg" in page.locator("svg.chart").evaluate("e => e.tagName.toLowerCase()")
    shot(page, "record")


def test_edit_lesson_shows_validation_error_then_saves(
    page: Any, server: Server, memory: Memory, seeded: dict[str, Any]
) -> None:
    rid = seeded["ids"][2]
    page.goto(f"{server.url}/records/{rid}?{nsq(memory.namespace)}")
    page.click("#edit summary")
    too_long = "Retry with exponential backoff and jitter, and log every single failure"
    page.fill("#f-lesson", too_long)
    assert "over" in (page.locator(".counter").get_attribute("class") or "")
    page.click("#save")
    error = page.locator("#edit-error").inner_text()
    assert "lesson" in error and "at most 50" in error
    assert page.locator("#f-lesson").input_value() == too_long  # the input is kept
    shot(page, "edit-error")
    assert memory.get(rid).lesson == SEED[2]["lesson"]

    page.fill("#f-lesson", "Retry with backoff and jitter")
    page.click("#save")
    page.wait_for_selector("text=Saved and re-embedded.")
    assert page.locator("#lesson").inner_text() == "Retry with backoff and jitter"
    old, new = memory.history(rid)  # a new version (docs/versions.md), on its own page
    assert new.lesson == "Retry with backoff and jitter" and old.superseded_by == new.id
    assert f"/records/{new.id}" in page.url
    assert "current" in page.locator("#versions").inner_text()
    assert memory.search("add jitter to retries", top_k=1)[0].record.id == new.id


def test_critical_merge_links_and_delete_with_confirmation(
    page: Any, server: Server, memory: Memory, seeded: dict[str, Any]
) -> None:
    a, b = seeded["ids"][0], seeded["ids"][1]
    merged = memory.merge(
        [a, b],
        into={
            "scene": "file-cleanup",
            "trigger": "cleaning disks",
            "lesson": "Verify before deleting anything",
        },
    )
    ns = memory.namespace
    page.goto(f"{server.url}/records/{merged.id}?{nsq(ns)}")
    merges = page.locator("#merges").inner_text()
    assert SEED[0]["lesson"] in merges and SEED[1]["lesson"] in merges
    page.get_by_role("link", name=SEED[0]["lesson"]).click()
    assert "merged into" in page.locator("#merges").inner_text()
    assert "cleaner" in page.locator("#provenance").inner_text()
    assert "shell.rm" in page.locator("#provenance").inner_text()

    page.goto(f"{server.url}/records/{merged.id}?{nsq(ns)}")
    page.click("#toggle-critical")
    page.wait_for_selector("text=Marked critical")
    assert memory.get(merged.id).critical is True

    page.click("#delete")
    assert "Delete this record for good?" in page.locator("h1").inner_text()
    page.get_by_role("link", name="Cancel").click()
    assert memory.get(merged.id)  # still there
    page.click("#delete")
    page.click("#confirm-delete")
    page.wait_for_selector("text=Deleted for good.")
    with pytest.raises(NotFoundError):
        memory.get(merged.id)


def test_token_is_required_when_configured(
    page: Any, secured: Server, memory: Memory, seeded: dict[str, Any]
) -> None:
    url = f"{secured.url}/?{nsq(memory.namespace)}"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    rid = seeded["ids"][0]
    posted = httpx.post(f"{secured.url}/records/{rid}/archive?{nsq(memory.namespace)}")
    assert posted.status_code == 401
    assert memory.get(rid).archived_at is None

    page.goto(url)
    assert page.url.startswith(f"{secured.url}/login")
    page.fill("#token", "not-the-token")
    page.click("button[type=submit] >> text=Sign in")
    assert "That token is not right." in page.locator(".flash.error").inner_text()
    shot(page, "login")
    page.fill("#token", TOKEN)
    page.click("button[type=submit] >> text=Sign in")
    page.wait_for_url(url)
    assert page.locator("#records tbody tr").count() == 5
    cookie = page.context.cookies()[0]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and TOKEN not in cookie["value"]


def test_cross_site_posts_and_foreign_hosts_are_refused(
    server: Server, memory: Memory, seeded: dict[str, Any]
) -> None:
    rid = seeded["ids"][0]
    target = f"{server.url}/records/{rid}/archive?{nsq(memory.namespace)}"
    refused = httpx.post(target, headers={"Origin": "https://evil.example"})
    assert refused.status_code == 403
    rebound = httpx.get(f"{server.url}/", headers={"Host": "evil.example"})
    assert rebound.status_code == 400
    assert memory.get(rid).archived_at is None
    assert httpx.post(target, headers={"Origin": server.url}).status_code == 303
    assert memory.get(rid).archived_at is not None


def test_scope_and_the_readme_screenshot(
    browser: Any, scoped: Server, settings: Settings, embedder: Any, memory: Memory
) -> None:
    """A month of history in a scoped inspector; its overview is docs/inspector.png."""
    start = datetime.now(UTC) - timedelta(days=26)
    day = [start]
    demo = Memory(DEMO_NS, settings=settings, embedder=embedder, clock=lambda: day[0])
    other = Memory((DEMO_NS[0], "cleanup-agent"), settings=settings, embedder=embedder)
    try:
        ids = [r.id for r in demo.write_many(SEED + DEMO_EXTRA)]
        other.write_many(SEED[:2])
        for i in range(26):
            day[0] = start + timedelta(days=i, hours=9)
            for j, rid in enumerate(ids):
                if (i * 7 + j * 3) % 5 == 0:
                    demo.mark_used(rid, helpful=(i + j) % 4 != 0)
        day[0] = datetime.now(UTC)
        demo.archive(ids[-1])

        context = browser.new_context(viewport={"width": 1280, "height": 720})
        pg = context.new_page()
        pg.goto(f"{scoped.url}/")
        listed = pg.locator("#namespaces a").all_inner_texts()
        assert listed == [f"{DEMO_NS[0]} / cleanup-agent", f"{DEMO_NS[0]} / support-agent"]
        assert "events" in pg.locator("svg.chart").get_attribute("aria-label")
        shot(pg, "overview-month", docs=True)
        pg.goto(f"{scoped.url}/?{nsq(memory.namespace)}")  # outside the scope
        assert "outside this inspector's scope" in pg.locator(".flash.error").inner_text()
        context.close()
    finally:
        for mem in (demo, other):
            for rec in mem.list_records(archived=None, limit=100):
                mem.forget(rec.id)
            mem.close()
