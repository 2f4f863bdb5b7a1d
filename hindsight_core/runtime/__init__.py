"""The flow runtime: how operations written once run on a sync or an async driver.

Every operation of the core (records in ``memory/``, generic items in ``items/``,
checkpoints in ``checkpoints/``, reflection in ``reflection/``) is a generator
("flow") that yields requests (SQL, embeddings, migrations) and receives their
results; the drivers here carry them out and hold all the I/O:

- ``flow.py``: the requests, with typed replies (``rows = yield from Sql(...)``);
- ``driver.py``: the one sync and the one async driver, every decision written once
  (transaction or warm connection, pipelined writes, retries);
- ``steps.py``: the drivers' steps (connect, execute, fetch, ...), typed objects;
- ``io_steps.py``: the drivers' I/O, one short method per kind of step, called or awaited;
- ``connections.py``: a pool's connections, with the warm autocommit ones kept for
  flows whose statements say they need no transaction;
- ``cursors.py``: how a warm connection runs a statement (raw cursor, ``$n`` text
  compiled once, its session's statement timeout);
- ``host.py``: the typed protocols a flow's host (``Memory``, ``AsyncMemory``)
  implements, through which the other modules run flows on it;
- ``routing.py``: reads sent to read replicas (``HINDSIGHT_READ_DATABASE_URLS``).
"""
