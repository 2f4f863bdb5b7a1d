"""A batch is written in one statement per kind (``storage/batch_sql.py``: inserts,
merges into stored records, events), its columns sent as arrays: every value arrives
as it was given, whatever its characters, NULLs stay NULL, and the BM25 counters
follow the batch exactly.

Internals: ``storage.experiences_sql.nearest_many`` run by hand, to see what the dedup
lookup in a write's own transaction finds (no public call runs it alone)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import numpy as np
import sqlalchemy as sa

from hindsight_core import CallableEmbedder, Memory, Settings
from hindsight_core.models import ns_key
from hindsight_core.storage.engine import create_sync_engine
from hindsight_core.storage.experiences_sql import nearest_many
from hindsight_core.storage.vectors import vectors_param

DIM = 16


def _by_lesson(texts: list[str]) -> np.ndarray:
    """One vector per lesson (the first line of the embedded text): rewordings of the
    trigger or scene of a lesson are exact duplicates, so they merge."""
    seeds = [int(hashlib.sha1(t.split("\n")[0].encode()).hexdigest()[:8], 16) for t in texts]
    return np.stack([np.random.default_rng(s).standard_normal(DIM) for s in seeds])


EMB = CallableEmbedder(_by_lesson, dim=DIM, model_name="lesson-hash-16")

# Characters an array literal or a text[] parameter could mistake for syntax.
AWKWARD = [
    'quote " and backslash \\ here',
    "comma, {braces} and 'single'",
    "NULL",
    "",
    "中文 场景",
    "trailing backslash \\",
]


def _rows(url: str, ns: str) -> dict[str, sa.RowMapping]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = (
            conn.execute(
                sa.text(
                    "SELECT id::text AS id, scene, also_scenes, action, outcome, importance,"
                    " critical, confidence, occurrences, created_at, source,"
                    " embedding::text AS embedding"
                    " FROM hindsight_experiences WHERE ns = :ns"
                ),
                {"ns": ns},
            )
            .mappings()
            .all()
        )
    engine.dispose()
    return {r["id"]: r for r in rows}


def test_batch_values_arrive_as_given(fresh_db: str) -> None:
    mem = Memory(
        ("batch", "values"),
        settings=Settings(database_url=fresh_db, lesson_max_chars=500),
        embedder=EMB,
    )
    created = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    records = [
        {
            "scene": scene or "plain",
            "trigger": f"case {i}",
            "lesson": f"lesson number {i} about {scene}",
            "action": scene,
            "outcome": "" if i % 2 else f"outcome {i}",
            "importance": None if i % 2 else 0.25 * i,
            "critical": i == 3,
            "confidence": 0.5 + i / 20,
            "created_at": created,
            "source": {"agent": scene or "a", "session": f"s{i}"},
        }
        for i, scene in enumerate(AWKWARD)
    ]
    written = mem.write_many(records)
    assert [w.status for w in written] == ["inserted"] * len(AWKWARD)
    rows = _rows(fresh_db, ns_key(("batch", "values")))
    for w, rec in zip(written, records, strict=True):
        row = rows[str(w.id)]
        assert row["scene"] == rec["scene"]
        assert row["action"] == rec["action"] and row["outcome"] == rec["outcome"]
        assert row["importance"] == rec["importance"]  # None stays NULL
        assert row["critical"] is rec["critical"]
        assert row["confidence"] == np.float32(rec["confidence"])
        assert row["created_at"] == created  # microseconds and zone kept
        assert row["source"] == rec["source"]
        assert row["also_scenes"] == [] and row["occurrences"] == 1
    # each row got its own vector (the batch's vectors are one array, sliced per row)
    vectors = {r["embedding"] for r in rows.values()}
    assert len(vectors) == len(AWKWARD)
    expected = _by_lesson([records[2]["lesson"]])[0]
    got = np.array(rows[str(written[2].id)]["embedding"].strip("[]").split(","), float)
    assert np.allclose(got, expected / np.linalg.norm(expected), atol=1e-6)
    mem.close()


def test_batch_merges_keep_scenes_importance_and_counters(fresh_db: str) -> None:
    ns = ("batch", "merges")
    mem = Memory(ns, settings=Settings(database_url=fresh_db, lesson_max_chars=500), embedder=EMB)
    stored = mem.write_many(
        [
            {
                "scene": "first",
                "trigger": f"t{i}",
                "lesson": f"stored lesson {i}",
                "importance": 0.5,
            }
            for i in range(4)
        ]
    )
    batch = [
        # into stored records, from awkward scenes, raising one importance only
        {"scene": AWKWARD[0], "trigger": "again 0", "lesson": "stored lesson 0", "importance": 0.9},
        {
            "scene": AWKWARD[1],
            "trigger": "again 1",
            "lesson": "stored lesson 1",
            "importance": 0.1,
            "critical": True,
        },
        {"scene": AWKWARD[4], "trigger": "again 1 twice", "lesson": "stored lesson 1"},
        # new, and a duplicate of it within the batch
        {"scene": "new", "trigger": "fresh", "lesson": "a brand new lesson"},
        {"scene": AWKWARD[2], "trigger": "fresh again", "lesson": "a brand new lesson"},
    ]
    res = mem.write_many(batch)
    assert [r.status for r in res] == ["merged", "merged", "merged", "inserted", "merged"]
    assert [r.id for r in res[:3]] == [stored[0].id, stored[1].id, stored[1].id]
    assert res[4].id == res[3].id
    rows = _rows(fresh_db, ns_key(ns))
    first, second, new = (rows[str(i)] for i in (stored[0].id, stored[1].id, res[3].id))
    assert first["also_scenes"] == [AWKWARD[0]] and first["occurrences"] == 2
    assert first["importance"] == np.float32(0.9)
    assert second["also_scenes"] == [AWKWARD[1], AWKWARD[4]] and second["occurrences"] == 3
    assert second["importance"] == np.float32(0.5) and second["critical"] is True
    assert new["also_scenes"] == [AWKWARD[2]] and new["occurrences"] == 2
    assert rows[str(stored[2].id)]["occurrences"] == 1  # untouched
    engine = sa.create_engine(fresh_db)
    with engine.connect() as conn:
        events = conn.execute(
            sa.text(
                "SELECT record_id::text AS id, detail FROM hindsight_events "
                "WHERE ns = :ns AND kind = 'merged'"
            ),
            {"ns": ns_key(ns)},
        ).all()
        kept = conn.execute(
            sa.text(
                "SELECT docs, total_len FROM hindsight_keyword_stats WHERE ns = :ns AND tbl = 'e'"
            ),
            {"ns": ns_key(ns)},
        ).one()
        real = conn.execute(
            sa.text(
                "SELECT count(*), sum(length(search_tsv)) FROM hindsight_experiences "
                "WHERE ns = :ns AND archived_at IS NULL"
            ),
            {"ns": ns_key(ns)},
        ).one()
    engine.dispose()
    assert sorted((e.id, e.detail["added"]) for e in events) == sorted(
        [(str(stored[0].id), 1), (str(stored[1].id), 2)]
    )
    assert tuple(kept) == tuple(real) and real[0] == 5
    mem.close()


def test_a_batch_is_one_statement_per_kind(fresh_db: str) -> None:
    """Each statement fires the BM25 counters' statement-level triggers: a batch of 40
    records with merges into 10 stored ones fires them once per kind of change, not
    once per record (the executemany inserts fired them 40 times)."""
    ns = ("batch", "statements")
    mem = Memory(ns, settings=Settings(database_url=fresh_db, lesson_max_chars=500), embedder=EMB)
    stored = mem.write_many([{"trigger": f"t{i}", "lesson": f"kept lesson {i}"} for i in range(10)])
    engine = sa.create_engine(fresh_db)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE test_statements (tbl text, op text)"))
        conn.execute(
            sa.text(
                "CREATE FUNCTION test_count_statement() RETURNS trigger LANGUAGE plpgsql AS $$"
                " BEGIN INSERT INTO test_statements VALUES (TG_TABLE_NAME, TG_OP); RETURN NULL;"
                " END $$"
            )
        )
        for table in ("hindsight_experiences", "hindsight_events"):
            conn.execute(
                sa.text(
                    f"CREATE TRIGGER test_count AFTER INSERT OR UPDATE ON {table} "
                    "FOR EACH STATEMENT EXECUTE FUNCTION test_count_statement()"
                )
            )
    res = mem.write_many(
        [{"trigger": f"again {i}", "lesson": f"kept lesson {i}"} for i in range(10)]
        + [{"trigger": f"n{i}", "lesson": f"new lesson {i}"} for i in range(30)]
    )
    assert [r.id for r in res[:10]] == [r.id for r in stored]
    assert sum(r.status == "inserted" for r in res) == 30
    with engine.connect() as conn:
        fired = sorted(
            tuple(r) for r in conn.execute(sa.text("SELECT tbl, op FROM test_statements"))
        )
    engine.dispose()
    assert fired == [
        ("hindsight_events", "INSERT"),
        ("hindsight_experiences", "INSERT"),
        ("hindsight_experiences", "UPDATE"),
    ]
    mem.close()


def test_the_lookup_in_the_transaction_reads_what_the_side_connection_reads(
    fresh_db: str,
) -> None:
    """The dedup lookup rerun in the write's transaction (``Pipelined.again``, when the
    side connection's gave up waiting for a lock) leaves out the rows the transaction
    inserted: the neighbours are those another connection finds."""
    settings = Settings(database_url=fresh_db)
    mem = Memory(("batch", "again"), settings=settings, embedder=EMB)
    lessons = [f"distinct lesson {i}" for i in range(6)]
    mem.write_many([{"trigger": "t", "lesson": lesson} for lesson in lessons])
    mem.close()
    ns = ns_key(("batch", "again"))
    params = {"ns": ns, "vectors": vectors_param(_by_lesson(lessons)), "n": len(lessons)}
    engine = create_sync_engine(settings)
    try:
        with engine.connect() as conn:
            columns = conn.execute(
                sa.text(
                    "SELECT string_agg(quote_ident(column_name), ', ') FROM information_schema"
                    ".columns WHERE table_name = 'hindsight_experiences' AND column_name <> 'id'"
                )
            ).scalar_one()
            side = conn.execute(nearest_many(DIM, 3), params).mappings().all()
            conn.rollback()
            tx = conn.begin()  # exact copies, new ids: the nearest of all, in here
            try:
                conn.execute(
                    sa.text(
                        f"INSERT INTO hindsight_experiences (id, {columns})"
                        f" SELECT gen_random_uuid(), {columns} FROM hindsight_experiences"
                        " WHERE ns = :ns"
                    ),
                    {"ns": ns},
                )
                mine = conn.execute(nearest_many(DIM, 3), params).mappings().all()
                again = conn.execute(nearest_many(DIM, 3, own_rows=False), params).mappings()
                assert [dict(r) for r in again.all()] == [dict(r) for r in side]
                assert {r["id"] for r in mine} != {r["id"] for r in side}, "copies found"
            finally:
                tx.rollback()
    finally:
        engine.dispose()
