"""Everything that touches PostgreSQL: SQL, engines, migrations, the embedded server.

No SQL lives outside this package.
"""
