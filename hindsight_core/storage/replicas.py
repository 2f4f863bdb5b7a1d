"""Read replicas: which server answers a read, decided once for sync and async.

With ``HINDSIGHT_READ_DATABASE_URLS`` set, recall, search, get and listing of records,
items and checkpoints are sent to PostgreSQL streaming standbys; everything else
(writes, dedup lookups, usage feedback, anything in a transaction, set-up) stays on
the primary. The policy, in full:

- **Read-your-writes.** After a memory writes (per namespace; items and checkpoints
  per memory), the primary's WAL insert position is noted. A later read of that
  namespace goes to a replica only once the replica has replayed that far
  (``pg_last_wal_replay_lsn()``); it waits at most ``read_your_writes_timeout``
  seconds for it, else the primary answers.
- **Lag.** A replica whose replay lags more than ``replica_max_lag`` seconds behind
  the WAL it has received is skipped. Its state is probed at most every
  ``replica_check_interval`` seconds (and whenever read-your-writes needs it).
- **Down.** A replica that cannot be reached is skipped for
  ``replica_retry_interval`` seconds, then tried again. A read that fails there for
  another reason (a statement timeout, a recovery conflict) is served by the next
  replica or the primary; the replica stays in use.
- **Never silent.** Each skip is logged (warning) and counted; the counts are in
  ``Memory.stats().reads``. A server that is not a standby is refused (counted as
  down): it would be another database, not a copy.

:class:`ReadRouter` holds the state and writes the decision as a generator plan
(:meth:`ReadRouter.plan`) that yields :class:`Probe`, :class:`Read`, :class:`Pause`
and :class:`Primary` steps; ``runtime/routing.py`` drives it with blocking or asyncio I/O.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from ..errors import ConfigurationError, DatabaseError, DatabaseUnavailableError

log = logging.getLogger("hindsight.replicas")

# The primary's WAL insert position, read after a write committed: at least the end
# of that commit record, so a replica that replayed this far sees the write.
WRITE_LSN = sa.text("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS lsn")

# A standby's replay position and replay lag: seconds since the last replayed commit
# while received WAL waits to be replayed, else 0 (an idle primary is no lag).
REPLICA_STATE = sa.text(
    "SELECT pg_is_in_recovery() AS standby,"
    " (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint AS replay,"
    " CASE WHEN pg_last_wal_receive_lsn() IS NULL"
    "        OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0.0"
    "      ELSE COALESCE(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0.0)"
    " END::float8 AS lag"
)

COUNTERS = ("replica", "primary", "waited", "skipped_down", "skipped_lag", "failed", "no_replica")
_MAX_SESSIONS = 4096


def parse_urls(raw: str | None) -> list[str]:
    """The replica URLs of ``HINDSIGHT_READ_DATABASE_URLS`` (comma separated), as
    psycopg SQLAlchemy URLs.

    Raises:
        ConfigurationError: one is not a PostgreSQL URL.
    """
    urls: list[str] = []
    for part in (raw or "").split(","):
        if not part.strip():
            continue
        try:
            parsed = make_url(part.strip())
        except sa.exc.ArgumentError as exc:
            raise ConfigurationError(
                f"HINDSIGHT_READ_DATABASE_URLS: {part.strip()!r} is not a valid URL: {exc}"
            ) from exc
        if parsed.get_backend_name() != "postgresql":
            raise ConfigurationError(
                "HINDSIGHT_READ_DATABASE_URLS must list PostgreSQL URLs, "
                f"got {parsed.get_backend_name()!r}"
            )
        urls.append(
            parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        )
    return urls


@dataclass(frozen=True)
class Probe:
    """Read replica ``index``'s state (:data:`REPLICA_STATE`); reply: its one row."""

    index: int


@dataclass(frozen=True)
class Read:
    """Run the read on replica ``index``; reply: the read's result."""

    index: int


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds`` before probing again (read-your-writes)."""

    seconds: float


@dataclass(frozen=True)
class Primary:
    """Run the read on the primary; reply: the read's result."""


Step = Probe | Read | Pause | Primary


@dataclass
class _Replica:
    name: str  # the URL without password, for logs
    down_until: float = 0.0
    replay: int = -1  # last replay position seen (bytes)
    lag: float = 0.0  # last replay lag seen (seconds)
    checked_at: float = float("-inf")


class _Skip(Exception):
    pass


