"""Shared reads over MCP (docs/sharing.md): real tokens, a real server, real SDK clients.

One ``hindsight mcp --http`` process for the module with three tokens:

- ``a`` writes ``<run>/a`` and reads ``<run>/shared``;
- ``b`` writes ``<run>/b`` and reads ``<run>/*`` (the whole tree);
- ``s`` writes ``<run>/shared``.

and one stdio server (``--namespace <run>/solo --read <run>/shared``). What each may
see and do is checked through the tools and, underneath, through the core.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from _mcp_util import (
    SIGTERM_EXIT,
    free_port,
    http_client,
    start_cli,
    stdio_client,
    stop,
    text,
    wait_healthy,
)

from hindsight_core import Memory, Settings

RUN = f"share{uuid.uuid4().hex[:8]}"
NS_A, NS_B, NS_S, NS_SOLO = ((RUN, x) for x in ("a", "b", "shared", "solo"))


def show(ns: tuple[str, ...]) -> str:
    return "/".join(ns)


@dataclass
class Server:
    url: str
    a: str
    b: str
    s: str


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    a, b, s = (secrets.token_urlsafe(24) for _ in range(3))
    tokens = (
        f"{a}={show(NS_A)};read={show(NS_S)};name=agent-a, "
        f"{b}={show(NS_B)};read={RUN}/*\n"
        f"{s}={show(NS_S)}"
    )
    port = free_port()
    log = tmp_path_factory.mktemp("mcp-sharing") / "server.log"
    proc = start_cli(["mcp", "--http", "--port", str(port)], {"HINDSIGHT_MCP_TOKENS": tokens}, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, log)
        yield Server(f"{base}/mcp", a, b, s)
    finally:
        assert stop(proc) == SIGTERM_EXIT, log.read_text()
        output = log.read_text()
        assert "Traceback" not in output
        assert a not in output and b not in output and s not in output  # secrets never logged


def lesson(text_: str, scene: str = "ci") -> dict[str, Any]:
    return {
        "scene": scene,
        "trigger": "the CI build fails on a fresh runner",
        "action": "pinned the toolchain version",
        "outcome": "success",
        "lesson": text_,
    }


@dataclass
class Lessons:
    a: str
    b: str
    s: str


@pytest.fixture(scope="module")
async def lessons(server: Server) -> Lessons:
    """One lesson per namespace, written by its own token."""
    ids = []
    for token, words in (
        (server.a, "Agent A: cache the npm directory between CI runs"),
        (server.b, "Agent B: pin the Node version in the CI image"),
        (server.s, "Team: run the CI build on a clean runner weekly"),
    ):
        async with http_client(server.url, token) as client:
            wrote = await client.call_tool("write_memory", lesson(words))
            assert not wrote.is_error, text(wrote)
            ids.append(wrote.structured_content["id"])
    return Lessons(*ids)


async def search(url: str, token: str, **args: Any) -> Any:
    async with http_client(url, token) as client:
        return await client.call_tool(
            "search_memory", {"query": "CI build fails on a runner", "top_k": 20, **args}
        )


def found(result: Any) -> dict[str, str]:
    assert not result.is_error, text(result)
    return {r["id"]: r["namespace"] for r in result.structured_content["results"]}


async def test_a_reads_its_own_and_shared_never_b(server: Server, lessons: Lessons) -> None:
    hits = found(await search(server.url, server.a))
    assert hits[lessons.a] == show(NS_A)
    assert hits[lessons.s] == show(NS_S)
    assert lessons.b not in hits
    assert set(hits.values()) <= {show(NS_A), show(NS_S)}


async def test_b_reads_the_whole_tree(server: Server, lessons: Lessons) -> None:
    hits = found(await search(server.url, server.b))
    assert {hits[lessons.a], hits[lessons.b], hits[lessons.s]} == {
        show(NS_A),
        show(NS_B),
        show(NS_S),
    }
    # A token that writes the shared namespace and reads nothing else sees only it.
    assert set(found(await search(server.url, server.s)).values()) == {show(NS_S)}


async def test_namespaces_narrow_to_what_is_granted(server: Server, lessons: Lessons) -> None:
    only_shared = found(await search(server.url, server.a, namespaces=[show(NS_S)]))
    assert set(only_shared) == {lessons.s}
    only_own = found(await search(server.url, server.b, namespaces=[show(NS_B)]))
    assert set(only_own) == {lessons.b}
    for asked in ([show(NS_B)], [f"{RUN}/*"], [show(NS_S), "other/ns"]):
        refused = await search(server.url, server.a, namespaces=asked)
        message = text(refused)
        assert refused.is_error and "is not readable by agent-a" in message, message
        assert f"may read {show(NS_A)} (its own), {show(NS_S)}" in message
        assert "Agent B" not in message and lessons.b not in message  # nothing of b leaks
    bad = await search(server.url, server.a, namespaces=["x/*/y"])
    assert bad.is_error and "namespaces[0]" in text(bad)


async def test_ids_of_others_answer_no_record(
    server: Server, lessons: Lessons, settings: Settings
) -> None:
    unknown = str(uuid.uuid4())
    async with http_client(server.url, server.a) as a:
        for tool, args in (
            ("update_memory_usage", {"id": "{id}"}),
            ("forget_memory", {"id": "{id}"}),
            ("memory_history", {"id": "{id}"}),
            ("supersede_memory", {"id": "{id}", "lesson": "Hijacked", "reason": "r"}),
        ):
            answers = []
            for rid in (lessons.b, unknown):
                result = await a.call_tool(tool, {k: v.format(id=rid) for k, v in args.items()})
                assert result.is_error, (tool, text(result))
                answers.append(text(result).replace(rid, "<id>"))
            # b's record answers exactly as an id that exists nowhere: no existence leak.
            assert answers[0] == answers[1] and "no record" in answers[0], (tool, answers)
    with Memory(NS_B, settings=settings) as mem:
        record = mem.get(lessons.b)
    assert record.use_count == 0 and record.superseded_by is None


async def test_writes_stay_in_the_own_namespace(server: Server, settings: Settings) -> None:
    async with http_client(server.url, server.b) as b:  # b reads everything under RUN
        wrote = await b.call_tool("write_memory", lesson("Agent B: retry flaky tests once"))
        rid = wrote.structured_content["id"]
        stats = json.loads((await b.read_resource("memory://stats")).contents[0].text)
    assert stats["namespace"] == list(NS_B) and stats["reads"] == [f"{RUN}/*"]
    with Memory(NS_B, settings=settings) as mem:
        assert mem.get(rid).namespace == NS_B
        assert mem.locate(rid, namespaces=[f"{RUN}/*"]) == NS_B


async def test_feedback_on_a_shared_lesson_is_recorded_with_who(
    server: Server, lessons: Lessons, settings: Settings
) -> None:
    async with http_client(server.url, server.a) as a:
        used = await a.call_tool("update_memory_usage", {"id": lessons.s, "helpful": True})
        assert not used.is_error, text(used)
        assert used.structured_content["use_count"] >= 1
        chain = await a.call_tool("memory_history", {"id": lessons.s})  # read, works
        assert [v["id"] for v in chain.structured_content["versions"]] == [lessons.s]
    async with http_client(server.url, server.b) as b:
        review = await b.call_tool(
            "review_task",
            {"goal": "fix CI", "outcome": "success", "recalled": [lessons.s], "used": []},
        )
        assert not review.is_error, text(review)
        assert review.structured_content["detail"]["shared_feedback"] == [
            {"id": lessons.s, "namespace": show(NS_S), "helpful": False}
        ]
    with Memory(NS_S, settings=settings) as mem:
        events = [(e.kind, e.detail.get("by")) for e in mem.events(lessons.s)]
    assert ("used", "agent-a") in events, events
    assert ("unhelpful", f"mcp:{show(NS_B)}") in events, events


async def test_changes_to_a_shared_lesson_are_read_only(
    server: Server, lessons: Lessons, settings: Settings
) -> None:
    with Memory(NS_S, settings=settings) as mem:
        before = mem.get(lessons.s)
    async with http_client(server.url, server.a) as a:
        for tool, args, what in (
            ("forget_memory", {"id": lessons.s}, "forgotten"),
            (
                "supersede_memory",
                {"id": lessons.s, "lesson": "Never clean the runner", "reason": "mine"},
                "superseded",
            ),
        ):
            result = await a.call_tool(tool, args)
            message = text(result)
            assert result.is_error, message
            assert (
                f"read-only here: agent-a writes {show(NS_A)}; {show(NS_S)} is read-only"
            ) in message, message
            assert f"cannot be {what}" in message
    async with http_client(server.url, server.b) as b:  # reads a's namespace through RUN/*
        result = await b.call_tool("forget_memory", {"id": lessons.a})
        assert result.is_error and (
            f"read-only here: mcp:{show(NS_B)} writes {show(NS_B)}; {show(NS_A)} is read-only"
        ) in text(result), text(result)
    with Memory(NS_A, settings=settings) as mem:
        assert mem.get(lessons.a).archived_at is None  # still there
    with Memory(NS_S, settings=settings) as mem:
        after = mem.get(lessons.s)
        assert [r.id for r in mem.history(lessons.s)] == [before.id]
    assert (after.lesson, after.superseded_by, after.archived_at) == (before.lesson, None, None)
    # The owner still can.
    async with http_client(server.url, server.s) as s:
        new = await s.call_tool(
            "supersede_memory",
            {"id": lessons.s, "lesson": "Team: rebuild the CI image weekly", "reason": "r"},
        )
        assert not new.is_error, text(new)


@pytest.fixture(scope="module")
async def stdio(server: Server, lessons: Lessons) -> AsyncIterator[Any]:
    """``hindsight mcp --namespace <run>/solo --read <run>/shared`` over stdio."""
    async with stdio_client(["mcp", "--namespace", show(NS_SOLO), "--read", show(NS_S)]) as client:
        yield client


async def test_stdio_reads_what_read_grants(
    stdio: Any, lessons: Lessons, settings: Settings
) -> None:
    result = await stdio.call_tool("search_memory", {"query": "CI build on a runner", "top_k": 20})
    hits = found(result)
    assert show(NS_S) in hits.values() and lessons.a not in hits and lessons.b not in hits
    shared = next(rid for rid, ns in hits.items() if ns == show(NS_S))
    used = await stdio.call_tool("update_memory_usage", {"id": shared, "helpful": True})
    assert not used.is_error, text(used)
    refused = await stdio.call_tool("forget_memory", {"id": shared})
    assert refused.is_error and (
        f"read-only here: mcp:{show(NS_SOLO)} writes {show(NS_SOLO)}; {show(NS_S)} is read-only"
    ) in text(refused), text(refused)
    wrote = await stdio.call_tool("write_memory", lesson("Solo: clear the CI cache on failure"))
    with Memory(NS_S, settings=settings) as mem:
        assert ("used", f"mcp:{show(NS_SOLO)}") in [
            (e.kind, e.detail.get("by")) for e in mem.events(shared)
        ]
        assert mem.get(shared).archived_at is None
        assert mem.locate(wrote.structured_content["id"], namespaces=[f"{RUN}/*"]) == NS_SOLO
