"""A fast path for item batches that need no transaction (blocking I/O).

Most store calls are one statement (a get, a search, a put). Through the generic
driver each costs a pool checkout with a pre-ping round trip, BEGIN and COMMIT round
trips, and SQLAlchemy's execution layer. Here, batches whose statements are each a
unit of work (see ``ItemFlows._batch_flow``) run in autocommit mode straight on the
psycopg connection, and connections used within the last ``KEEP_WARM`` seconds stay
checked out (at most ``WARM_MAX``) so the next call skips the ping. A warm
connection found broken is dropped and the call retried on a fresh, pinged one.
They remain connections of the memory's pool (returned on ``close`` / disposal).
"""

from __future__ import annotations

import threading
import time
from functools import lru_cache
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.rows import dict_row
from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg

from ..embeddings import Embedder
from ..errors import DatabaseError, DatabaseUnavailableError
from ..memory.flow import Embed, Flow, Sql
from ..storage.engine import db_errors

_DIALECT = pg_psycopg.dialect()


@lru_cache(maxsize=512)
def _pyformat(statement: sa.TextClause) -> str:
    return str(statement.compile(dialect=_DIALECT))


def drive(flow: Flow[Any], conn: sa.Connection, embedder: Embedder) -> Any:
    """Run a flow of ``Sql`` / ``Embed`` requests on ``conn``'s psycopg connection."""
    driver = conn.connection.driver_connection
    assert driver is not None
    reply: Any = None
    try:
        with driver.cursor(row_factory=dict_row) as cur:
            while True:
                try:
                    req = flow.send(reply)
                except StopIteration as stop:
                    return stop.value
                if isinstance(req, Embed):
                    reply = embedder.embed(req.texts) if req.texts else []
                elif isinstance(req, Sql):
                    cur.execute(_pyformat(req.statement), req.params)  # type: ignore[arg-type]
                    reply = cur.fetchall() if req.fetch == "all" and cur.description else []
                else:  # pragma: no cover - the fast path runs only once set up
                    raise AssertionError(f"unexpected request {req!r} on the fast path")
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or ["unknown error"])[0]
        if isinstance(exc, psycopg.OperationalError) and not exc.sqlstate:
            raise DatabaseUnavailableError(f"the database cannot be reached: {first}") from exc
        raise DatabaseError(f"database error: {first}") from exc
    finally:
        flow.close()


def _broken(exc: BaseException, conn: sa.Connection) -> bool:
    cause = exc.__cause__
    return isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError) and not getattr(
        cause, "sqlstate", None) or bool(conn.closed or conn.invalidated)


class WarmConnections:
    """Recently used autocommit connections of an engine, reused without a ping."""

    KEEP_WARM = 10.0
    WARM_MAX = 2

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._warm: list[tuple[float, sa.Connection]] = []
        self._lock = threading.Lock()
        sa.event.listen(engine, "engine_disposed", self._on_dispose)

    def _on_dispose(self, _engine: sa.Engine) -> None:
        for conn in self.drain():
            conn.invalidate()
            conn.close()

    def drain(self) -> list[sa.Connection]:
        with self._lock:
            conns = [c for _, c in self._warm]
            self._warm.clear()
        return conns

    def close(self) -> None:
        """Give the warm connections back to the pool."""
        for conn in self.drain():
            conn.close()

    def _take(self) -> sa.Connection | None:
        now = time.monotonic()
        with self._lock:
            cold = [c for used, c in self._warm if now - used >= self.KEEP_WARM]
            self._warm = [(u, c) for u, c in self._warm if now - u < self.KEEP_WARM]
            conn = self._warm.pop()[1] if self._warm else None
        for c in cold:
            c.close()
        return conn

    def _give(self, conn: sa.Connection) -> None:
        with self._lock:
            if len(self._warm) < self.WARM_MAX:
                self._warm.append((time.monotonic(), conn))
                return
        conn.close()

    def run(self, make: Any, embedder: Embedder) -> Any:
        """Run ``make()``'s flow on a warm (else fresh) autocommit connection."""
        conn = self._take()
        if conn is not None:
            try:
                result = drive(make(), conn, embedder)
            except BaseException as exc:
                broken = _broken(exc, conn)
                if broken:
                    conn.invalidate()
                conn.close()
                if not broken:
                    raise
            else:
                self._give(conn)
                return result
        with db_errors():
            conn = self.engine.connect()
            conn.execution_options(isolation_level="AUTOCOMMIT")
        try:
            result = drive(make(), conn, embedder)
        except BaseException:
            conn.close()
            raise
        self._give(conn)
        return result
