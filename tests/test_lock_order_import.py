"""Imports and the writers running meanwhile take namespace locks and keyword counters
in one order (see ``test_lock_order.py``, ``test_lock_order_admin.py``)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from _locks import (
    EMB,
    RECORDS_COUNTER,
    export_lines,
    in_thread,
    memory,
    stalled,
    wait_until_blocked,
)
from _pool import tagged

from hindsight_core import Memory, Settings
from hindsight_core.models import ns_key


def _run_against(
    admin: sa.Engine,
    hold: tuple[str, ...],
    importing: tuple[str, Any],
    other: tuple[str, Any],
) -> list[Any]:
    """Hold the records' keyword counter of ``hold``; run the import ``importing`` (app,
    call) until it waits, then ``other`` until it waits too; let go. Their results."""
    with admin.connect() as holder:
        holder.execute(sa.text(RECORDS_COUNTER + " FOR UPDATE"), {"ns": ns_key(hold)}).all()
        first, first_out = in_thread(importing[1])
        try:
            wait_until_blocked(admin, importing[0])
            second, second_out = in_thread(other[1])
            wait_until_blocked(admin, other[0])
        finally:
            holder.rollback()
            first.join()
            second.join()
    return [*first_out, *second_out]


@pytest.mark.parametrize("other", ["import", "write"])
def test_an_import_takes_each_namespace_lock_before_its_keyword_counter(
    fresh_db: str, admin: sa.Engine, monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    """An import inserted restored records 256 at a time over every namespace, each
    insert's trigger locking its namespaces' keyword counters (in order inside the
    statement, not across them), and wrote plain records afterwards, each namespace's
    under its lock. So two imports meeting the namespaces in opposite orders each held
    a counter the other wanted (``import``), and an import holding a namespace's counter
    asked for its lock, which a write held while it waited for the counter (``write``).
    An import now goes a namespace at a time, in namespace order, locking it first."""
    from hindsight_core.memory import lifecycle

    monkeypatch.setattr(lifecycle, "REINDEX_BATCH", 1)  # one insert per restored record
    run = uuid.uuid4().hex[:8]
    a, b, c = (("lk", run, x) for x in "abc")
    setup = memory(fresh_db)
    setup.import_records(export_lines(a, b, c))  # every namespace has its counter row
    setup.close()
    app_1, app_2 = "hs-import-" + run, "hs-other-" + run
    importer, second = memory(fresh_db, app_1), memory(fresh_db, app_2, a)
    second.list_records()  # set up (the model checked) before the import
    plain_a = json.dumps({"namespace": list(a), "trigger": "t", "lesson": "Plain lesson one"})
    try:
        if other == "import":  # b, then c (held), then a; the other: a, then b
            results = _run_against(
                admin,
                c,
                (app_1, lambda: importer.import_records(export_lines(b, c, a))),
                (app_2, lambda: second.import_records(export_lines(a, b))),
            )
        else:  # a, then b (held), then plain records in a; the other writes in a
            results = _run_against(
                admin,
                b,
                (app_1, lambda: importer.import_records([*export_lines(a, b), plain_a])),
                (app_2, lambda: second.write({"trigger": "t", "lesson": "Plain lesson two"})),
            )
        failed = [r for r in results if isinstance(r, BaseException)]
        assert not failed, failed
        counts = {ns[-1]: len(importer.list_records(namespace=ns, limit=100)) for ns in (a, b, c)}
    finally:
        importer.close()
        second.close()
    if other == "import":
        assert results[0]["imported"] == 3 and results[1]["imported"] == 2, results
        assert counts == {"a": 3, "b": 3, "c": 2}
    else:
        assert results[0]["imported"] == 3 and results[1].status == "inserted", results
        assert counts == {"a": 4, "b": 2, "c": 1}


def test_an_import_and_an_eviction_take_namespace_locks_in_one_order(
    fresh_db: str, admin: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eviction over every namespace took each chunk's namespace locks in the order of
    their hashes, an import takes them in namespace order: an import holding the first
    namespace (its counter held) and an eviction holding the second, by hash first,
    then waited for each other. Eviction now takes them in namespace order too."""
    from datetime import UTC, datetime, timedelta

    from hindsight_core.memory import lifecycle

    monkeypatch.setattr(lifecycle, "REINDEX_BATCH", 1)
    hashed = sa.text("SELECT hashtextextended('hindsight:' || :ns, 0)")
    with admin.connect() as conn:  # two namespaces whose hashes come in the other order
        while True:
            run = uuid.uuid4().hex[:8]
            first, second = ("lk", run, "a"), ("lk", run, "b")
            h1, h2 = (conn.execute(hashed, {"ns": ns_key(ns)}).scalar() for ns in (first, second))
            if h2 < h1:
                break
    setup = memory(fresh_db)
    setup.import_records(export_lines(first, second))  # decayed in two years: both evictable
    setup.close()
    app_i, app_e = "hs-import-" + run, "hs-evict-" + run
    importer = memory(fresh_db, app_i)
    evictor = Memory(
        ("lk", "default"),
        settings=Settings(database_url=tagged(fresh_db, app_e)),
        embedder=EMB,
        clock=lambda: datetime.now(UTC) + timedelta(days=730),
    )
    evictor.list_records()
    try:
        results = _run_against(
            admin,
            first,
            (app_i, lambda: importer.import_records(export_lines(first, second))),
            (app_e, evictor.maintain),
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        assert not failed, failed
    finally:
        importer.close()
        evictor.close()
    assert results[0]["imported"] == 2
    # the records stored before (the eviction's statement began before the import ended)
    assert results[1].archived == 2


def test_an_import_analyzing_the_table_and_a_reindex_do_not_hang(
    fresh_db: str, admin: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import restores records (holding the records' table against a reindex's
    EXCLUSIVE lock, queued behind it), then writes a plain line, whose dedup lookups go
    to the index of a table never analyzed: the write analyzes it first, on a
    connection of its own, which queued behind the reindex, which waited for the
    import, which waited for its ANALYZE: a cycle through the client the server cannot
    see, until the statement timeout. The ANALYZE now gives up after a short
    ``lock_timeout`` and runs in the import's transaction, which goes first."""
    from hindsight_core.memory import write_flows

    monkeypatch.setattr(write_flows, "EXACT_DEDUP_PER_RECORD", 0)  # lookups in the index
    monkeypatch.setattr(write_flows, "EXACT_DEDUP_SMALL_PER_RECORD", 0)
    run = uuid.uuid4().hex[:8]
    ns = ("lk", run)
    setup = memory(fresh_db)
    setup.import_records(export_lines(*[ns] * 30))  # too few for autovacuum to analyze
    setup.close()
    app_i, app_r = "hs-import-" + run, "hs-reindex-" + run
    importer, reindexer = memory(fresh_db, app_i, ns), memory(fresh_db, app_r)
    importer.list_records()
    reindexer.list_records()
    plain = json.dumps({"namespace": list(ns), "trigger": "t", "lesson": "A plain lesson"})
    lines = [*export_lines(*[ns] * 30), plain]
    hung = False
    try:
        with admin.connect() as holder:  # the restore's insert waits for the counter
            holder.execute(sa.text(RECORDS_COUNTER + " FOR UPDATE"), {"ns": ns_key(ns)}).all()
            importing, imported = in_thread(lambda: importer.import_records(lines))
            try:
                wait_until_blocked(admin, app_i)
                reindexing, reindexed = in_thread(reindexer.reindex)
                wait_until_blocked(admin, app_r)
                holder.rollback()  # the restore goes on; the write's ANALYZE meets the reindex
                hung = stalled(admin, importing, app_i, app_r)
            finally:
                holder.rollback()
                importing.join()
                reindexing.join()
    finally:
        importer.close()
        reindexer.close()
    assert not hung, "the import's ANALYZE waited for a reindex that waited for the import"
    failed = [r for r in (*imported, *reindexed) if isinstance(r, BaseException)]
    assert not failed, failed
    assert imported[0]["imported"] == 31
    with admin.connect() as conn:
        tuples = conn.execute(
            sa.text("SELECT reltuples FROM pg_class WHERE relname = 'hindsight_experiences'")
        ).scalar_one()
    assert tuples >= 30, "the table was analyzed"
