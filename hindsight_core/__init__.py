"""Hindsight: a memory of their own experience for LLM agents.

Quick start::

    from hindsight_core import Memory

    mem = Memory(("acme", "cleanup-agent"))
    mem.write({"scene": "file-cleanup", "trigger": "deleting files with dates in the name",
               "lesson": "Check the extension before deleting"})
    for hit in mem.search("clean up the downloads folder"):
        print(hit.record.lesson, hit.breakdown)
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from .embeddings import CallableEmbedder, Embedder
    from .errors import (
        ConfigurationError,
        DatabaseBusyError,
        DatabaseError,
        DatabaseUnavailableError,
        EmbeddingError,
        EmbeddingModelMismatchError,
        HindsightError,
        ImportFormatError,
        LLMError,
        MissingDependencyError,
        NotFoundError,
        ValidationError,
        VectorExtensionMissingError,
    )
    from .memory import AsyncMemory, Feedback, Memory, RecallResult
    from .models import (
        Experience,
        ExperienceIn,
        Item,
        ItemHit,
        MaintenanceReport,
        ReindexReport,
        ScoreBreakdown,
        SearchHit,
        Source,
        Stats,
        WriteResult,
    )
    from .settings import Settings

# Each public name and the module it comes from, imported on first access (PEP 562):
# ``import hindsight_core`` costs nothing until a name is used, and a script that only
# reads a setting or catches an error never loads the database stack.
_EXPORTS = {
    "CallableEmbedder": "embeddings",
    "Embedder": "embeddings",
    "AsyncMemory": "memory",
    "Feedback": "memory",
    "Memory": "memory",
    "RecallResult": "memory",
    "Settings": "settings",
    **dict.fromkeys(
        (
            "ConfigurationError",
            "DatabaseBusyError",
            "DatabaseError",
            "DatabaseUnavailableError",
            "EmbeddingError",
            "EmbeddingModelMismatchError",
            "HindsightError",
            "ImportFormatError",
            "LLMError",
            "MissingDependencyError",
            "NotFoundError",
            "ValidationError",
            "VectorExtensionMissingError",
        ),
        "errors",
    ),
    **dict.fromkeys(
        (
            "Experience",
            "ExperienceIn",
            "Item",
            "ItemHit",
            "MaintenanceReport",
            "ReindexReport",
            "ScoreBreakdown",
            "SearchHit",
            "Source",
            "Stats",
            "WriteResult",
        ),
        "models",
    ),
}

if not _typing.TYPE_CHECKING:  # type checkers read the imports above instead

    def __getattr__(name: str) -> object:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_EXPORTS})


__version__ = "0.1.0"

__all__ = [
    "AsyncMemory",
    "CallableEmbedder",
    "ConfigurationError",
    "DatabaseError",
    "DatabaseBusyError",
    "DatabaseUnavailableError",
    "Embedder",
    "EmbeddingError",
    "EmbeddingModelMismatchError",
    "Experience",
    "ExperienceIn",
    "Feedback",
    "HindsightError",
    "ImportFormatError",
    "Item",
    "ItemHit",
    "LLMError",
    "MaintenanceReport",
    "Memory",
    "MissingDependencyError",
    "NotFoundError",
    "RecallResult",
    "ReindexReport",
    "ScoreBreakdown",
    "SearchHit",
    "Settings",
    "Source",
    "Stats",
    "ValidationError",
    "VectorExtensionMissingError",
    "WriteResult",
    "__version__",
]
