"""Many servers, one database: three ``hindsight mcp --http`` processes on one PostgreSQL.

Writers of two tenants call all three servers at once, as a load balancer in front
of them would spread them (docker/compose.yml). What must hold across processes:
identical lessons written concurrently end up as one record each (dedup holds under
concurrent writers on different servers), no write and no usage count is lost, and
each token reaches its own namespace only. Bounded: the whole run has a deadline.
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from _mcp_util import SIGTERM_EXIT, free_port, http_client, start_cli, stop, text, wait_healthy

from hindsight_core import Memory, Settings

LESSONS = [
    "Pin the Node version in CI",
    "Back up the database before migrations",
    "Rotate API keys every month",
    "Compress images before upload",
]
SERVERS = 3
REPEATS = 2  # each server writes each lesson this many times, per tenant
DEADLINE = 240.0  # seconds for the concurrent part


@pytest.fixture(scope="module")
def cluster(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[str], dict[str, tuple[str, ...]]]]:
    run = uuid.uuid4().hex[:8]
    tokens = {
        secrets.token_urlsafe(24): ("cluster", f"a{run}"),
        secrets.token_urlsafe(24): ("cluster", f"b{run}"),
    }
    env = {"HINDSIGHT_MCP_TOKENS": ",".join(f"{t}={'/'.join(ns)}" for t, ns in tokens.items())}
    logs: list[Path] = []
    procs = []
    urls = []
    try:
        for i in range(SERVERS):  # all start at once; each loads the model
            port = free_port()
            logs.append(tmp_path_factory.mktemp(f"mcp-{i}") / "server.log")
            procs.append(start_cli(["mcp", "--http", "--port", str(port)], env, logs[-1]))
            urls.append(f"http://127.0.0.1:{port}")
        for proc, base, log in zip(procs, urls, logs, strict=True):
            wait_healthy(proc, base, log, timeout=180)
        yield [f"{u}/mcp" for u in urls], tokens
    finally:
        codes: list[int | AssertionError] = []
        for proc in procs:  # every one, before any assertion
            try:
                codes.append(stop(proc))
            except AssertionError as exc:  # did not stop on SIGTERM (killed)
                codes.append(exc)
        for code, log in zip(codes, logs, strict=False):
            assert code == SIGTERM_EXIT, log.read_text()  # a graceful exit
            assert "Traceback" not in log.read_text(), log.read_text()


class RoundRobin(httpx2.AsyncBaseTransport):
    """An ``httpx2`` transport that sends each request to the next server in turn, as
    a load balancer would; counts what each one got."""

    def __init__(self, bases: list[str]) -> None:
        self.ports = [int(b.rsplit(":", 1)[1]) for b in bases]
        self.sent = dict.fromkeys(self.ports, 0)
        self._inner = httpx2.AsyncHTTPTransport()
        self._n = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = self.ports[self._n % len(self.ports)]
        self._n += 1
        self.sent[port] += 1
        request.url = request.url.copy_with(port=port)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _args(lesson: str) -> dict[str, str]:
    return {
        "scene": "ci",
        "trigger": f"before: {lesson.lower()}",
        "action": "did it",
        "outcome": "success",
        "lesson": lesson,
    }


async def test_three_servers_concurrent_writers(cluster, settings: Settings) -> None:
    urls, tokens = cluster
    (token_a, ns_a), (token_b, ns_b) = tokens.items()

    async def writer(url: str, token: str) -> list[str]:
        async with http_client(url, token) as client:
            calls = [
                client.call_tool("write_memory", _args(lesson))
                for _ in range(REPEATS)
                for lesson in LESSONS
            ]
            results = await asyncio.gather(*calls)
        assert not any(r.is_error for r in results), [text(r) for r in results]
        return [r.structured_content["id"] for r in results]

    async def marker(url: str, token: str, rid: str, times: int) -> list[bool]:
        async with http_client(url, token) as client:
            results = await asyncio.gather(
                *(
                    client.call_tool("update_memory_usage", {"id": rid, "helpful": True})
                    for _ in range(times)
                )
            )
        return [r.is_error for r in results]

    async def run() -> None:
        ids = await asyncio.gather(*(writer(u, t) for u in urls for t in (token_a, token_b)))
        a_ids = {i for n, batch in enumerate(ids) if n % 2 == 0 for i in batch}
        b_ids = {i for n, batch in enumerate(ids) if n % 2 == 1 for i in batch}
        # One record per lesson and tenant, whichever server took the write.
        assert len(a_ids) == len(LESSONS) and len(b_ids) == len(LESSONS)
        assert not a_ids & b_ids
        rid = sorted(a_ids)[0]
        errors = await asyncio.gather(*(marker(u, token_a, rid, 5) for u in urls))
        assert not any(e for batch in errors for e in batch)
        # Token B cannot touch A's record, through any server.
        denied = await asyncio.gather(*(marker(u, token_b, rid, 1) for u in urls))
        assert all(e for batch in denied for e in batch)
        return None

    await asyncio.wait_for(run(), DEADLINE)

    with Memory(ns_a, settings=settings) as core_a, Memory(ns_b, settings=settings) as core_b:
        for core, ns in ((core_a, ns_a), (core_b, ns_b)):
            records = core.list_records(limit=100)
            assert sorted(r.lesson for r in records) == sorted(LESSONS), ns
            assert {r.namespace for r in records} == {ns}
            # No write lost: every one merged into its lesson's record.
            assert sum(r.occurrences for r in records) == SERVERS * REPEATS * len(LESSONS)
        used = [r for r in core_a.list_records(limit=100) if r.use_count]
        assert len(used) == 1 and used[0].use_count == SERVERS * 5  # no lost usage count
        assert not any(r.use_count for r in core_b.list_records(limit=100))


async def test_one_client_session_spread_over_all_servers(
    cluster,
    settings: Settings,
) -> None:
    """The servers keep no session state: one MCP session whose every request goes to
    another server (initialize on one, calls on the others) works."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    urls, tokens = cluster
    token, ns = next(iter(tokens.items()))
    balancer = RoundRobin([u.removesuffix("/mcp") for u in urls])
    hc = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        transport=balancer,
        timeout=httpx2.Timeout(30, read=120),
    )

    async def session() -> list[str]:
        async with hc, Client(streamable_http_client(urls[0], http_client=hc)) as client:
            wrote = await client.call_tool("write_memory", _args("Tag releases after CI"))
            found = [
                await client.call_tool("search_memory", {"query": "tag the release"})
                for _ in range(SERVERS)
            ]
        assert not wrote.is_error, text(wrote)
        return [wrote.structured_content["id"]] + [
            f.structured_content["results"][0]["id"] for f in found
        ]

    ids = await asyncio.wait_for(session(), DEADLINE)
    assert len(set(ids)) == 1
    assert all(n >= 2 for n in balancer.sent.values()), balancer.sent
    with Memory(ns, settings=settings) as core:
        assert core.get(ids[0]).lesson == "Tag releases after CI"
