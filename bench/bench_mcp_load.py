"""Concurrent writers with a slow embedder, in process and through ``hindsight mcp --http``.

Run (a few minutes; timed, so inside the quiet lock)::

    flock /tmp/hindsight-quiet.lock python bench/bench_mcp_load.py
    flock /tmp/hindsight-quiet.lock python bench/bench_mcp_load.py --writers 200 --servers 1 3

The shape that turned writes away as "database unavailable" (issue 26, item 1): an
embedder that answers in 1-2 s, all answers on the same whole second (as a remote
endpoint that batches requests, or a local model under contention, answers), and
many writers at once into one namespace, nine in ten of them merging into one of
``--hot`` records. Each case runs on a fresh database (a table never analyzed), with
default settings (a pool of 5 + 5 connections per process) and three records written
first (past the exact-scan bound of a one-record write), then ``--writers`` writes at
once: as threads calling ``Memory.write`` (a ``CallableEmbedder``), then as
``write_memory`` calls over HTTP spread over ``--servers`` MCP servers on one
database (an OpenAI-compatible ``/embeddings`` endpoint on loopback). Afterwards the
records are read back: every lesson one record, its ``occurrences`` the number of
acknowledged writes of it. Reported: failed writes by kind (an exception, a tool
error, a JSON-RPC error, an HTTP status), exact counts, latency p50 / p99, wall time.
Results go to ``bench/results/mcp_load.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import threading
import time
from collections import Counter
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "tests"))
import _common as c  # noqa: E402
from _mcp_util import free_port, start_cli, stop, wait_healthy  # noqa: E402
from bench_mcp_memory import FakeEmbeddings  # noqa: E402

TOKEN = "bench-load-token"
MODEL = "slow-remote-384"
NAMESPACE = ("bench", "load")
HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "Authorization": f"Bearer {TOKEN}",
}


def vector(text: str) -> list[float]:
    """A hash-seeded unit vector: the same text, the same vector (a merge at 1.0)."""
    seed = int(hashlib.sha1(text.encode()).hexdigest()[:8], 16)
    v = np.random.default_rng(seed).standard_normal(c.DIM)
    return list((v / np.linalg.norm(v)).tolist())


def answer_late() -> None:
    """Wait 1-2 s, until a whole second at least a second from now."""
    time.sleep(1.0 + (1.0 - time.time() % 1.0))


class SlowEmbeddings(FakeEmbeddings):
    """``bench_mcp_memory``'s ``/embeddings`` (the vectors of :func:`vector`), after 1-2 s.

    Answers go out together, on the next whole second at least a second after the
    request came (as a remote endpoint that batches requests answers): the writers
    that waited on it reach the database at once, a queue of merges on purpose.
    """

    def do_POST(self) -> None:  # the http.server API
        answer_late()
        super().do_POST()


class Endpoint(ThreadingHTTPServer):
    """The endpoint's server: a thread per request, a listen backlog for every writer
    (the default 5 turned connections away into SYN retries, a second each)."""

    daemon_threads = True
    request_queue_size = 1024


def lesson_of(i: int, hot: int) -> str:
    """Writer ``i``'s lesson: nine in ten one of ``hot`` lessons, the rest distinct."""
    if i % 10:
        return f"Hot lesson {i % hot}: check the queue before merging"
    return f"Cold lesson {i}: a one-off finding"


SEEDS = [f"Seed lesson {k}: written before the storm" for k in range(3)]


def call(i: int, lesson: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {
            "name": "write_memory",
            "arguments": {
                "scene": "load",
                "trigger": f"when: {lesson.lower()}",
                "action": "wrote a lesson",
                "outcome": "success",
                "lesson": lesson,
            },
        },
    }


def failure(answer: httpx.Response | BaseException) -> str | None:
    """Why a write failed (None: acknowledged)."""
    if isinstance(answer, BaseException):
        return f"client: {type(answer).__name__}"
    if answer.status_code != 200:
        return f"HTTP {answer.status_code}"
    doc = answer.json()
    if "error" in doc:
        return f"JSON-RPC {doc['error']['code']}: {doc['error']['message'][:90]}"
    if doc["result"].get("isError"):
        return f"tool error: {doc['result']['content'][0]['text'][:90]}"
    return None


async def one(client: httpx.AsyncClient, url: str, i: int, hot: int) -> tuple[float, Any]:
    t0 = time.perf_counter()
    try:
        answer: Any = await client.post(url, json=call(i, lesson_of(i, hot)))
    except httpx.HTTPError as exc:
        answer = exc
    return (time.perf_counter() - t0) * 1000, answer


async def storm(urls: list[str], writers: int, hot: int) -> tuple[list[tuple[float, Any]], float]:
    limits = httpx.Limits(max_connections=writers, max_keepalive_connections=writers)
    async with httpx.AsyncClient(headers=HEADERS, timeout=600, limits=limits) as client:
        # First a few records, one at a time: the namespace is past the exact-scan
        # bound of a one-record write, in a table never analyzed (a new database).
        for k, lesson in enumerate(SEEDS):
            seeded = failure(await client.post(urls[k % len(urls)], json=call(-1 - k, lesson)))
            assert seeded is None, seeded
        t0 = time.perf_counter()
        done = await asyncio.gather(
            *(one(client, urls[i % len(urls)], i, hot) for i in range(writers))
        )
        return list(done), time.perf_counter() - t0


def counts(url: str) -> list[tuple[str, int]]:
    """Every live record's lesson and occurrences, read back through the library."""
    from hindsight_core import CallableEmbedder, Memory, Settings

    # The name and dimension the servers recorded; list_records embeds nothing.
    embedder = CallableEmbedder(lambda texts: [], dim=c.DIM, model_name=MODEL)
    with Memory(NAMESPACE, settings=Settings(database_url=url), embedder=embedder) as mem:
        return [(r.lesson, r.occurrences) for r in mem.list_records(limit=10_000)]


