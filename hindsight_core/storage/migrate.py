"""Schema set-up: Alembic migrations under an advisory lock, and the vector index.

``upgrade`` is safe to call from many processes at once: the first takes a
session-level advisory lock and migrates; the others wait on the lock and then
find nothing left to do.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from ..errors import DatabaseError, VectorExtensionMissingError
from .engine import NO_TIMEOUT, RESET_TIMEOUT, SET_SESSION_TIMEOUT, VECTOR_HELP

_MIGRATIONS = Path(__file__).parent / "migrations"
_LOCK_KEY = 0x48494E44  # "HIND": one lock for every Hindsight schema change
VERSION_TABLE = "hindsight_alembic_version"


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """The Alembic configuration of Hindsight's migrations, for ``alembic.command``
    calls other than :func:`upgrade` (a downgrade, say); ``connection``: run on it."""
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest migration shipped with this package."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def known_revisions() -> set[str]:
    """Every migration shipped with this package."""
    return {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def current_revision(connection: sa.Connection) -> str | None:
    """The migration the database is at (``None`` before the first one)."""
    ctx = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return ctx.get_current_revision()


def revision_at(url: str) -> str | None:
    """:func:`current_revision` of the database at ``url``, on a connection of its own.

    Raises:
        DatabaseError: the database cannot be reached or read.
    """
    from .engine import db_errors

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with db_errors(), engine.connect() as conn:
            return current_revision(conn)
    finally:
        engine.dispose()


def upgrade(connection: sa.Connection) -> None:
    """Bring the schema to the newest revision (idempotent, concurrency-safe).

    Runs on a connection outside any transaction of the caller's; commits.
    """
    if connection.in_transaction():
        connection.commit()
    available = connection.execute(
        sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    ).first()
    connection.commit()
    if available is None:
        raise VectorExtensionMissingError(VECTOR_HELP)
    connection.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _LOCK_KEY})
    try:
        connection.commit()
        current = current_revision(connection)
        if current is not None and current not in known_revisions():
            raise DatabaseError(
                f"the database schema is at revision {current}, newer than this Hindsight "
                f"knows (head {head_revision()}): it was migrated by a newer version. Upgrade "
                "the package (pip install -U agent-hindsight), or restore a backup taken "
                "before that upgrade (hindsight db restore)"
            )
        if current != head_revision():
            # A migration may build an index over every stored row (0006), as long as
            # the data needs: the configured statement timeout is for queries.
            connection.execute(SET_SESSION_TIMEOUT, NO_TIMEOUT)
            connection.commit()
            command.upgrade(alembic_config(connection), "head")
        connection.commit()
    finally:
        connection.rollback()
        connection.execute(RESET_TIMEOUT)
        connection.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _LOCK_KEY})
        connection.commit()
