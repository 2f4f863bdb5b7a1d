"""Whole-store operations (reindex, dropping a namespace, eviction everywhere) and the
writers running meanwhile take their locks in one order (see ``test_lock_order.py``;
imports: ``test_lock_order_import.py``).

Each test holds a lock from a connection of its own so that the operation stops
half-way, holding some rows or locks, lets a real writer run into it, and then lets
go: before the fixes, the two then waited for each other (SQLSTATE 40P01, one failed).

Internals: ``runtime.io_steps.SyncIO.side`` patched, to start a reindex at the moment a
write takes its side connection.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from _locks import (
    EMB,
    end,
    export_line,
    export_lines,
    hold_namespace,
    in_thread,
    memory,
    stalled,
    wait_until_blocked,
)
from _pool import tagged

from hindsight_core import Memory, Settings
from hindsight_core.models import ns_key
from hindsight_core.runtime.io_steps import SyncIO

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
    setup = memory(fresh_db)
    lessons = {a: "Lesson alpha", b: "Lesson beta", c: "Lesson gamma"}
    setup.import_records([export_line(ns, rid, lessons[rid]) for rid in (b, c, a)])
    setup.close()
    with admin.begin() as conn:  # stale: reindex re-embeds all three (same model)
        conn.execute(sa.text("UPDATE hindsight_experiences SET embed_key = 'stale'"))
    app_r, app_w = "hs-reindex-" + run, "hs-merge-" + run
    reindexer = memory(fresh_db, app_r)
    writer = memory(fresh_db, app_w, ns)
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


COUNTER = "SELECT 1 FROM hindsight_keyword_stats WHERE tbl = 'i' AND ns = :ns"


@pytest.mark.parametrize("first", ["batch", "drop"])
def test_dropping_a_namespace_and_an_item_batch_in_it_come_one_after_the_other(
    fresh_db: str, admin: sa.Engine, first: str
) -> None:
    """Dropping a namespace deleted its items' rows and then (cascade) their vectors'
    without the keys' locks; a batch locks its keys, then the vectors' rows, then the
    items'. So a batch re-putting an item deadlocked with a drop (``batch`` first), and
    a batch that re-put one item and added another while the drop waited came out
    half-dropped: the new item kept, the other deleted (``drop`` first). A batch now
    takes each of its namespaces' items lock shared, the drop takes it exclusive: the
    batch is wholly before the drop (nothing of it left) or after it (all of it)."""
    from hindsight_core.items import ItemIndex, Items, PutItem

    run = uuid.uuid4().hex[:8]
    dropped, other = ("lk", run, "a"), ("lk", run, "b")
    assert ns_key(dropped) < ns_key(other)
    index = ItemIndex(dims=8, fields=("text",))
    setup = memory(fresh_db, namespace=dropped)
    record = setup.write({"scene": "s", "trigger": "t", "lesson": "Kept until the drop"})
    Items(setup, index=index).batch(
        [PutItem(dropped, "old", {"text": "alpha"}), PutItem(other, "m", {"text": "beta"})]
    )
    setup.close()
    app_b, app_d = "hs-batch-" + run, "hs-drop-" + run
    writer = memory(fresh_db, app_b)
    items = Items(writer, index=index)
    dropper = memory(fresh_db, app_d)
    batch = [
        PutItem(dropped, "old", {"text": "alpha changed"}),
        PutItem(dropped, "new", {"text": "gamma"}),
        PutItem(other, "n", {"text": "delta"}),
    ]
    if first == "batch":  # the batch stops at the second namespace's counter
        hold, params = COUNTER, {"ns": ns_key(other)}
    else:  # the drop stops at the namespace's record
        hold, params = ROW, {"ns": ns_key(dropped), "id": record.id}
    try:
        with admin.connect() as holder:
            holder.execute(sa.text(hold + " FOR UPDATE"), params).all()
            try:
                if first == "batch":
                    putting, put = in_thread(lambda: items.batch(batch))
                    wait_until_blocked(admin, app_b)
                    dropping, drop = in_thread(lambda: dropper.drop_namespace(dropped))
                    wait_until_blocked(admin, app_d)
                else:
                    dropping, drop = in_thread(lambda: dropper.drop_namespace(dropped))
                    wait_until_blocked(admin, app_d)
                    putting, put = in_thread(lambda: items.batch(batch))
                    wait_until_blocked(admin, app_b, unless=putting)
            finally:
                holder.rollback()
                putting.join()
                dropping.join()
        failed = [r for r in (*put, *drop) if isinstance(r, BaseException)]
        assert not failed, failed
        left = {k for k in ("old", "new") if items.get(dropped, k) is not None}
        kept = items.get(other, "n")
    finally:
        items.close()
        writer.close()
        dropper.close()
    assert kept is not None
    if first == "batch":  # the batch committed first: the drop deleted all of it
        assert left == set() and drop[0]["items"] == 2, (left, drop)
    else:  # the drop committed first: the batch then put both items
        assert left == {"old", "new"} and drop[0]["items"] == 1, (left, drop)


BLOCKERS = sa.text(
    "SELECT b.state FROM pg_stat_activity r CROSS JOIN unnest(pg_blocking_pids(r.pid)) p(pid)"
    " JOIN pg_stat_activity b ON b.pid = p.pid"
    " WHERE r.application_name = :app AND r.wait_event_type = 'Lock'"
)


def test_eviction_everywhere_holds_no_lock_while_its_chunks_run(
    fresh_db: str, admin: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``maintain()`` over every namespace read the evictable namespaces in a
    transaction that it kept open while each chunk of them was evicted on a connection
    of its own, holding the read's table lock. A reindex dropping the index (ACCESS
    EXCLUSIVE) then waited for that transaction, the next chunk's update queued behind
    the reindex, and the maintenance waited for its chunk: a cycle through the client
    that the server cannot see (all waited until the statement timeout, 30 s by
    default, failed one). The listing now runs in autocommit."""
    from datetime import UTC, datetime, timedelta

    from hindsight_core.memory import lifecycle

    monkeypatch.setattr(lifecycle, "EVICT_NAMESPACES", 1)  # a chunk per namespace
    run = uuid.uuid4().hex[:8]
    first, second = ("lk", run, "a"), ("lk", run, "b")
    setup = memory(fresh_db)
    setup.import_records(export_lines(first, second))  # decayed in two years: both evictable
    setup.close()
    app_m, app_r = "hs-maintain-" + run, "hs-reindex-" + run
    evictor = Memory(
        ("lk", "default"),
        settings=Settings(database_url=tagged(fresh_db, app_m)),
        embedder=EMB,
        clock=lambda: datetime.now(UTC) + timedelta(days=730),
    )
    reindexer = memory(fresh_db, app_r)
    evictor.list_records()
    reindexer.list_records()
    states: list[str] = []
    try:
        with admin.connect() as holder:  # the first chunk waits for its namespace
            hold_namespace(holder, ns_key(first))
            maintaining, maintained = in_thread(evictor.maintain)
            try:
                wait_until_blocked(admin, app_m)
                reindexing, reindexed = in_thread(lambda: reindexer.reindex(force=True))
                wait_until_blocked(admin, app_r)
                with admin.connect() as conn:
                    states = list(conn.execute(BLOCKERS, {"app": app_r}).scalars())
                if "idle in transaction" in states:  # the stall: end it, then report it
                    end(admin, app_m, app_r)
            finally:
                holder.rollback()
                maintaining.join()
                reindexing.join()
    finally:
        evictor.close()
        reindexer.close()
    assert "idle in transaction" not in states, "the reindex waited for an idle maintenance"
    failed = [r for r in (*maintained, *reindexed) if isinstance(r, BaseException)]
    assert not failed, failed
    assert maintained[0].archived == 2 and reindexed[0].reembedded == 2


