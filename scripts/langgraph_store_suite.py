"""Run LangGraph's own PostgresStore test suite against HindsightStore.

LangGraph ships its store tests in its repository, not in the wheels
(``libs/checkpoint-postgres/tests/test_store.py`` and ``test_async_store.py``). This
copies them into a temporary directory (never into this repository), points them at
an embedded PostgreSQL, puts ``HindsightStore`` in place of ``PostgresStore`` /
``AsyncPostgresStore`` and runs pytest there::

    git clone --depth 1 https://github.com/langchain-ai/langgraph /tmp/langgraph
    python scripts/langgraph_store_suite.py /tmp/langgraph --ranking hybrid -- -q

Arguments after ``--`` go to pytest. ``--ranking vector`` runs PostgresStore's ranking.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

TESTS = (
    "__init__.py",
    "conftest.py",
    "embed_test_utils.py",
    "test_store.py",
    "test_async_store.py",
)

# Loaded by pytest (``-p``) before the test modules import PostgresStore.
PLUGIN = '''
import os

import langgraph.store.postgres as lgp
import psycopg
from psycopg.rows import dict_row

from hindsight_adapters.langgraph import HindsightStore

RANKING = os.environ["LG_SUITE_RANKING"]


class _Store(HindsightStore):
    """HindsightStore where the suite builds a PostgresStore; MIGRATIONS for the
    suite's own rewrite of PostgresStore's (it has no effect here)."""

    MIGRATIONS: list[str] = []

    @classmethod
    def _compatible(cls, conn_string, **kwargs):
        kwargs["ranking"] = RANKING
        return super()._compatible(conn_string, **kwargs)

    def _cursor(self):
        """PostgresStore's ``_cursor()`` (sync or async) on the store's database: the
        suite runs SQL of its own through it (on PostgresStore's tables)."""
        return _Cursor(self._url)


# PostgresStore's table as the suite reads and backdates it (prefix, key, expires_at,
# updated_at): a view over Hindsight's items, updatable in those two columns.
STORE_VIEW = (
    "CREATE OR REPLACE TEMP VIEW store AS SELECT replace(ns, chr(31), '.') AS prefix, "
    "key, value, created_at, updated_at, expires_at, ttl_minutes FROM hindsight_items"
)


class _Cursor:
    def __init__(self, url):
        self.url = url

    def __enter__(self):
        self.conn = psycopg.connect(self.url, autocommit=True, row_factory=dict_row)
        cur = self.conn.cursor()
        cur.execute(STORE_VIEW)
        return cur

    def __exit__(self, *exc):
        self.conn.close()

    async def __aenter__(self):
        self.aconn = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, row_factory=dict_row
        )
        cur = self.aconn.cursor()
        await cur.execute(STORE_VIEW)
        return cur

    async def __aexit__(self, *exc):
        await self.aconn.close()


class _AsyncStore(_Store):
    """AsyncPostgresStore's ``from_conn_string`` is an async context manager."""

    from_conn_string = classmethod(HindsightStore.afrom_conn_string.__func__)

    async def setup(self):
        await self.asetup()


lgp.PostgresStore = _Store
lgp.AsyncPostgresStore = _AsyncStore
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("langgraph", type=Path, help="a checkout of langchain-ai/langgraph")
    parser.add_argument("--ranking", choices=("hybrid", "vector"), default="hybrid")
    args, pytest_args = parser.parse_known_args()
    pytest_args = [a for a in pytest_args if a != "--"]
    src = args.langgraph / "libs" / "checkpoint-postgres" / "tests"
    if not (src / "test_store.py").is_file():
        parser.error(f"no LangGraph store tests under {src}")

    from hindsight_core.storage import embedded

    work = Path(tempfile.mkdtemp(prefix="lg-store-suite-"))
    home = work / "pg"
    home.mkdir()
    home.chmod(0o755)
    try:
        # postgresql://postgres:@/postgres?host=/socket: the suite splits its URL on "/".
        url = embedded.embedded_url(home).replace("postgresql+psycopg://", "postgresql://", 1)
        base, _, query = url.partition("?")
        query = "&".join(
            f"{k}={quote(v, safe='')}" for k, _, v in (p.partition("=") for p in query.split("&"))
        )
        tests = work / "tests"
        tests.mkdir()
        for name in TESTS:
            shutil.copy(src / name, tests / name)
        conftest = tests / "conftest.py"
        text = re.sub(
            r"^DEFAULT_URI = .*$",
            'DEFAULT_URI = __import__("os").environ["LG_SUITE_URI"]',
            conftest.read_text(),
            flags=re.M,
        )
        conftest.write_text(text)
        (work / "hindsight_suite_plugin.py").write_text(PLUGIN)
        env = {
            **os.environ,
            "LG_SUITE_URI": f"{base}?{query}",
            "LG_SUITE_RANKING": args.ranking,
            "PYTHONPATH": os.pathsep.join(
                [str(work), os.environ.get("PYTHONPATH", ""), str(Path(__file__).parents[1])]
            ),
        }
        cmd = [sys.executable, "-m", "pytest", "-p", "hindsight_suite_plugin"]
        cmd += ["-p", "no:cacheprovider", "-o", "asyncio_mode=auto", "-o", "filterwarnings="]
        cmd += ["--rootdir", str(work), str(tests), *pytest_args]
        return subprocess.call(cmd, cwd=work, env=env)
    finally:
        embedded.stop(home)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
