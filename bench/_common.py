"""Shared by the benchmarks: an embedded server under /tmp, synthetic lessons, timing.

Nothing here is part of the library. Vectors are the real model's (all-MiniLM-L6-v2)
for a few thousand synthetic lessons, embedded once and cached under /tmp; larger
sets are mixes of those vectors plus noise, so that nearest-neighbour similarities
look like a real lesson store (most neighbours at 0.5-0.85, few above the 0.92
dedup threshold) while costing nothing to generate.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import sqlalchemy as sa

CACHE = Path(os.environ.get("HINDSIGHT_BENCH_CACHE", "/tmp/hindsight-bench"))
HOME = CACHE / "home"
# The development data: ../shared/data beside the repository, or HINDSIGHT_BENCH_DATA
# (a worktree's parent holds no shared/).
DATA_DIR = Path(
    os.environ.get("HINDSIGHT_BENCH_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)
# Appended to every benchmark database's name (``hindsight_bench_recall_<tag>``): two
# people, or two runs, on one machine share the embedded server under CACHE, and each
# script drops its database before loading it, so without a tag one run kills the other.
TAG = os.environ.get("HINDSIGHT_BENCH_TAG", "")
MODEL = "all-MiniLM-L6-v2"
DIM = 384

_VERBS = (
    "Check",
    "Retry",
    "Validate",
    "Cache",
    "Log",
    "Back up",
    "Close",
    "Lock",
    "Escape",
    "Quote",
    "Paginate",
    "Compress",
    "Batch",
    "Throttle",
    "Sort",
    "Index",
    "Pin",
    "Rotate",
    "Sanitize",
    "Time out",
    "Verify",
    "Hash",
    "Mock",
    "Stream",
    "Dedupe",
    "Flush",
    "Sign",
    "Encode",
    "Trim",
    "Warm up",
)
_OBJECTS = (
    "the API token",
    "file extensions",
    "DB connections",
    "the CSV header",
    "rate limits",
    "the cache key",
    "user input",
    "the lock file",
    "SQL params",
    "the config path",
    "image sizes",
    "the auth cookie",
    "JSON fields",
    "date formats",
    "timezones",
    "temp files",
    "log levels",
    "the queue",
    "webhooks",
    "S3 keys",
    "unicode text",
    "env vars",
    "git branches",
    "docker tags",
    "test data",
    "the sitemap",
    "page numbers",
    "email headers",
    "PDF pages",
    "invoice totals",
    "tax rates",
    "phone numbers",
    "URLs",
    "HTML tables",
    "cron jobs",
    "secrets",
    "migrations",
    "checksums",
    "big uploads",
    "retries",
)
_CONTEXTS = (
    "before deleting",
    "after deploys",
    "when scraping",
    "on retries",
    "in CI",
    "for big files",
    "at night",
    "per tenant",
    "on failure",
    "before commit",
    "when parsing",
    "in prod",
    "for reports",
    "on import",
    "during backup",
    "on login",
    "before billing",
    "in tests",
    "on timeouts",
    "when paging",
)


def abba(round_: int) -> tuple[int, int, int, int]:
    """Which of two contenders (0 or 1) runs each quarter of a round.

    A B B A, then B A A B in the next round: each runs once first and once last in
    every round, so the order of two back-to-back runs cancels within the round. (The
    second of two back-to-back write runs was measured up to ~8 % slower here, which
    plain alternation only cancels across rounds, widening the per-round ratios.)
    """
    return (0, 1, 1, 0) if round_ % 2 == 0 else (1, 0, 0, 1)


def machine() -> dict[str, Any]:
    """The machine a result was measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def lessons(n: int, seed: int = 7) -> list[tuple[str, str, str]]:
    """``n`` distinct (scene, trigger, lesson) triples, lessons ≤ 50 characters."""
    rng = random.Random(seed)
    combos = [(v, o, c) for v in _VERBS for o in _OBJECTS for c in _CONTEXTS]
    rng.shuffle(combos)
    out = []
    for v, o, c in combos:
        lesson = f"{v} {o} {c}"
        if len(lesson) <= 50:
            out.append((c.split()[-1], f"{c} while handling {o}", lesson))
        if len(out) == n:
            break
    return out


def full_record(k: int, triple: tuple[str, str, str]) -> dict[str, Any]:
    """A record as reflection writes it (e5 embeds every field: its real cost)."""
    scene, trig, lesson = triple
    return {
        "scene": scene,
        "trigger": f"{trig} (e2e {k})",
        "lesson": lesson,
        "action": f"ran the {scene} steps, then retried the failing one with other options",
        "outcome": f"partial: {k % 7 + 1} of 8 steps passed before the fix",
        "source": {"agent": "bench"},
    }


def base_vectors(n: int = 3000) -> tuple[list[tuple[str, str, str]], np.ndarray]:
    """The real model's vectors of ``n`` synthetic lessons (cached under /tmp)."""
    triples = lessons(n)
    path = CACHE / f"base_{n}.npy"
    if path.exists():
        return triples, np.load(path)
    from hindsight_core.embeddings.sentence_transformers import SentenceTransformerEmbedder

    CACHE.mkdir(parents=True, exist_ok=True)
    emb = SentenceTransformerEmbedder()
    vecs = np.asarray(emb.embed([f"{les}\n{trig}" for _, trig, les in triples]), np.float32)
    np.save(path, vecs)
    return triples, vecs