def test_a_pipelined_write_and_a_reindex_dropping_the_index_do_not_hang(
    fresh_db: str, admin: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write of 351 records into a namespace of 800 looks its neighbours up in three
    stages through the HNSW index, the later stages' look-ups on a side connection.
    A reindex with ``force`` drops the index (ACCESS EXCLUSIVE on the records' table),
    queued behind the write's transaction (which read the table) just as the side
    connection is taken; its look-ups queue behind the reindex; the write waits for
    them: a cycle through the client, which the server's deadlock detector cannot see
    (writes and searches stalled until the statement timeout, 30 s by default, failed
    one of them). The side connection's reads now give up after a short
    ``lock_timeout`` and run in the write's transaction, which holds the table's lock
    and so goes first."""
    run = uuid.uuid4().hex[:8]
    ns = ("lk", run)
    setup = memory(fresh_db)
    setup.import_records(export_lines(*[ns] * 800))
    setup.close()
    app_w, app_r = "hs-write-" + run, "hs-reindex-" + run
    writer, reindexer = memory(fresh_db, app_w, ns), memory(fresh_db, app_r)
    writer.list_records()
    reindexer.list_records()
    batch = [{"trigger": "t", "lesson": f"New lesson {i}"} for i in range(351)]
    reindexing: list[tuple[threading.Thread, list[Any]]] = []
    take_side = SyncIO.side

    def side_once_the_reindex_waits(io: SyncIO, arg: None) -> Any:
        if not reindexing:  # the write's first Pipelined: the reindex queues now
            reindexing.append(in_thread(lambda: reindexer.reindex(force=True)))
            wait_until_blocked(admin, app_r)
        return take_side(io, arg)

    monkeypatch.setattr(SyncIO, "side", side_once_the_reindex_waits)
    hung = False
    try:
        writing, wrote = in_thread(lambda: writer.write_many(batch))
        try:
            hung = stalled(admin, writing, app_w, app_r)
        finally:
            writing.join()
            for thread, _ in reindexing:
                thread.join()
    finally:
        writer.close()
        reindexer.close()
    assert reindexing, "the write's look-ups ran on the side connection"
    reindexed = reindexing[0][1]
    assert not hung, "the reindex waited for a write that waited"
    failed = [r for r in (*wrote, *reindexed) if isinstance(r, BaseException)]
    assert not failed, failed
    assert [r.status for r in wrote[0]] == ["inserted"] * 351
    assert reindexed[0].reembedded == 800 + 351