class ReadRouter:
    """Routing state of one memory (shared by its items and checkpoints).

    Args:
        settings: the ``read_your_writes_timeout``, ``replica_max_lag``,
            ``replica_check_interval`` and ``replica_retry_interval`` to apply.
        urls: the replicas' URLs (see :func:`parse_urls`).
    """

    def __init__(self, settings: Any, urls: list[str]) -> None:
        self.settings = settings
        self.urls = urls
        self._replicas = [_Replica(make_url(u).render_as_string(hide_password=True)) for u in urls]
        self._written: OrderedDict[str, int] = OrderedDict()  # session key -> LSN
        self._written_all = 0  # writes of no one namespace, and evicted sessions
        self._next = 0
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNTERS, 0)
        self.max_lag_seen = 0.0
        self.clock = time.monotonic

    # ------------------------------------------------------------------ bookkeeping

    def note_write(self, key: str | None, lsn: int) -> None:
        """Remember that session ``key`` (a namespace; ``None``: every one) wrote up to
        ``lsn``: its next reads need a replica that replayed this far."""
        with self._lock:
            if key is None:
                self._written_all = max(self._written_all, lsn)
                return
            self._written[key] = max(lsn, self._written.pop(key, 0))
            if len(self._written) > _MAX_SESSIONS:  # the oldest: long replayed, likely
                _, old = self._written.popitem(last=False)
                self._written_all = max(self._written_all, old)

    def needed(self, key: str | None) -> int:
        """The WAL position a replica must have replayed to serve ``key``'s reads
        (``None``: reads that may span namespaces wait for every write)."""
        with self._lock:
            if key is None:
                return max([self._written_all, *self._written.values()])
            return max(self._written_all, self._written.get(key, 0))

    def count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def counts(self) -> dict[str, float]:
        """How reads were routed since this memory was created, and the largest
        replica lag seen (``max_lag_seconds``)."""
        with self._lock:
            out: dict[str, float] = dict(self._counts)
        out["max_lag_seconds"] = round(self.max_lag_seen, 3)
        return out

    def _order(self) -> list[int]:
        """Replicas not marked down, round robin."""
        now = self.clock()
        with self._lock:
            n = len(self._replicas)
            start, self._next = self._next, (self._next + 1) % max(n, 1)
        return [i % n for i in range(start, start + n) if self._replicas[i % n].down_until <= now]

    def mark_down(self, index: int, error: BaseException) -> None:
        """Skip replica ``index`` for ``replica_retry_interval`` seconds (logged, counted)."""
        replica = self._replicas[index]
        replica.down_until = self.clock() + self.settings.replica_retry_interval
        replica.checked_at = float("-inf")
        self.count("skipped_down")
        log.warning(
            "read replica %s skipped for %.1f s (the next replica or the primary "
            "serves its reads): %s",
            replica.name,
            self.settings.replica_retry_interval,
            error,
        )

    def _seen(self, index: int, row: dict[str, Any]) -> None:
        replica = self._replicas[index]
        if not row["standby"]:  # another database, not a copy: never read there
            raise DatabaseUnavailableError(
                f"{replica.name} is not a standby (pg_is_in_recovery() is false): remove it "
                "from HINDSIGHT_READ_DATABASE_URLS"
            )
        replica.replay = int(row["replay"] or 0)
        replica.lag = float(row["lag"] or 0.0)
        replica.checked_at = self.clock()
        self.max_lag_seen = max(self.max_lag_seen, replica.lag)

    # ------------------------------------------------------------------ the plan

    def plan(self, key: str | None) -> Generator[Step, Any, Any]:
        """Serve one read of session ``key``: yields steps, returns the read's result.

        A ``DatabaseError`` of a :class:`Probe` or :class:`Read` is thrown back in: the
        next replica is tried, then the primary; one that cannot be reached
        (``DatabaseUnavailableError``) is also marked down.
        """
        need = self.needed(key)
        order = self._order()
        if not order:
            self.count("no_replica")
        for index in order:
            try:
                yield from self._ready(index, need)
                result = yield Read(index)
            except _Skip:
                continue
            except DatabaseUnavailableError as exc:
                self.mark_down(index, exc)
                continue
            except DatabaseError as exc:
                self.count("failed")
                log.warning(
                    "a read failed on replica %s, the next replica or the primary serves it: %s",
                    self._replicas[index].name,
                    exc,
                )
                continue
            self.count("replica")
            return result
        self.count("primary")
        return (yield Primary())

    def _ready(self, index: int, need: int) -> Generator[Step, Any, None]:
        """Probe replica ``index`` if its state is unknown, old, or short of ``need``;
        wait (bounded) for it to replay ``need``; raise :class:`_Skip` if it lags."""
        replica, settings = self._replicas[index], self.settings
        stale = self.clock() - replica.checked_at >= settings.replica_check_interval
        if not stale and replica.replay >= need:
            return
        self._seen(index, (yield Probe(index)))
        if replica.lag > settings.replica_max_lag:
            self.count("skipped_lag")
            log.warning(
                "read replica %s lags %.1f s (> replica_max_lag %.1f s): skipped, "
                "the next replica or the primary serves",
                replica.name,
                replica.lag,
                settings.replica_max_lag,
            )
            raise _Skip
        if replica.replay >= need:
            return
        deadline = self.clock() + settings.read_your_writes_timeout
        pause = 0.001
        self.count("waited")
        while replica.replay < need:
            if self.clock() + pause > deadline:
                self.count("skipped_lag")
                log.warning(
                    "read replica %s had not replayed this session's last write "
                    "within read_your_writes_timeout (%.3f s): skipped, the next "
                    "replica or the primary serves",
                    replica.name,
                    settings.read_your_writes_timeout,
                )
                raise _Skip
            yield Pause(pause)
            pause = min(pause * 2, 0.02)
            self._seen(index, (yield Probe(index)))
