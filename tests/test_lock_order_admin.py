"""Whole-store operations (reindex, import, dropping a namespace) and the writers
running meanwhile take their locks in one order (see ``test_lock_order.py``).

Each test holds a lock from a connection of its own so that the operation stops
half-way, holding some rows or locks, lets a real writer run into it, and then lets
go: before the fixes, the two then waited for each other (SQLSTATE 40P01, one failed).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from _locks import EMB, in_thread, wait_until_blocked
from _pool import tagged

from hindsight_core import Memory, Settings
from hindsight_core.models import ns_key


@pytest.fixture
def admin(fresh_db: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(fresh_db)
    yield engine
    engine.dispose()


def _memory(url: str, app: str | None = None, namespace: Any = ("lk", "default")) -> Memory:
    settings = Settings(database_url=tagged(url, app) if app else url)
    return Memory(namespace, settings=settings, embedder=EMB)


def _line(ns: tuple[str, ...], rid: uuid.UUID, lesson: str) -> str:
    """An export line: a record with its id, restored as it was by an import."""
    return json.dumps(
        {"id": str(rid), "namespace": list(ns), "scene": "s", "trigger": "t", "lesson": lesson}
    )


ROW = "SELECT 1 FROM hindsight_experiences WHERE ns = :ns AND id = :id"


def test_a_reindex_and_a_write_merging_two_records_do_not_deadlock(
    fresh_db: str, admin: sa.Engine
) -> None:
    """Reindex re-embeds stale records row by row in (namespace, id) order, in one
    transaction, without the namespace lock; a write merging into two records locks
    them in the order of its batch (``batch_sql.MERGE_ROWS``). So a reindex holding the
    first record and waiting for the second, and a write holding the second and
    waiting for the first, deadlocked. Reindex now locks the records' table against
    writers first (reads go on): writes wait for it, holding nothing it needs."""
    run = uuid.uuid4().hex[:8]
    ns = ("lk", run)
    # ids in the order a < c < b, stored in the order b, c, a (so that a scan meets b first)
    a, c, b = (uuid.UUID(int=i) for i in (1, 2, 3))
    setup = _memory(fresh_db)
    lessons = {a: "Lesson alpha", b: "Lesson beta", c: "Lesson gamma"}
    setup.import_records([_line(ns, rid, lessons[rid]) for rid in (b, c, a)])
    setup.close()
    with admin.begin() as conn:  # stale: reindex re-embeds all three (same model)
        conn.execute(sa.text("UPDATE hindsight_experiences SET embed_key = 'stale'"))
    app_r, app_w = "hs-reindex-" + run, "hs-merge-" + run
    reindexer = _memory(fresh_db, app_r)
    writer = _memory(fresh_db, app_w, ns)
    writer.list_records()  # set up (the model checked) before the reindex holds the meta lock
    batch = [{"scene": "s", "trigger": "t", "lesson": lessons[rid]} for rid in (b, a)]
    try:
        with admin.connect() as holder:  # holds c: the reindex stops there, holding a
            holder.execute(sa.text(ROW + " FOR UPDATE"), {"ns": ns_key(ns), "id": c}).all()
            reindexing, reindexed = in_thread(reindexer.reindex)
            try:
                wait_until_blocked(admin, app_r)
                writing, wrote = in_thread(lambda: writer.write_many(batch))
                wait_until_blocked(admin, app_w)
            finally:
                holder.rollback()
                reindexing.join()
                writing.join()
        failed = [r for r in (*reindexed, *wrote) if isinstance(r, BaseException)]
        assert not failed, failed
        assert reindexed[0].reembedded == 3
        assert [(r.status, r.id) for r in wrote[0]] == [("merged", b), ("merged", a)]
        records = {r.id: r for r in writer.list_records()}
    finally:
        reindexer.close()
        writer.close()
    assert {rid: r.occurrences for rid, r in records.items()} == {a: 2, b: 2, c: 1}
