"""``BackgroundReflector``: reflection off the agent's thread, never in its way.

One worker thread takes trajectories from a queue and reflects on them with a
:class:`Reflector`. ``submit`` returns at once with a
:class:`concurrent.futures.Future`; whatever goes wrong ends up in the future's
result as ``skipped`` with the error (and in the log), never as an exception in
the agent. ``close`` lets the queue drain and stops the worker.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from typing import Any

from ..models import Namespace
from .reflector import ReflectionResult, Reflector
from .trajectory import Trajectory

log = logging.getLogger("hindsight.reflection")

_STOP = object()


class BackgroundReflector:
    """Runs :meth:`Reflector.reflect` on a worker thread.

    Args:
        reflector: does the work (its memory's connection pool is thread-safe).
        max_pending: ``submit`` blocks when this many reflections wait (0: no limit).

    Example:
        >>> bg = BackgroundReflector(Reflector(memory, llm))
        >>> future = bg.submit(trajectory)   # returns immediately
        >>> bg.close()                       # at shutdown: finishes the queue
    """

    def __init__(self, reflector: Reflector, *, max_pending: int = 0) -> None:
        self.reflector = reflector
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name="hindsight-reflector", daemon=True)
        self._thread.start()

    def submit(
        self, trajectory: Trajectory | dict[str, Any], namespace: Namespace | str | None = None
    ) -> Future[ReflectionResult]:
        """Queue a reflection; the future resolves to its :class:`ReflectionResult`."""
        future: Future[ReflectionResult] = Future()
        with self._lock:
            if self._closed:
                log.warning("reflection submitted after close(); skipped")
                future.set_result(
                    ReflectionResult(
                        skipped=True,
                        error="the background reflector is closed",
                        distiller=self.reflector.distiller,
                    )
                )
                return future
            self._queue.put((future, trajectory, namespace))
        return future

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is _STOP:
                    return
                future, trajectory, namespace = job
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = self.reflector.reflect(trajectory, namespace=namespace)
                except Exception as exc:  # background: report, never raise into the agent
                    log.exception("background reflection failed")
                    result = ReflectionResult(
                        skipped=True,
                        error=f"{type(exc).__name__}: {exc}",
                        distiller=self.reflector.distiller,
                    )
                future.set_result(result)
            finally:
                self._queue.task_done()

    @property
    def pending(self) -> int:
        """Reflections queued and not yet started (approximate)."""
        return self._queue.qsize()

    def close(self, timeout: float | None = None) -> None:
        """Finish every queued reflection, then stop the worker (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join(timeout)

    def __enter__(self) -> BackgroundReflector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
