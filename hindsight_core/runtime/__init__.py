"""The flow runtime: how operations written once run on a sync or an async driver.

Every operation of the core (records in ``memory/``, generic items in ``items/``,
checkpoints in ``checkpoints/``, reflection in ``reflection/``) is a generator
("flow") that yields requests (SQL, embeddings, migrations) and receives their
results; the drivers here carry them out and hold all the I/O:

- ``flow.py``: the requests and the transactional sync and async drivers;
- ``host.py``: the typed protocols a flow's host (``Memory``, ``AsyncMemory``)
  implements, through which the other modules run flows on it;
- ``fastpath.py``: warm autocommit connections for flows that need no transaction;
- ``scan.py``: exact scan or ANN index, decided per namespace and cached;
- ``terms.py``: query terms too common to generate keyword candidates, cached;
- ``routing.py``: reads sent to read replicas (``HINDSIGHT_READ_DATABASE_URLS``).
"""
