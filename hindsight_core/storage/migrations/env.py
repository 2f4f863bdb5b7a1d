"""Alembic environment: always run on a connection handed over by ``storage.migrate``."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table="hindsight_alembic_version")
with context.begin_transaction():
    context.run_migrations()
