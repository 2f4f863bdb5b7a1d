"""An items ivfflat index built at setup, on an empty table, is reported stale once the
table holds far more rows, with a warning at setup and in ``hindsight db status``, and
``Items.rebuild_indexes()`` / ``hindsight reindex`` rebuild it."""

from __future__ import annotations

import importlib
import json
import logging
import zlib
from collections.abc import Iterator

import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from hindsight_adapters.cli import COMMAND_MODULES, app
from hindsight_core import AsyncMemory, CallableEmbedder, Memory, Settings
from hindsight_core.items import AsyncItems, ItemIndex, Items, PutItem

DIM = 16
LISTS = 10
INDEX = ItemIndex(dims=DIM, fields=("text",), kind="ivfflat", params=(("lists", LISTS),))
NAME = f"hindsight_item_vectors_vector_ivfflat_cosine_{DIM}"


def _vectors(texts: list[str]) -> np.ndarray:
    """A distinct direction per text (seeded by its CRC): no model needed for 300 items."""
    out = np.stack([np.random.default_rng(zlib.crc32(t.encode())).normal(size=DIM) for t in texts])
    return out / np.linalg.norm(out, axis=1, keepdims=True)


EMBEDDER = CallableEmbedder(_vectors, dim=DIM, model_name="crc-16")


@pytest.fixture
def mem(fresh_db: str) -> Iterator[Memory]:
    m = Memory(("ivf",), settings=Settings(database_url=fresh_db), embedder=EMBEDDER)
    yield m
    m.close()


def _fill(items: Items, n: int) -> None:
    items.batch([PutItem(("docs",), f"k{i}", {"text": f"document number {i}"}) for i in range(n)])


def test_an_index_built_empty_is_stale_once_filled_and_rebuilt(
    mem: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    items = Items(mem, index=INDEX)
    items.setup()
    (health,) = items.index_health()
    assert (health.name, health.kind, health.dims, health.lists) == (NAME, "ivfflat", DIM, LISTS)
    assert (health.rows, health.built_rows, health.stale) == (0, 0, False)

    _fill(items, 300)
    (health,) = items.index_health()
    assert (health.rows, health.built_rows, health.stale) == (300, 0, True)
    assert "hindsight reindex" in (health.advice() or "")

    # Another process's setup warns (judged on the planner's estimate, once analyzed).
    with mem.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE hindsight_item_vectors"))
    with caplog.at_level(logging.WARNING, logger="hindsight.items"):
        Items(mem, index=INDEX).setup()
    assert any(NAME in r.getMessage() and "300" in r.getMessage() for r in caplog.records)

    (rebuilt,) = items.rebuild_indexes()
    assert (rebuilt.name, rebuilt.rows, rebuilt.built_rows) == (NAME, 300, 300)
    assert not rebuilt.stale
    (health,) = items.index_health()
    assert (health.built_rows, health.stale, health.advice()) == (300, False, None)
    assert items.rebuild_indexes() == []  # nothing stale: nothing rebuilt
    assert [h.name for h in items.rebuild_indexes(force=True)] == [NAME]
    # The index still answers searches after the rebuild.
    hits = items.search(("docs",), query="document number 7", limit=1)
    assert [h.item.key for h in hits] == ["k7"]

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hindsight.items"):
        Items(mem, index=INDEX).setup()
    assert not [r for r in caplog.records if NAME in r.getMessage()]


def test_an_index_built_on_data_or_hnsw_is_not_stale(mem: Memory) -> None:
    plain = Items(mem, index=ItemIndex(dims=DIM, fields=("text",), kind="flat"))
    _fill(plain, 120)  # vectors stored, no ANN index yet
    Items(mem, index=INDEX).setup()  # built on the 120 there
    hnsw = Items(mem, index=ItemIndex(dims=DIM, fields=("text",)))
    hnsw.setup()
    health = {h.kind: h for h in hnsw.index_health()}
    assert (health["ivfflat"].built_rows, health["ivfflat"].stale) == (120, False)
    assert (health["hnsw"].lists, health["hnsw"].stale) == (None, False)
    _fill(plain, 300)  # 300 rows: under 4x the 120 it was built on
    assert not any(h.stale for h in hnsw.index_health())


async def test_async_items_report_and_rebuild_alike(fresh_db: str) -> None:
    amem = AsyncMemory(("ivf",), settings=Settings(database_url=fresh_db), embedder=EMBEDDER)
    try:
        items = AsyncItems(amem, index=INDEX)
        ops = [PutItem(("docs",), f"k{i}", {"text": f"document number {i}"}) for i in range(50)]
        await items.batch(ops)
        (health,) = await items.index_health()
        assert (health.rows, health.built_rows, health.stale) == (50, 0, True)
        (rebuilt,) = await items.rebuild_indexes()
        assert (rebuilt.built_rows, rebuilt.stale) == (50, False)
    finally:
        await amem.aclose()


def test_cli_db_status_warns_and_reindex_rebuilds(mem: Memory, fresh_db: str) -> None:
    for module in COMMAND_MODULES:  # (``main()`` registers them)
        importlib.import_module(f"hindsight_adapters.cli.{module}")
    items = Items(mem, index=INDEX)
    _fill(items, 200)
    runner = CliRunner()
    env = {"HINDSIGHT_DATABASE_URL": fresh_db, "COLUMNS": "250"}

    result = runner.invoke(app, ["db", "status"], env=env)
    assert result.exit_code == 0, result.output
    assert f"{NAME}: ivfflat 16-d, 200 vectors (built on 0)" in result.stdout
    assert "warning: the ivfflat index" in result.stderr and "hindsight reindex" in result.stderr

    result = runner.invoke(app, ["reindex", "--indexes-only", "--json"], env=env)
    assert result.exit_code == 0, result.output
    (rebuilt,) = json.loads(result.stdout)["rebuilt_indexes"]
    assert (rebuilt["name"], rebuilt["built_rows"], rebuilt["stale"]) == (NAME, 200, False)

    result = runner.invoke(app, ["db", "status", "--json"], env=env)
    (index,) = json.loads(result.stdout)["item_indexes"]
    assert (index["rows"], index["built_rows"], index["stale"]) == (200, 200, False)
    assert "warning" not in result.stderr
