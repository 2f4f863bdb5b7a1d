"""Hindsight: a memory of their own experience for LLM agents.

Quick start::

    from hindsight_core import Memory

    mem = Memory(("acme", "cleanup-agent"))
    mem.write({"scene": "file-cleanup", "trigger": "deleting files with dates in the name",
               "lesson": "Check the extension before deleting"})
    for hit in mem.search("clean up the downloads folder"):
        print(hit.record.lesson, hit.breakdown)
"""

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
from .memory import AsyncMemory, Memory, RecallResult
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