def run_case(
    servers: int, writers: int, hot: int, embed_url: str, pool: int | None
) -> dict[str, Any]:
    url, drop = c.fresh_database(f"hindsight_bench_load_{servers}")
    env = {
        **({"HINDSIGHT_POOL_SIZE": str(pool)} if pool else {}),
        "HINDSIGHT_DATABASE_URL": url,
        "HINDSIGHT_HOME": str(c.HOME),
        "HINDSIGHT_MCP_TOKENS": f"{TOKEN}={'/'.join(NAMESPACE)}",
        "HINDSIGHT_EMBEDDER": "openai",
        "HINDSIGHT_EMBEDDING_BASE_URL": embed_url,
        "HINDSIGHT_EMBEDDING_MODEL": MODEL,
        "HINDSIGHT_EMBEDDING_DIMENSIONS": str(c.DIM),
        "HINDSIGHT_EMBEDDING_API_KEY": "unused",
    }
    procs = []
    try:
        urls = []
        for k in range(servers):
            port = free_port()
            log = c.CACHE / f"mcp_load_{servers}_{k}.log"
            procs.append((start_cli(["mcp", "--http", "--port", str(port)], env, log), log))
            urls.append(f"http://127.0.0.1:{port}")
        for (proc, log), base in zip(procs, urls, strict=True):
            wait_healthy(proc, base, log, timeout=180)
        done, wall = asyncio.run(storm([f"{u}/mcp" for u in urls], writers, hot))
        stored = counts(url)
    finally:
        for proc, _ in procs:
            stop(proc)
        drop()
    outcomes = [(ms, failure(a)) for ms, a in done]
    return summary(f"{servers} MCP server(s)", writers, hot, outcomes, stored, wall)


def summary(
    case: str,
    writers: int,
    hot: int,
    outcomes: list[tuple[float, str | None]],
    stored: list[tuple[str, int]],
    wall: float,
) -> dict[str, Any]:
    """A case's row: failures by kind, whether the counts are exact, latencies."""
    failures = Counter(f for _, f in outcomes if f is not None)
    acked = Counter(lesson_of(i, hot) for i, (_, f) in enumerate(outcomes) if f is None)
    acked.update(SEEDS)
    by_lesson = Counter(lesson for lesson, _ in stored)
    return {
        "case": case,
        "writers": writers,
        "hot_lessons": hot,
        "failed": sum(failures.values()),
        "failures": dict(failures),
        "records": len(stored),
        "duplicates": sum(n - 1 for n in by_lesson.values()),
        "counts_exact": dict(stored) == dict(acked) and max(by_lesson.values(), default=1) == 1,
        "occurrences": sum(n for _, n in stored) - len(SEEDS),
        "acknowledged": sum(acked.values()) - len(SEEDS),
        **{f"{k}_ms": v for k, v in latency_summary([ms for ms, _ in outcomes]).items()},
        "wall_s": round(wall, 2),
    }


def run_in_process(writers: int, hot: int, pool: int | None) -> dict[str, Any]:
    """The same storm as threads calling ``Memory.write`` on one Memory (default
    settings) whose ``CallableEmbedder`` answers like the endpoint."""
    from hindsight_core import CallableEmbedder, Memory, Settings

    def slow(texts: list[str]) -> list[list[float]]:
        answer_late()
        return [vector(t) for t in texts]

    url, drop = c.fresh_database("hindsight_bench_load_threads")
    embedder = CallableEmbedder(slow, dim=c.DIM, model_name=MODEL)
    done: list[tuple[float, str | None]] = [(0.0, None)] * writers
    try:
        default = Settings.model_fields["pool_size"].default
        settings = Settings(database_url=url, pool_size=pool or default)
        with Memory(NAMESPACE, settings=settings, embedder=embedder) as mem:
            for lesson in SEEDS:
                mem.write(call(0, lesson)["params"]["arguments"])

            def write(i: int) -> None:
                t0 = time.perf_counter()
                try:
                    mem.write(call(i, lesson_of(i, hot))["params"]["arguments"])
                    done[i] = ((time.perf_counter() - t0) * 1000, None)
                except Exception as exc:  # noqa: BLE001 - counted, by kind
                    done[i] = ((time.perf_counter() - t0) * 1000, type(exc).__name__)

            threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
        stored = counts(url)
    finally:
        drop()
    return summary(
        "threads (Memory.write)", writers, hot, [(ms, f) for ms, f in done], stored, wall
    )


def latency_summary(ms: list[float]) -> dict[str, float]:
    s = sorted(ms)
    return {
        "p50": round(s[len(s) // 2], 1),
        "p99": round(s[min(len(s) - 1, int(0.99 * len(s)))], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=200)
    parser.add_argument("--hot", type=int, default=5, help="lessons most writers repeat")
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--no-threads", action="store_true", help="skip the in-process case")
    parser.add_argument("--pool-size", type=int, help="HINDSIGHT_POOL_SIZE (default: 5)")
    args = parser.parse_args()
    fake = Endpoint(("127.0.0.1", 0), SlowEmbeddings)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    rows = [] if args.no_threads else [run_in_process(args.writers, args.hot, args.pool_size)]
    if rows:
        print(json.dumps(rows[0]), flush=True)
    try:
        for servers in args.servers:
            endpoint = f"http://127.0.0.1:{fake.server_port}/v1"
            row = run_case(servers, args.writers, args.hot, endpoint, args.pool_size)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        fake.shutdown()
    c.write_results("mcp_load", args, rows)


if __name__ == "__main__":
    main()
