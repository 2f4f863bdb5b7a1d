"""The item vectors' per-namespace sums (the hub correction's mean direction) follow
every write: puts, re-puts with another text, an index change, deletes, a namespace's
items dropped, the TTL sweep; a refused batch changes nothing.

Internals: the table ``hindsight_item_vector_sums`` (migration 0013) is read with SQL
and compared with the vectors it sums, on purpose: no public call shows it.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator

import numpy as np
import pytest
import sqlalchemy as sa

from hindsight_core import CallableEmbedder, Memory, Settings, ValidationError
from hindsight_core.items import ItemIndex, Items, PutItem

DIM = 6


def _vectors(texts: list[str]) -> np.ndarray:
    return np.array([np.random.default_rng(zlib.crc32(t.encode())).normal(size=DIM) for t in texts])


@pytest.fixture
def items(fresh_db: str) -> Iterator[Items]:
    emb = CallableEmbedder(_vectors, dim=DIM, model_name="intfloat/multilingual-e5-small")
    mem = Memory(("sums",), settings=Settings(database_url=fresh_db), embedder=emb)
    yield Items(mem, index=ItemIndex(dims=DIM, fields=("text", "note")))
    mem.close()


def _kept_and_recomputed(url: str) -> tuple[dict, dict]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            kept = conn.execute(
                sa.text("SELECT ns, dims, n, total::text FROM hindsight_item_vector_sums")
            ).all()
            fresh = conn.execute(
                sa.text(
                    "SELECT ns, vector_dims(embedding), count(*), sum(embedding)::text"
                    " FROM hindsight_item_vectors GROUP BY 1, 2"
                )
            ).all()
    finally:
        engine.dispose()

    def table(rows: list) -> dict:
        return {(r[0], r[1]): (r[2], np.array(json.loads(r[3]))) for r in rows if r[2]}

    return table(kept), table(fresh)


def _assert_in_step(url: str) -> None:
    kept, fresh = _kept_and_recomputed(url)
    assert kept.keys() == fresh.keys()
    for k, (n, total) in fresh.items():
        assert kept[k][0] == n, k
        np.testing.assert_allclose(kept[k][1], total, atol=1e-4, err_msg=str(k))


def test_sums_follow_puts_updates_and_deletes(items: Items, fresh_db: str) -> None:
    a, b = ("team", "a"), ("team", "b")
    items.batch([PutItem(a, f"k{i}", {"text": f"a {i}", "note": f"n {i}"}) for i in range(30)])
    items.batch([PutItem(b, f"k{i}", {"text": f"b {i}"}) for i in range(10)])
    _assert_in_step(fresh_db)
    kept, _ = _kept_and_recomputed(fresh_db)
    assert kept[("team\x1fa", DIM)][0] == 60 and kept[("team\x1fb", DIM)][0] == 10

    # re-put: another text (vector changes), the same text (nothing changes), fewer fields
    items.batch([PutItem(a, f"k{i}", {"text": f"a {i} again", "note": f"n {i}"}) for i in range(5)])
    items.batch([PutItem(a, "k5", {"text": "a 5", "note": "n 5"})])
    items.put(a, "k6", {"text": "a 6"})
    items.put(a, "k7", {"text": "a 7", "note": "n 7"}, index=False)
    _assert_in_step(fresh_db)

    for i in range(8, 12):
        items.delete(a, f"k{i}")
    items.put(b, "short", {"text": "expires"}, ttl=0.001)
    _assert_in_step(fresh_db)
    engine = sa.create_engine(fresh_db)  # let the TTL pass, then sweep
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE hindsight_items SET expires_at = now() - interval '1 s' WHERE key = 'short'"
            )
        )
    engine.dispose()
    assert items.sweep() >= 1
    _assert_in_step(fresh_db)


def test_a_refused_batch_leaves_items_and_sums_as_they_were(items: Items, fresh_db: str) -> None:
    """A value jsonb cannot hold (a NUL character) is refused before anything is
    written, naming where it is; the database used to refuse it mid-batch as an
    "unsupported Unicode escape sequence"."""
    ns = ("team", "c")
    items.batch([PutItem(ns, f"k{i}", {"text": f"c {i}"}) for i in range(5)])
    before, _ = _kept_and_recomputed(fresh_db)
    bad = [PutItem(ns, "k9", {"text": "c 9"}), PutItem(ns, "k10", {"text": "c", "tags": ["a\x00"]})]
    with pytest.raises(ValidationError, match=r"'k10': value\.tags\[0\] contains a NUL") as info:
        items.batch(bad)
    assert info.value.field == "value"
    assert items.get(ns, "k9") is None
    after, _ = _kept_and_recomputed(fresh_db)
    assert after.keys() == before.keys() and all(after[k][0] == before[k][0] for k in before)
    items.put(ns, "k11", {"text": "a literal \\u0000 is text"})  # six characters: stored
    assert items.get(ns, "k11").value["text"] == "a literal \\u0000 is text"
    _assert_in_step(fresh_db)
