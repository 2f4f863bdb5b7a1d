"""SQL for versions of a lesson (migration 0011; ``memory/versions.py`` runs it).

A chain of versions shares ``lineage`` (its first version's id); ``version`` counts
along it; ``supersedes`` / ``superseded_by`` link each version to its neighbours. The
head is the chain's version with no ``superseded_by``.
"""

from __future__ import annotations

import sqlalchemy as sa

from .experiences_sql import SELECT_RECORD, T

# The head of the chain of :id (the record itself when it was never superseded), its
# row locked. Run after the namespace lock, which every superseding writer takes
# first: two writers superseding one lesson see one head after the other.
HEAD_FOR_UPDATE = sa.text(
    f"""
    {SELECT_RECORD}
    WHERE e.ns = :ns AND e.superseded_by IS NULL AND (e.id = :id OR e.lineage = (
        SELECT x.lineage FROM {T} x WHERE x.ns = :ns AND x.id = :id))
    ORDER BY e.version DESC, e.created_at DESC, e.id LIMIT 1
    FOR UPDATE OF e
    """
)

# Whether :id exists at all (to tell "no record" from "a chain without a live head").
EXISTS = sa.text(f"SELECT id FROM {T} WHERE ns = :ns AND id = :id")

# The old head: superseded by :new (guarded: a head superseded meanwhile updates no
# row, and the caller fails instead of forking the chain).
MARK_SUPERSEDED = sa.text(
    f"""
    UPDATE {T} SET superseded_by = :new, superseded_at = :now, superseded_reason = :reason,
        superseded_actor = :actor, lineage = :lineage, updated_at = :now
    WHERE ns = :ns AND id = :old AND superseded_by IS NULL
    RETURNING id
    """
)

# The new version's place in the chain (its row was inserted as any record's).
LINK_NEW = sa.text(
    f"UPDATE {T} SET supersedes = :old, lineage = :lineage, version = :version "
    "WHERE ns = :ns AND id = :new"
)

# Every version of the chain of :id, oldest first.
HISTORY = sa.text(
    f"""
    {SELECT_RECORD}
    WHERE e.ns = :ns AND (e.id = :id OR e.lineage = (
        SELECT x.lineage FROM {T} x WHERE x.ns = :ns AND x.id = :id))
    ORDER BY e.version, e.created_at, e.id
    """
)

# Imported records' places in their chains (export lines carry them), one statement.
RESTORE_LINKS = sa.text(
    f"""
    UPDATE {T} e SET version = p.version, lineage = p.lineage, supersedes = p.supersedes,
        superseded_by = p.superseded_by, superseded_at = p.superseded_at,
        superseded_reason = p.superseded_reason, superseded_actor = p.superseded_actor
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS p(
        ns text, id uuid, version int, lineage uuid, supersedes uuid, superseded_by uuid,
        superseded_at timestamptz, superseded_reason text, superseded_actor text)
    WHERE e.ns = p.ns AND e.id = p.id
    """
)
