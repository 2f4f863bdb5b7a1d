"""The MCP server over streamable HTTP: one real ``hindsight mcp --http`` process per module.

Two bearer tokens map to two namespaces; every test talks to the server with the
SDK's own client (``mcp.Client`` over ``streamable_http_client``) and checks what
landed in the database through the core.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from _mcp_util import SIGTERM_EXIT, free_port, http_client, start_cli, stop, text, wait_healthy
from mcp import MCPError

from hindsight_core import Memory, Settings, ValidationError
from hindsight_core.memory.inputs import MAX_TOP_K, check_top_k

TOOLS = {
    "search_memory",
    "write_memory",
    "update_memory_usage",
    "forget_memory",
    "reflect_task",
    "review_task",
    "supersede_memory",
    "memory_history",
}


class Server:
    def __init__(self, url: str, pid: int, tokens: dict[str, tuple[str, ...]]) -> None:
        self.url, self.pid, self.tokens = url, pid, tokens
        self.token_a, self.token_b = list(tokens)
        self.ns_a, self.ns_b = tokens[self.token_a], tokens[self.token_b]


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    run = uuid.uuid4().hex[:8]
    tokens = {
        secrets.token_urlsafe(24): ("mcp", f"a{run}"),
        secrets.token_urlsafe(24): ("mcp", f"b{run}"),
    }
    port = free_port()
    log = tmp_path_factory.mktemp("mcp-http") / "server.log"
    env = {
        "HINDSIGHT_MCP_TOKENS": ",".join(f"{t}={'/'.join(ns)}" for t, ns in tokens.items()),
        "HINDSIGHT_MCP_MAX_BODY_BYTES": "200000",
    }
    proc = start_cli(["mcp", "--http", "--port", str(port), "--json"], env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, base, log)
        # --json: one JSON line saying where it listens (stdout and stderr share the log)
        announced = [
            json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")
        ]
        assert announced == [
            {"server": "mcp", "transport": "http", "url": f"{base}/mcp", "tokens": 2}
        ], log.read_text()
        yield Server(f"{base}/mcp", proc.pid, tokens)
    finally:
        assert stop(proc) == SIGTERM_EXIT, log.read_text()  # uvicorn re-raises it
        assert "Traceback" not in log.read_text()


@pytest.fixture
def core(settings: Settings, server: Server) -> Iterator[Memory]:
    """The core, to check what the server wrote in namespace A (reads only: no model)."""
    mem = Memory(server.ns_a, settings=settings)
    yield mem
    mem.close()


def lesson_args(lesson: str, **extra: Any) -> dict[str, Any]:
    return {
        "scene": "deploy",
        "trigger": "deploying the web app on Friday",
        "action": "ran migrations before the deploy",
        "outcome": "success, no downtime",
        "lesson": lesson,
        **extra,
    }


async def test_tools_have_input_and_output_schemas(server: Server) -> None:
    async with http_client(server.url, server.token_a) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.output_schema and tool.output_schema["type"] == "object", tool.name
        assert tool.input_schema["type"] == "object"
        assert "Call" in (tool.description or ""), tool.name
        assert "\n    " not in (tool.description or ""), "descriptions are dedented"
    write = tools["write_memory"].input_schema
    assert set(write["required"]) == {"scene", "trigger", "action", "outcome", "lesson"}
    assert tools["write_memory"].output_schema["properties"]["status"]["enum"] == [
        "inserted",
        "merged",
    ]
    hit = tools["search_memory"].output_schema
    assert "results" in hit["properties"] and "warning" in hit["properties"]
    top_k = tools["search_memory"].input_schema["properties"]["top_k"]
    assert (top_k["minimum"], top_k["maximum"]) == (1, MAX_TOP_K)  # the core's limit
    assert tools["search_memory"].annotations.read_only_hint is True
    assert tools["forget_memory"].annotations.destructive_hint is True


async def test_write_search_use_forget_round_trip(server: Server, core: Memory) -> None:
    async with http_client(server.url, server.token_a) as client:
        wrote = await client.call_tool(
            "write_memory", lesson_args("Run DB migrations before deploying", importance=0.7)
        )
        assert not wrote.is_error, text(wrote)
        rid = wrote.structured_content["id"]
        assert wrote.structured_content["status"] == "inserted"

        found = await client.call_tool("search_memory", {"query": "deploy the web app"})
        results = found.structured_content["results"]
        assert found.structured_content["warning"] is None
        assert results[0]["id"] == rid
        assert set(results[0]) == {"lesson", "trigger", "scene", "id", "score", "namespace"}
        assert results[0]["namespace"] == "/".join(server.ns_a)

        used = await client.call_tool("update_memory_usage", {"id": rid, "helpful": True})
        assert not used.is_error, text(used)
        assert used.structured_content["use_count"] == 1
        assert core.get(rid).use_count == 1

        gone = await client.call_tool("forget_memory", {"id": rid})
        assert gone.structured_content == {"id": rid, "forgotten": True}
        again = await client.call_tool("search_memory", {"query": "deploy the web app"})
        assert rid not in {r["id"] for r in again.structured_content["results"]}
        missing = await client.call_tool("update_memory_usage", {"id": rid})
        assert missing.is_error and "id" in text(missing)


async def test_near_duplicate_write_reports_merge(server: Server, core: Memory) -> None:
    async with http_client(server.url, server.token_a) as client:
        first = await client.call_tool(
            "write_memory", lesson_args("Back up the database before schema changes")
        )
        second = await client.call_tool(
            "write_memory", lesson_args("Back up the database before a schema change")
        )
    assert first.structured_content["status"] == "inserted"
    assert second.structured_content["status"] == "merged"
    assert second.structured_content["id"] == first.structured_content["id"]
    assert second.structured_content["similarity"] >= 0.92
    assert core.get(first.structured_content["id"]).occurrences == 2


async def test_wrong_or_missing_token_is_rejected(server: Server) -> None:
    with pytest.raises(BaseException) as excinfo:  # an ExceptionGroup
        async with http_client(server.url, "not-a-token") as client:
            await client.list_tools()
    assert (
        excinfo.group_contains(MCPError)
        if isinstance(excinfo.value, BaseExceptionGroup)
        else isinstance(excinfo.value, MCPError)
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": server.token_a}):
        response = httpx.post(server.url, json=body, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"


async def test_token_a_cannot_touch_namespace_b(server: Server, settings: Settings) -> None:
    async with http_client(server.url, server.token_b) as b:
        wrote = await b.call_tool(
            "write_memory", lesson_args("Tenant B secret: rotate keys on Mondays", scene="secrets")
        )
        rid = wrote.structured_content["id"]
    async with http_client(server.url, server.token_a) as a:
        found = await a.call_tool("search_memory", {"query": "rotate keys on Mondays"})
        assert rid not in {r["id"] for r in found.structured_content["results"]}
        for tool, args in (("update_memory_usage", {"id": rid}), ("forget_memory", {"id": rid})):
            result = await a.call_tool(tool, args)
            assert result.is_error and "no record" in text(result), text(result)
        stats = json.loads((await a.read_resource("memory://stats")).contents[0].text)
        assert stats["namespace"] == list(server.ns_a) and "secrets" not in stats["scenes"]
    with Memory(server.ns_b, settings=settings) as mem_b:
        record = mem_b.get(rid)  # still there, untouched
    assert record.use_count == 0 and record.namespace == server.ns_b


async def test_supersede_and_history_over_http(server: Server, core: Memory) -> None:
    """A corrected lesson is a new version (docs/versions.md); a token supersedes only
    in its own namespace."""
    async with http_client(server.url, server.token_a) as client:
        wrote = await client.call_tool("write_memory", lesson_args("Deploy on Fridays at noon"))
        old = wrote.structured_content["id"]
        new = await client.call_tool(
            "supersede_memory",
            {"id": old, "lesson": "Never deploy on Fridays", "reason": "the Friday outage"},
        )
        assert not new.is_error, text(new)
        assert new.structured_content["supersedes"] == old
        chain = await client.call_tool("memory_history", {"id": new.structured_content["id"]})
        versions = chain.structured_content["versions"]
        assert [(v["id"], v["current"]) for v in versions] == [
            (old, False),
            (new.structured_content["id"], True),
        ]
        assert versions[0]["superseded_reason"] == "the Friday outage"
        assert versions[0]["superseded_actor"] == "mcp:" + "/".join(server.ns_a)
        found = await client.call_tool("search_memory", {"query": "deploying on a Friday"})
        assert old not in {r["id"] for r in found.structured_content["results"]}
    assert core.get(old).superseded_by is not None
    async with http_client(server.url, server.token_b) as b:
        for tool, args in (
            ("supersede_memory", {"id": old, "lesson": "Hijacked", "reason": "r"}),
            ("memory_history", {"id": old}),
        ):
            result = await b.call_tool(tool, args)
            assert result.is_error and "no record" in text(result), text(result)
    assert [r.lesson for r in core.history(old)][-1] == "Never deploy on Fridays"


@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        ("write_memory", lesson_args("Fine lesson", importance="high"), "importance"),
        ("write_memory", lesson_args("Fine lesson", importance=3), "importance"),
        ("write_memory", lesson_args("x" * 300), "lesson"),
        (
            "write_memory",
            {k: v for k, v in lesson_args("Fine").items() if k != "trigger"},
            "trigger",
        ),
        ("write_memory", lesson_args("Fine lesson", critical="maybe"), "critical"),
        ("search_memory", {"query": "deploy", "top_k": 0}, "top_k"),
        ("search_memory", {"query": ""}, "query"),
        ("update_memory_usage", {"id": "not-a-uuid"}, "id"),
        ("forget_memory", {"id": str(uuid.uuid4())}, "id"),
    ],
)
async def test_bad_arguments_are_clear_tool_errors(
    server: Server, core: Memory, tool: str, args: dict[str, Any], field: str
) -> None:
    before = core.stats(namespace=server.ns_a).records
    async with http_client(server.url, server.token_a) as client:
        result = await client.call_tool(tool, args)
    assert result.is_error
    assert field in text(result), text(result)
    assert core.stats(namespace=server.ns_a).records == before


async def test_top_k_has_the_cores_limit_and_message(server: Server) -> None:
    # The tool capped top_k at 50 with pydantic's message; the core allows MAX_TOP_K.
    async with http_client(server.url, server.token_a) as client:
        most = await client.call_tool("search_memory", {"query": "deploy", "top_k": MAX_TOP_K})
        assert not most.is_error, text(most)
        over = await client.call_tool("search_memory", {"query": "deploy", "top_k": MAX_TOP_K + 1})
    assert over.is_error
    with pytest.raises(ValidationError) as core_error:
        check_top_k(MAX_TOP_K + 1)
    assert str(core_error.value) in text(over)


async def test_numbers_as_strings_are_coerced(server: Server, core: Memory) -> None:
    async with http_client(server.url, server.token_a) as client:
        result = await client.call_tool(
            "write_memory",
            lesson_args("Pin the Node version in CI", importance="0.8", critical="true"),
        )
        assert not result.is_error, text(result)
        found = await client.call_tool("search_memory", {"query": "node version", "top_k": "3"})
    record = core.get(result.structured_content["id"])
    assert record.importance == 0.8 and record.critical is True
    assert len(found.structured_content["results"]) <= 3


async def test_oversized_or_malformed_payload_is_rejected(server: Server, core: Memory) -> None:
    before = core.stats(namespace=server.ns_a).records
    big = lesson_args("Huge", action="x" * 300_000)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "write_memory", "arguments": big},
    }
    headers = {
        "Authorization": f"Bearer {server.token_a}",
        "Accept": "application/json, text/event-stream",
    }
    response = httpx.post(server.url, json=body, headers=headers)
    assert response.status_code == 413
    assert "too large" in response.json()["error"]["message"]
    malformed = httpx.post(
        server.url,
        content=b'{"jsonrpc": "2.0", "id": 1, "method"',
        headers={**headers, "Content-Type": "application/json"},
    )
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == -32700
    async with http_client(server.url, server.token_a) as client:
        with pytest.raises(MCPError):
            await client.call_tool("write_memory", big)
        # Under the body limit but over the field limit: a tool error naming the field.
        result = await client.call_tool("write_memory", lesson_args("Big", action="y" * 30_000))
        assert result.is_error and "action" in text(result)
    assert core.stats(namespace=server.ns_a).records == before


async def test_stats_resource_is_per_namespace(server: Server) -> None:
    async with http_client(server.url, server.token_b) as client:
        resources = {str(r.uri) for r in (await client.list_resources()).resources}
        assert "memory://stats" in resources
        read = await client.read_resource("memory://stats")
    content = read.contents[0]
    assert content.mime_type == "application/json"
    stats = json.loads(content.text)
    assert stats["namespace"] == list(server.ns_b)
    assert stats["embedding_model"] == "all-MiniLM-L6-v2" and stats["embedding_dim"] == 384
    assert {"records", "archived", "scenes"} <= set(stats)


async def test_server_memory_does_not_grow_with_requests(server: Server) -> None:
    """After a warm-up, 60 more searches (each query new, so each embedded) leave the
    server's resident memory within 16 MiB of where it was (1.3 MiB measured): a leak
    of a quarter MiB a call fails. The figure itself (581 MB with the local model) is measured by
    bench/bench_mcp_memory.py."""
    psutil = pytest.importorskip("psutil", reason="psutil (the dev extra) reads the RSS")
    # The CLI runs python -c: the real server is this very process.
    process = psutil.Process(server.pid)
    async with http_client(server.url, server.token_b) as client:
        for i in range(70):
            if i == 10:
                baseline = process.memory_info().rss
            found = await client.call_tool("search_memory", {"query": f"deploy number {i}"})
            assert not found.is_error, text(found)
    grown = process.memory_info().rss - baseline
    assert grown < 16 * 2**20, f"RSS grew {grown / 2**20:.1f} MiB over 60 searches"


def failed_then_fixed_run(**extra: Any) -> dict[str, Any]:
    return {
        "goal": "list the reports folder",
        "outcome": "success",
        "steps": [
            {"kind": "tool_call", "tool": "list_files", "args": {"path": "/data/report"}},
            {"kind": "error", "tool": "list_files", "content": "Error: no such directory"},
            {"kind": "tool_call", "tool": "list_files", "args": {"path": "/data/reports"}},
            {"kind": "tool_result", "tool": "list_files", "content": "3 files"},
        ],
        **extra,
    }


async def test_reflect_task_without_llm_uses_rule_based_distiller(
    server: Server, core: Memory
) -> None:
    async with http_client(server.url, server.token_a) as client:
        result = await client.call_tool(
            "reflect_task", {"trajectory": failed_then_fixed_run(scene="files")}
        )
        assert not result.is_error, text(result)
        out = result.structured_content
        bad = await client.call_tool(
            "reflect_task", {"trajectory": {"goal": "x", "outcome": "won"}}
        )
    assert out["distiller"] == "rule-based" and "no LLM configured" in out["note"]
    assert len(out["written"]) == len(out["lessons"]) >= 1
    assert out["dropped"] == len(out["dropped_reasons"]) == 0 and out["reinforced"] == []
    assert core.get(out["written"][0]["id"]).scene == "files"
    assert bad.is_error and "outcome" in text(bad)


async def test_review_task_reinforces_used_and_decays_unused(server: Server, core: Memory) -> None:
    async with http_client(server.url, server.token_a) as client:
        ids = []
        for lesson in ("Cache API tokens between calls", "Prefer UTC in all logs"):
            wrote = await client.call_tool("write_memory", lesson_args(lesson, scene="review"))
            ids.append(wrote.structured_content["id"])
        result = await client.call_tool(
            "review_task",
            {"goal": "ship the release", "outcome": "success", "recalled": ids, "used": ids[:1]},
        )
        bad = await client.call_tool(
            "review_task", {"goal": "g", "outcome": "success", "recalled": ["nope"]}
        )
    assert not result.is_error, text(result)
    out = result.structured_content
    assert out["llm"] is False and "not merged" in out["note"]
    assert out["detail"]["reinforced"] == ids[:1] and out["detail"]["decayed"] == ids[1:]
    assert core.get(ids[0]).use_count == 1
    assert bad.is_error and "recalled" in text(bad)


async def test_concurrent_tenants_never_mix(server: Server) -> None:
    """Interleaved requests of two tokens each see only their own namespace."""
    async with (
        http_client(server.url, server.token_a) as a,
        http_client(server.url, server.token_b) as b,
    ):
        calls = [
            (client.read_resource("memory://stats"), ns)
            for _ in range(8)
            for client, ns in ((a, server.ns_a), (b, server.ns_b))
        ]
        results = await asyncio.gather(*(call for call, _ in calls))
    seen = [tuple(json.loads(r.contents[0].text)["namespace"]) for r in results]
    assert seen == [ns for _, ns in calls]


async def test_nul_byte_is_a_validation_error_naming_the_field(
    server: Server, core: Memory
) -> None:
    """Not "memory unavailable" (which blamed the database and leaked its message)."""
    before = core.stats(namespace=server.ns_a).records
    calls = {
        "scene": ("search_memory", {"query": "deploy", "scene": "de\x00ploy"}),
        "query": ("search_memory", {"query": "dep\x00loy"}),
        "lesson": ("write_memory", lesson_args("Pin\x00 the version")),
        "trajectory.goal": (
            "reflect_task",
            {"trajectory": failed_then_fixed_run(goal="list\x00 the reports")},
        ),
        "trajectory.steps.1.content": (
            "reflect_task",
            {
                "trajectory": {
                    **failed_then_fixed_run(),
                    "steps": [
                        {"kind": "tool_call", "tool": "ls", "args": {"path": "/x"}},
                        {"kind": "error", "tool": "ls", "content": "no such\x00 dir"},
                    ],
                }
            },
        ),
        "trajectory.scene": (
            "review_task",
            {"goal": "g", "outcome": "success", "recalled": [], "scene": "s\x00"},
        ),
    }
    async with http_client(server.url, server.token_a) as client:
        for field, (tool, args) in calls.items():
            result = await client.call_tool(tool, args)
            message = text(result)
            assert result.is_error, (field, message)
            assert field in message and "NUL" in message, (field, message)
            assert "unavailable" not in message and "database" not in message, message
    assert core.stats(namespace=server.ns_a).records == before


def test_oversized_chunked_body_is_413(server: Server, core: Memory) -> None:
    """Streamed without Content-Length (chunked): 413, not the SDK's 500."""
    before = core.stats(namespace=server.ns_a).records
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "write_memory",
                "arguments": lesson_args("Huge", action="x" * 300_000),
            },
        }
    )

    def chunks() -> Iterator[bytes]:
        data = body.encode()
        for start in range(0, len(data), 16_384):
            yield data[start : start + 16_384]

    response = httpx.post(
        server.url,
        content=chunks(),
        headers={
            "Authorization": f"Bearer {server.token_a}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert response.request.headers.get("transfer-encoding") == "chunked"
    assert response.status_code == 413, response.text
    assert "too large" in response.json()["error"]["message"]
    assert core.stats(namespace=server.ns_a).records == before
