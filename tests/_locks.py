"""Forcing an interleaving of real writers, and looking at their locks from the server.

Shared by the lock-order tests (``test_lock_order*.py``): a writer runs on a thread of
its own, on connections tagged with an ``application_name`` (``_pool.tagged``), and the
test waits, polling ``pg_stat_activity``, until the server shows it waiting for a lock.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import string
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import psycopg
import sqlalchemy as sa
from _pool import tagged

from hindsight_core import CallableEmbedder, Memory, Settings

DIM = 8
WAIT = 60.0  # seconds a writer may take to reach the lock (a loaded machine)


def _vectors(texts: list[str]) -> np.ndarray:
    seeds = [int(hashlib.sha1(t.encode()).hexdigest()[:8], 16) for t in texts]
    return np.stack([np.random.default_rng(s).standard_normal(DIM) for s in seeds])


EMB = CallableEmbedder(_vectors, dim=DIM, model_name="hash-8")
"""A fast embedder: the same text, the same vector; different texts, unrelated ones."""


def _until(
    admin: sa.Engine, query: str, params: dict[str, Any], n: int, why: str, unless: Any = None
) -> None:
    """Poll the count ``query`` returns until it reaches ``n`` (or the thread ``unless``
    ended); past ``WAIT`` seconds, fail with ``why``."""
    deadline = time.monotonic() + WAIT
    while True:
        with admin.connect() as conn:
            if conn.execute(sa.text(query), params).scalar_one() >= n:
                return
        if unless is not None and not unless.is_alive():
            return
        if time.monotonic() > deadline:
            raise AssertionError(why)
        time.sleep(0.02)


def wait_until_blocked(admin: sa.Engine, app: str, unless: threading.Thread | None = None) -> None:
    """Return once the backend tagged ``app`` waits for a lock (the writer got there), or
    once the thread ``unless`` ended (a writer that may not have to wait)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = :app"
        " AND wait_event_type = 'Lock'"
    )
    _until(admin, query, {"app": app}, 1, f"{app} never waited for the lock", unless)


def wait_for_waiters(admin: sa.Engine, n: int) -> None:
    """Return once ``n`` backends of ``admin``'s database wait on an advisory lock (writers
    queued behind a namespace lock, each holding a pooled connection)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND wait_event = 'advisory' AND datname = current_database()"
    )
    _until(admin, query, {}, n, f"fewer than {n} writers queued on the lock")


def hold_namespace(conn: sa.Connection, ns: str) -> None:
    """Take the namespace ``ns``'s lock (``experiences_sql.LOCK_NAMESPACE``) on ``conn``,
    as a writer does, until its transaction ends."""
    conn.execute(
        sa.text("SELECT pg_advisory_xact_lock(hashtextextended('hindsight:' || :ns, 0))"),
        {"ns": ns},
    )


def lockable(admin: sa.Engine, sql: str, params: dict[str, Any]) -> bool:
    """Whether the rows ``sql`` selects can be locked right now (no one holds them)."""
    with admin.connect() as conn:
        try:
            conn.execute(sa.text(sql + " FOR UPDATE NOWAIT"), params).all()
        except sa.exc.OperationalError as exc:
            assert isinstance(exc.orig, psycopg.errors.LockNotAvailable), exc
            return False
        finally:
            conn.rollback()
    return True


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` on a thread; the list receives its result or what it raised."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def memory(url: str, app: str | None = None, namespace: Any = ("lk", "default")) -> Memory:
    """A memory on ``url`` with :data:`EMB`, its connections tagged ``app``."""
    settings = Settings(database_url=tagged(url, app) if app else url)
    return Memory(namespace, settings=settings, embedder=EMB)


def export_line(ns: tuple[str, ...], rid: uuid.UUID, lesson: str) -> str:
    """An export line: a record with its id, restored as it was by an import."""
    return json.dumps(
        {"id": str(rid), "namespace": list(ns), "scene": "s", "trigger": "t", "lesson": lesson}
    )


RECORDS_COUNTER = "SELECT 1 FROM hindsight_keyword_stats WHERE tbl = 'e' AND ns = :ns"


def export_lines(*spaces: tuple[str, ...]) -> list[str]:
    """One export line (a new record) per namespace given, in that order.

    The lessons are random letters, no digits: with :data:`EMB`'s 8 dimensions, about one
    pair in 4,000 of unrelated texts lands above the dedup threshold, and a stored "Lesson
    aea8bc" carries the same number as a written "New lesson 8", so the lexical veto
    would let the two merge (a write test that expects only inserts failed 1 run in 100).
    """
    return [export_line(ns, uuid.uuid4(), f"Lesson {_letters(8)}") for ns in spaces]


def _letters(n: int) -> str:
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(n))


def stalled(admin: sa.Engine, thread: threading.Thread, *apps: str) -> bool:
    """Whether ``thread`` still runs after 20 s (before the statement timeout, 30 s, ends
    a hang); if so, the backends of ``apps`` are ended (a hang the server cannot see)."""
    thread.join(20)
    if not thread.is_alive():
        return False
    end(admin, *apps)
    return True


def end(admin: sa.Engine, *apps: str) -> None:
    """Terminate the backends of ``apps`` (a hang the server cannot see: end it)."""
    with admin.connect() as conn:
        conn.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = ANY(:apps)"
            ),
            {"apps": list(apps)},
        ).all()
