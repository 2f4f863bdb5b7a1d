"""The schema is ready for Citus, sharded by namespace (docs/scaling.md).

Read from the catalog (``pg_index``, ``pg_constraint``) of a freshly migrated
database: every table of ours has a distribution column (``ns``; ``thread_id`` for
the checkpointer's tables, whose tenant is the thread) that is ``NOT NULL`` and leads
every primary and unique key; every foreign key carries it on both sides. The SQL
itself is checked for what the catalog cannot show: advisory locks are per
namespace and joins match on the distribution column.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from hindsight_core import Memory, Settings

STORAGE = Path(__file__).resolve().parents[1] / "hindsight_core" / "storage"
REFERENCE = {"hindsight_meta", "hindsight_alembic_version"}  # tiny, global: reference tables
BY_THREAD = {"hindsight_checkpoints", "hindsight_checkpoint_blobs", "hindsight_checkpoint_writes"}
# Set-up locks, not tenant data: one-time migration and model check.
GLOBAL_LOCKS = {"hindsight:meta", "_LOCK_KEY"}

KEYS = sa.text("""
    SELECT c.relname AS tbl, i.indexrelid::regclass::text AS name, i.indisprimary AS pk,
           (SELECT array_agg(a.attname ORDER BY k.n) FROM unnest(i.indkey) WITH ORDINALITY
              AS k(attnum, n) JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
           ) AS cols
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
    JOIN pg_namespace s ON s.oid = c.relnamespace AND s.nspname = current_schema()
    WHERE c.relname LIKE 'hindsight%' AND (i.indisunique OR i.indisprimary)
""")
FOREIGN = sa.text("""
    SELECT conname, conrelid::regclass::text AS tbl, confrelid::regclass::text AS ref,
           (SELECT array_agg(a.attname ORDER BY k.n) FROM unnest(conkey) WITH ORDINALITY
              AS k(attnum, n) JOIN pg_attribute a ON a.attrelid = conrelid
              AND a.attnum = k.attnum) AS cols,
           (SELECT array_agg(a.attname ORDER BY k.n) FROM unnest(confkey) WITH ORDINALITY
              AS k(attnum, n) JOIN pg_attribute a ON a.attrelid = confrelid
              AND a.attnum = k.attnum) AS ref_cols
    FROM pg_constraint WHERE contype = 'f' AND conrelid::regclass::text LIKE 'hindsight%'
""")
TABLES = sa.text("""
    SELECT c.relname AS tbl, a.attname AS col, a.attnotnull AS notnull
    FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    WHERE s.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE 'hindsight%'
""")


def distribution_column(table: str) -> str:
    return "thread_id" if table in BY_THREAD else "ns"


@pytest.fixture
def catalog(fresh_db: str, embedder) -> sa.Connection:
    with Memory(settings=Settings(database_url=fresh_db), embedder=embedder) as mem:
        mem.setup()
    engine = sa.create_engine(fresh_db, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        yield conn
    engine.dispose()


def test_every_table_has_a_not_null_distribution_column(catalog: sa.Connection) -> None:
    columns: dict[str, dict[str, bool]] = {}
    for row in catalog.execute(TABLES).mappings():
        columns.setdefault(row["tbl"], {})[row["col"]] = row["notnull"]
    assert {
        "hindsight_experiences",
        "hindsight_items",
        "hindsight_events",
        "hindsight_llm_usage",
    } <= set(columns)
    for table, cols in columns.items():
        if table in REFERENCE:
            continue
        dist = distribution_column(table)
        assert cols.get(dist) is True, f"{table}.{dist} missing or nullable"


def test_primary_and_unique_keys_lead_with_the_namespace(catalog: sa.Connection) -> None:
    keys = list(catalog.execute(KEYS).mappings())
    tables = {k["tbl"] for k in keys if k["pk"]}
    assert "hindsight_events" in tables and "hindsight_llm_usage" in tables
    bad = [
        f"{k['name']} {k['cols']}"
        for k in keys
        if k["tbl"] not in REFERENCE and k["cols"][0] != distribution_column(k["tbl"])
    ]
    assert not bad, f"keys that do not lead with the distribution column: {bad}"


def test_foreign_keys_stay_inside_a_namespace(catalog: sa.Connection) -> None:
    fks = list(catalog.execute(FOREIGN).mappings())
    assert fks, "the item vectors reference their items"
    for fk in fks:
        dist = distribution_column(fk["tbl"])
        assert dist == distribution_column(fk["ref"]), fk["conname"]
        assert dist in fk["cols"] and fk["cols"].index(dist) == fk["ref_cols"].index(dist), (
            f"{fk['conname']} {fk['cols']} -> {fk['ref_cols']}"
        )


def _sql_sources() -> dict[str, str]:
    return {p.name: p.read_text() for p in STORAGE.glob("*.py")}


def test_advisory_locks_are_per_namespace() -> None:
    locks = [
        (name, line.strip())
        for name, src in _sql_sources().items()
        for line in src.splitlines()
        if "pg_advisory" in line and "lock(" in line
    ]
    assert len(locks) >= 3
    for name, line in locks:
        per_ns = re.search(r"hashtextextended\('hindsight:[^']*'\s*\|\|\s*\S*ns", line)
        hashed = "lock(h)" in line  # the item locks: h is hashed from namespace and key
        items_ns = "namespace_lock(" in line  # a namespace's items lock, through its helper
        assert per_ns or hashed or items_ns or any(g in line for g in GLOBAL_LOCKS), (
            f"{name}: {line}"
        )
    # The item locks (batches and the sweep) hash namespace and key, through one helper.
    items_sql = _sql_sources()["items_sql.py"]
    assert "hashtextextended('hindsight:item:' || {ns} || chr(31) || {key}, 0)" in items_sql
    assert '_key_lock("p.ns", "p.key")' in items_sql and '_key_lock("c.ns", "c.key")' in items_sql
    # A namespace's items lock (shared by batches, exclusive when it is dropped) hashes it.
    assert "hashtextextended('hindsight:' || chr(31) || 'items:' || {ns}, 0)" in items_sql
    assert "pg_advisory_xact_lock_shared(g)" in items_sql and 'namespace_lock("n.ns")' in items_sql


def test_joins_match_on_the_distribution_column() -> None:
    joins = 0
    for name, src in _sql_sources().items():
        # (System catalogs, pg_*, are not distributed: items_sql's index health reads them.)
        for match in re.finditer(r"\bJOIN\s+(?!LATERAL|unnest|pg_)\S+\s+\w+\s+ON\s+([^\n]+)", src):
            joins += 1
            on = match.group(1)
            assert re.search(r"\b\w+\.(ns|thread_id)\s*=", on) or "e.ns = {ns}" in on, (
                f"{name}: JOIN ... ON {on}"
            )
        for match in re.finditer(r"JOIN LATERAL \((.{0,700})", src, re.S):
            body = match.group(1)
            if re.search(r"FROM \{[A-Z]\}", body):  # a subquery over one of our tables
                joins += 1
                assert re.search(r"\.(ns|thread_id) = (:ns|\w+\.(ns|thread_id))", body), (
                    f"{name}: LATERAL {body[:200]}"
                )
    assert joins >= 8
