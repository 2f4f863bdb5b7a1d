"""Experience records written in batches: one statement per batch, not one per record.

``write_many``, import and reflection's reinforcement used to run their inserts,
merges and events as ``executemany`` (one statement per record). Each statement fires
the BM25 counters' statement-level triggers (migration 0009) once, and each firing
updated the namespace's counter row once more in the same transaction: a 1,000-record
batch made 1,000 versions of that row, each UPSERT walking the versions before it,
and paid 1,000 times the trigger's and the executor's start-up. One statement per
batch fires each trigger once, with the whole batch in its transition table.

Callers build one parameter dict per record, as for a single-row statement;
:func:`insert_rows`, :func:`merge_rows` and :func:`event_rows` turn a list of them
into the column arrays of one statement (``unnest``). A single record goes the same
way (a list of one): one statement for every insert of records, merge and event.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from .experiences_sql import T
from .fulltext_sql import array_literal
from .vectors import Float4Array

# (parameter, SQL array type) of the insert's columns, in the INSERT's order; the
# embedding comes apart (one flat real[], sliced per row).
_INSERT_COLUMNS = (
    ("ns", "text"),
    ("id", "uuid"),
    ("scene", "text"),
    ("trigger", "text"),
    ("action", "text"),
    ("outcome", "text"),
    ("lesson", "text"),
    ("confidence", "real"),
    ("importance", "real"),
    ("critical", "boolean"),
    ("source", "jsonb"),
    ("score", "float8"),
    ("use_count", "int"),
    ("occurrences", "int"),
    ("last_used_at", "timestamptz"),
    ("created_at", "timestamptz"),
    ("updated_at", "timestamptz"),
    ("archived_at", "timestamptz"),
    ("merged_into", "uuid"),
    # per-row arrays travel as array literals (PostgreSQL has no ragged arrays)
    ("merged_from", "uuid[]"),
    ("also_scenes", "text[]"),
    ("embed_key", "text"),
    ("search_tsv", "tsvector"),
)


def _unnest(columns: Sequence[tuple[str, str]]) -> str:
    """``unnest(...) WITH ORDINALITY AS p(<names>, i)`` over text[] parameters, each
    cast per row to its column's type (a per-row array from its literal)."""
    args = ", ".join(
        f"CAST(:{name} AS {'text' if typ.endswith('[]') else typ}[])" for name, typ in columns
    )
    return f"unnest({args}) WITH ORDINALITY AS p({', '.join(n for n, _ in columns)}, i)"


def _value(name: str, typ: str) -> str:
    return f"CAST(p.{name} AS {typ})" if typ.endswith("[]") or typ == "tsvector" else f"p.{name}"


INSERT_ROWS = sa.text(
    f"""
    INSERT INTO {T} ({", ".join(n for n, _ in _INSERT_COLUMNS)}, embedding)
    SELECT {", ".join(_value(n, t) for n, t in _INSERT_COLUMNS)},
        CAST((SELECT CAST(:embedding AS real[]))[(p.i - 1) * :dim + 1 : p.i * :dim] AS vector)
    FROM {_unnest(_INSERT_COLUMNS)}
    ON CONFLICT (ns, id) DO NOTHING
    """
)

_MERGE_COLUMNS = (
    ("ns", "text"),
    ("id", "uuid"),
    ("added", "int"),
    ("critical", "boolean"),
    ("importance", "real"),
    ("scenes", "text[]"),
    ("now", "timestamptz"),
)

# A near-duplicate folded into a stored record: its count, use time, criticality,
# importance and scenes (each record at most once per statement).
MERGE_ROWS = sa.text(
    f"""
    UPDATE {T} e SET occurrences = e.occurrences + p.added, last_used_at = p.now,
        updated_at = p.now, critical = e.critical OR p.critical,
        importance = CASE WHEN e.importance IS NULL THEN p.importance
                          ELSE GREATEST(e.importance, p.importance) END,
        also_scenes = e.also_scenes || ARRAY(
            SELECT u.s FROM unnest(CAST(p.scenes AS text[])) WITH ORDINALITY u(s, i)
            WHERE u.s <> e.scene AND u.s <> ALL(e.also_scenes) ORDER BY u.i)
    FROM {_unnest(_MERGE_COLUMNS)}
    WHERE e.ns = p.ns AND e.id = p.id
    """
)

_EVENT_COLUMNS = (
    ("ns", "text"),
    ("record_id", "uuid"),
    ("kind", "text"),
    ("now", "timestamptz"),
    ("detail", "jsonb"),
)

# Events of the records' history (hindsight_events).
EVENT_ROWS = sa.text(
    "INSERT INTO hindsight_events (ns, record_id, kind, at, detail) "
    f"SELECT p.ns, p.record_id, p.kind, p.now, p.detail FROM {_unnest(_EVENT_COLUMNS)}"
)


def _columns(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Each column's values as one text[] literal (``None`` stays NULL): one parameter
    per column, typed even when all its values are NULL. A literal is one string for
    psycopg to send: dumping lists element by element was a third of a batch insert's
    client work."""
    out: dict[str, str] = {}
    for name, typ in columns:
        values = [r[name] for r in rows]
        if typ.endswith("[]"):  # each row's array as its own literal, quoted as a cell
            cells: list[str | None] = [array_literal(v) for v in values]
        elif typ == "boolean":
            cells = [None if v is None else ("t" if v else "f") for v in values]
        elif typ == "timestamptz":
            cells = [None if v is None else v.isoformat() for v in values]
        else:
            cells = [None if v is None else str(v) for v in values]
        out[name] = array_literal(cells)
    return out


def insert_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """:data:`INSERT_ROWS`'s parameters from one dict per record, keyed by the
    columns (``embedding``: a ``vectors.vector_param``, all of one dimension)."""
    embedding, dim = Float4Array.joined([r["embedding"] for r in rows])
    return {**_columns(rows, _INSERT_COLUMNS), "embedding": embedding, "dim": dim}


def merge_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """:data:`MERGE_ROWS`'s parameters from one dict per merged-into record (``ns``,
    ``id``, ``added``, ``critical``, ``importance``, ``scenes``, ``now``)."""
    return _columns(rows, _MERGE_COLUMNS)


def event_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """:data:`EVENT_ROWS`'s parameters from one dict per event (``ns``, ``record_id``,
    ``kind``, ``now``, ``detail``: JSON text)."""
    return _columns(rows, _EVENT_COLUMNS)