def mixed(
    base: np.ndarray, n: int, rng: np.random.Generator, noise: float = 0.45, mix: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` unit vectors, each a base vector + a share of another + noise.

    Returns the vectors and the index of the base each one is built on.
    """
    i = rng.integers(0, len(base), n)
    j = rng.integers(0, len(base), n)
    g = rng.standard_normal((n, base.shape[1])).astype(np.float32)
    g *= noise / np.sqrt(base.shape[1])
    v = base[i] + mix * base[j] + g
    return v / np.linalg.norm(v, axis=1, keepdims=True), i


def near(v: np.ndarray, rng: np.random.Generator, noise: float = 0.12) -> np.ndarray:
    """Near-duplicates of ``v`` (cosine ≈ 0.99), as a second wording would embed."""
    g = rng.standard_normal(v.shape).astype(np.float32) * (noise / np.sqrt(v.shape[1]))
    w: np.ndarray = v + g
    out: np.ndarray = w / np.linalg.norm(w, axis=1, keepdims=True)
    return out


class Lookup:
    """A precomputed embedder: maps each text to a vector registered beforehand."""

    def __init__(self) -> None:
        self.table: dict[str, np.ndarray] = {}

    def add(self, text: str, vector: np.ndarray) -> None:
        self.table[text] = np.asarray(vector, dtype=np.float32)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


def db_name(name: str) -> str:
    """``name`` with ``HINDSIGHT_BENCH_TAG`` appended, when it is set."""
    if not TAG:
        return name
    if not TAG.replace("_", "").isalnum():
        raise SystemExit(f"HINDSIGHT_BENCH_TAG must be letters, digits and _, got {TAG!r}")
    return f"{name}_{TAG}"


def fresh_database(name: str) -> tuple[str, Callable[[], None]]:
    """A new empty database on the embedded server under /tmp; returns (url, drop).

    ``name`` gets ``HINDSIGHT_BENCH_TAG`` appended (:func:`db_name`).
    """
    from hindsight_core.storage import embedded

    name = db_name(name)
    HOME.mkdir(parents=True, exist_ok=True)
    url = embedded.embedded_url(HOME)
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    db_url = sa.make_url(url).set(database=name).render_as_string(hide_password=False)

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return db_url, drop


def database_url(name: str) -> str:
    """The URL of database ``name`` (tagged: :func:`db_name`) on the embedded server."""
    from hindsight_core.storage import embedded

    url = embedded.embedded_url(HOME)
    return sa.make_url(url).set(database=db_name(name)).render_as_string(hide_password=False)


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    """p50 / p95 / mean of a list of milliseconds."""
    s = sorted(samples_ms)
    return {
        "p50": round(statistics.median(s), 3),
        "p95": round(s[min(len(s) - 1, int(0.95 * len(s)))], 3),
        "mean": round(statistics.fmean(s), 3),
        "n": len(s),
    }


@contextmanager
def timer() -> Iterator[list[float]]:
    """Yields a one-element list that holds the elapsed seconds on exit."""
    box = [0.0]
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box[0] = time.perf_counter() - t0


def time_calls(fn: Callable[[int], Any], n: int, warmup: int = 10) -> dict[str, float]:
    """Call ``fn(i)`` ``n`` times after ``warmup`` calls; latency percentiles in ms."""
    for i in range(warmup):
        fn(i)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(warmup + i)
        out.append((time.perf_counter() - t0) * 1000)
    return percentiles(out)


def new_ns() -> tuple[str, str]:
    return ("bench", uuid.uuid4().hex[:8])


def analyze(url: str) -> None:
    """``ANALYZE`` the database (the statistics autovacuum would gather in time)."""
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE"))
    engine.dispose()


Figures = dict[str, dict[str, float]]  # system -> measure -> value


def add_loads_option(ap: Any) -> None:
    """``--loads N``: measure on N fresh loads of the same data (see :func:`over_loads`)."""
    ap.add_argument(
        "--loads",
        type=int,
        default=1,
        help="load the data into this many fresh databases, one after another, and "
        "report each figure as the median over them with its spread (max - min)",
    )


def over_loads(runs: list[Figures]) -> tuple[Figures, Figures]:
    """Each figure's median over the loads ``runs`` and its spread (max - min)."""
    median: Figures = {}
    spread: Figures = {}
    for name, first in runs[0].items():
        vals = {m: [r[name][m] for r in runs] for m in first}
        median[name] = {m: round(statistics.median(v), 4) for m, v in vals.items()}
        spread[name] = {m: round(max(v) - min(v), 4) for m, v in vals.items()}
    return median, spread


def write_results(name: str, args: Any, rows: list[dict[str, Any]]) -> Path:
    """Write ``results/<name>.json`` (the machine, the run's arguments, its rows)."""
    out = Path(__file__).parent / "results" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"machine": machine(), "args": vars(args), "results": rows}, indent=2)
    )
    print(f"written {out}")
    return out
