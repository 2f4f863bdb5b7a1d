"""Set-up under concurrency, and the OpenAI-compatible embedder over real HTTP.

Internals: ``storage.migrate``'s revisions, to check that the schema reached head and
that an old index was rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import sqlalchemy as sa

from hindsight_core import EmbeddingError, Memory, Settings
from hindsight_core.embeddings.openai import OpenAIEmbedder
from hindsight_core.storage import migrate

SETUP = "from hindsight_core import Memory; Memory(('x',)).setup(); print('ok')"


def test_two_processes_running_setup_at_once_on_an_empty_database(fresh_db: str) -> None:
    env = {**os.environ, "HINDSIGHT_DATABASE_URL": fresh_db}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SETUP],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    engine = sa.create_engine(fresh_db)
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
        indexes = conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_indexes"
                " WHERE indexname LIKE 'hindsight_experiences_halfvec%'"
            )
        ).scalar()
        assert indexes == 1
    engine.dispose()


def _vector_indexes(conn: sa.Connection) -> list[str]:
    return sorted(
        conn.execute(
            sa.text(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'hindsight_experiences' "
                "AND indexdef LIKE '%USING hnsw%'"
            )
        ).scalars()
    )


def test_migration_0006_rebuilds_the_vector_index_in_half_precision(
    fresh_db: str, embedder: object
) -> None:
    """A database from before 0006 (full-precision index) is upgraded on first use: the
    index is rebuilt on ``halfvec`` from the stored rows, the old one dropped."""
    from alembic import command

    mem = Memory(("mig",), settings=Settings(database_url=fresh_db), embedder=embedder)
    rec = mem.write(
        {
            "scene": "deploy",
            "trigger": "migrations pending",
            "lesson": "Run migrations before restarting the web tier",
        }
    )
    mem.close()
    engine = sa.create_engine(fresh_db)
    with engine.connect() as conn:
        assert _vector_indexes(conn) == ["hindsight_experiences_halfvec_384"]
        command.downgrade(migrate.alembic_config(conn), "0005")
        conn.commit()
        assert _vector_indexes(conn) == ["hindsight_experiences_hnsw_384"]
    mem = Memory(("mig",), settings=Settings(database_url=fresh_db), embedder=embedder)
    hits = mem.search("restart web servers after migrating the schema", top_k=1)
    mem.close()
    assert [h.record.id for h in hits] == [rec.id]
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
        assert _vector_indexes(conn) == ["hindsight_experiences_halfvec_384"]
        conn.execute(sa.text("SET enable_seqscan = off"))  # one row: make the planner use it
        plan = "\n".join(
            conn.execute(
                sa.text(
                    "EXPLAIN SELECT id FROM hindsight_experiences WHERE archived_at IS NULL "
                    "ORDER BY embedding::halfvec(384) <=> "
                    "(SELECT embedding::halfvec(384) FROM hindsight_experiences LIMIT 1) LIMIT 3"
                )
            ).scalars()
        )
        assert "hindsight_experiences_halfvec_384" in plan
    engine.dispose()


class _Embeddings(BaseHTTPRequestHandler):
    """A tiny OpenAI-compatible /embeddings endpoint on loopback."""

    def do_POST(self) -> None:  # http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["model"] == "broken":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"model exploded")
            return
        assert self.headers["Authorization"] == "Bearer secret"
        data = [
            {"index": i, "embedding": [float(len(t)), 1.0, float(i)]}
            for i, t in enumerate(body["input"])
        ]
        payload = json.dumps({"data": list(reversed(data))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Embeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_compatible_embedder(endpoint: str) -> None:
    emb = OpenAIEmbedder(base_url=endpoint, model="m", api_key="secret", batch_size=2)
    vectors = emb.embed(["a", "bbb", "cc"])
    assert emb.dim == 3 and len(vectors) == 3
    # sorted back by index, normalised to unit length
    assert vectors[1][0] > vectors[0][0]
    assert all(abs(sum(x * x for x in v) - 1) < 1e-6 for v in vectors)
    with pytest.raises(EmbeddingError, match="500"):
        OpenAIEmbedder(base_url=endpoint, model="broken").embed(["x"])
    with pytest.raises(EmbeddingError, match="cannot reach"):
        OpenAIEmbedder(base_url="http://127.0.0.1:1/v1", model="m", timeout=1).embed(["x"])


async def test_openai_compatible_embedder_async(endpoint: str) -> None:
    emb = OpenAIEmbedder(base_url=endpoint, model="m", api_key="secret", dimensions=3)
    assert len(await emb.aembed(["a", "b"])) == 2


def test_memory_built_from_settings_uses_the_endpoint(endpoint: str, fresh_db: str) -> None:
    settings = Settings(
        database_url=fresh_db,
        embedder="openai",
        embedding_base_url=endpoint,
        embedding_model="m",
        embedding_api_key="secret",
    )
    with Memory(("remote",), settings=settings) as mem:
        assert mem.write({"trigger": "t", "lesson": "A lesson"}).status == "inserted"
        assert mem.stats().embedding_model == "m" and mem.stats().embedding_dim == 3


def test_models_of_up_to_4000_dimensions_are_indexed(fresh_db: str) -> None:
    """The half-precision HNSW index takes vectors pgvector cannot index in full
    precision (over 2,000 dimensions), e.g. 3,072 like text-embedding-3-large."""
    import numpy as np

    from hindsight_core import CallableEmbedder

    rng = np.random.default_rng(5)
    table: dict[str, np.ndarray] = {}

    def embed(texts: list[str]) -> np.ndarray:
        return np.stack(
            [table.setdefault(t.split("\n")[0], rng.standard_normal(3072)) for t in texts]
        )

    mem = Memory(
        ("wide",),
        settings=Settings(database_url=fresh_db),
        embedder=CallableEmbedder(embed, dim=3072, model_name="wide-3072"),
    )
    lessons = [
        "Pin the base image digest",
        "Rotate the signing keys yearly",
        "Cap the retry budget per job",
    ]
    ids = [mem.write({"scene": "ops", "trigger": "t", "lesson": lesson}).id for lesson in lessons]
    for lesson, rid in zip(lessons, ids, strict=True):
        assert mem.search(lesson, top_k=1)[0].record.id == rid
    mem.close()
    engine = sa.create_engine(fresh_db)
    with engine.connect() as conn:
        assert _vector_indexes(conn) == ["hindsight_experiences_halfvec_3072"]
    engine.dispose()
