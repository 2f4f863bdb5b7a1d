"""The flow runtime: how operations written once run on a sync or an async driver.

Every operation of the core (records in ``memory/``, generic items in ``items/``,
checkpoints in ``checkpoints/``, task logs and reflection in ``reflection/``) is a
generator ("flow") that yields requests (SQL, embeddings, migrations) and receives
their results; the code here carries them out and holds all the I/O:

- ``flow.py``: the requests, with typed replies (``rows = yield from Sql(...)``);
- ``runner.py``: where a front end's operation runs, one runner per I/O style
  (``SyncRunner`` / ``AsyncRunner``: ``run``, ``run_read`` on a replica or the
  primary, ``run_write`` then the write position noted, ``call`` for operations of
  several runs); every front end binds each public method through it in one line;
- ``twin.py``: ``awaited``, how an async front end takes its sync twin's methods
  (one signature, docstring and body; the runner returns an awaitable there);
- ``driver.py``: the one sync and the one async driver of a flow, every decision
  written once (transaction or warm connection, pipelined writes, retries), and
  ``Plan``, the one generator stepper (the runner's calls and reflection use it too);
- ``steps.py``: the drivers' steps (connect, execute, fetch, ...), typed objects;
- ``io_steps.py``: the drivers' I/O, one short method per kind of step, called or awaited;
- ``connections.py``: a pool's connections, with the warm autocommit ones kept for
  flows whose statements say they need no transaction;
- ``cursors.py``: how a warm connection runs a statement (raw cursor, ``$n`` text
  compiled once, its session's statement timeout);
- ``host.py``: the typed context a flow reads (settings, embedder, clock, namespace
  key) and the host protocols ``Memory`` / ``AsyncMemory`` implement for the other
  modules;
- ``routing.py``: reads on read replicas (``HINDSIGHT_READ_DATABASE_URLS``).

Recall's caches (exact scan or ANN index per namespace; query terms too common to
generate keyword candidates) live beside recall, in ``memory/scan.py`` and
``memory/terms.py``.

Where to look, for a recall: its SQL is built in ``storage/recall_sql.py``
(``search_sql``) with its parameters from ``storage/hybrid_params.py``
(``recall_params``, pure); the flow that asks for it is ``_search_flow`` in
``memory/read_flows.py``; it runs through ``Memory.recall`` -> ``SyncRunner.call`` ->
``run_read`` (replica or primary) -> ``driver.run_sync`` (``AsyncRunner`` and
``driver.run_async`` for ``AsyncMemory``).

A new operation gets its sync and its async method like every other: write its flow
once (SQL in ``storage/``, logic in the flow), then one method on the sync front end
whose body returns one runner call, ``return self._runner.run_read(lambda:
self._x_flow(...), key)`` (``run_write`` for a write, ``run`` for the primary only,
``call`` for several runs), and one line on the async front end, ``x =
awaited(Memory.x)`` (``twin.py``); ``tests/_front.py`` runs it both ways.
"""
