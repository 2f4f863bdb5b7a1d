"""Operations on generic items and the index configuration, as plain data.

These mirror LangGraph's ``GetOp`` / ``PutOp`` / ``SearchOp`` / ``ListNamespacesOp``
without importing LangGraph: the adapter maps one onto the other.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from enum import Enum
from typing import Any, Literal

from .. import arguments
from ..arguments import MAX_OFFSET
from ..errors import ValidationError
from ..models import NS_SEPARATOR, Namespace, ns_key, reject_nul
from ..storage.items_sql import Distance, IndexKind, VectorSpec, VectorType

Ranking = Literal["vector", "hybrid"]


@dataclass(frozen=True, slots=True)
class GetItem:
    """Read one item; ``refresh_ttl`` extends its life if it has a TTL."""

    namespace: Namespace
    key: str
    refresh_ttl: bool = True


@dataclass(frozen=True, slots=True)
class PutItem:
    """Store (``value`` a mapping) or delete (``value=None``) one item.

    Attributes:
        index: ``None`` embeds the index's default fields, ``False`` nothing, or a list
            of JSON paths (``"a.b"``, ``"items[*].text"``, ``"{a,b}"``, ``"$"``).
        ttl: minutes (fractional allowed) until it expires; ``None`` never.
    """

    namespace: Namespace
    key: str
    value: Mapping[str, Any] | None
    index: Literal[False] | list[str] | tuple[str, ...] | None = None
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class SearchItems:
    """Items under a namespace prefix, filtered, optionally ranked by a query."""

    namespace_prefix: Namespace
    query: str | None = None
    filter: Mapping[str, Any] | None = None
    limit: int = 10
    offset: int = 0
    refresh_ttl: bool = True
    ranking: Ranking | None = None  # None: the Items default


@dataclass(frozen=True, slots=True)
class ListNamespaces:
    """Namespaces holding items; conditions are ("prefix"|"suffix", labels), '*' = any label."""

    conditions: tuple[tuple[Literal["prefix", "suffix"], Namespace], ...] = ()
    max_depth: int | None = None
    limit: int = 100
    offset: int = 0


ItemOp = GetItem | PutItem | SearchItems | ListNamespaces


@dataclass(frozen=True)
class ItemIndex:
    """How item values are embedded and searched.

    Attributes:
        dims: vector dimension of the embedder.
        fields: JSON paths embedded by default; ``"$"`` is the whole value.
        distance: ``cosine``, ``inner_product`` or ``l2`` (scores as PostgresStore reports).
        vector_type: ``vector`` or ``halfvec`` (half-precision index).
        kind: ``hnsw``, ``ivfflat`` or ``flat`` (exact scan, no index).
        params: index parameters: ``m``, ``ef_construction`` (hnsw), ``lists`` (ivfflat).
    """

    dims: int
    fields: tuple[str, ...] = ("$",)
    distance: Distance = "cosine"
    vector_type: VectorType = "vector"
    kind: IndexKind = "hnsw"
    params: tuple[tuple[str, int], ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.dims, int) or isinstance(self.dims, bool) or self.dims < 1:
            raise ValidationError(
                f"index dims must be a positive integer, got {self.dims!r}", field="index.dims"
            )
        for name, value, allowed in (
            ("distance", self.distance, ("cosine", "inner_product", "l2")),
            ("vector_type", self.vector_type, ("vector", "halfvec")),
            ("kind", self.kind, ("hnsw", "ivfflat", "flat")),
        ):
            if value not in allowed:
                raise ValidationError(
                    f"index {name} must be one of {', '.join(allowed)}; got {value!r}",
                    field=f"index.{name}",
                )

    @property
    def spec(self) -> VectorSpec:
        return VectorSpec(self.dims, self.distance, self.vector_type, self.kind, self.params)


# ---------------------------------------------------------------------- validation


def check_namespace(
    namespace: object, *, field: str = "namespace", allow_empty: bool = False
) -> Namespace:
    """A namespace for items: a tuple of non-empty strings without NUL or ``\\x1f``."""
    if not isinstance(namespace, tuple | list):
        raise ValidationError(f"{field} must be a tuple of strings, got {namespace!r}", field=field)
    if not namespace and not allow_empty:
        raise ValidationError(f"{field} cannot be empty", field=field)
    for i, label in enumerate(namespace):
        if not isinstance(label, str) or not label:
            raise ValidationError(
                f"{field}[{i}] must be a non-empty string, got {label!r}", field=field
            )
        if "\x00" in label or NS_SEPARATOR in label:
            raise ValidationError(f"{field}[{i}] contains a NUL or \\x1f character", field=field)
    return tuple(namespace)


def _namespace_key(namespace: object) -> str:
    return ns_key(check_namespace(namespace))


namespace_key = arguments.remember_passed(_namespace_key)
""":func:`check_namespace` (non-empty), as its stored key (``models.ns_key``); remembered
for the tuples that passed: a batch of LangGraph's store test holds 15,000 puts in a
handful of namespaces, each otherwise checked label by label on every put."""


def check_page(limit: object, offset: object) -> tuple[int, int]:
    """An item search's or listing's paging: a ``limit`` of 0 is allowed (nothing)."""
    return arguments.check_page(limit, offset, min_limit=0, max_limit=MAX_OFFSET)


def check_ttl(ttl: object) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
        raise ValidationError(f"ttl must be a positive number of minutes, got {ttl!r}", field="ttl")
    return float(ttl)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, datetime | date | time):
        return obj.isoformat()
    if isinstance(obj, uuid.UUID | Decimal):
        return str(obj) if isinstance(obj, uuid.UUID) else float(obj)
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


# One encoder for every value: ``json.dumps`` with options builds a new one per call.
_ENCODER = json.JSONEncoder(default=_json_default, ensure_ascii=False, allow_nan=False)
_C_MAKE: Any = getattr(json.encoder, "c_make_encoder", None)
# The same encoder's C part, made once, without the markers of circular references: a
# call of ``encode`` builds one per value (half the time of a small value, and every
# put of a batch is encoded, superseded or not). A circular value recurses until
# RecursionError instead; the checking encoder then says what is wrong.
_FAST_ENCODE: Any = (
    None
    if _C_MAKE is None
    else _C_MAKE(
        None,
        _json_default,
        json.encoder.encode_basestring,
        None,
        _ENCODER.key_separator,
        _ENCODER.item_separator,
        False,
        False,
        False,
    )
)


def _encode(value: dict[Any, Any]) -> str:
    """``_ENCODER.encode(value)``: the same text, the same errors."""
    if _FAST_ENCODE is not None:
        try:
            return "".join(_FAST_ENCODE(value, 0))
        except RecursionError:
            pass  # circular or nested too deep: the checking encoder tells which
    return _ENCODER.encode(value)


def dump_value(value: object, key: str) -> str:
    """The JSON text stored for an item value (must be a mapping)."""
    if type(value) is not dict and not isinstance(value, Mapping):  # (dict: no ABC check)
        raise ValidationError(
            f"value of item {key!r} must be a mapping, got {type(value).__name__}", field="value"
        )
    try:
        text = _encode(value if type(value) is dict else dict(value))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"value of item {key!r} is not JSON: {exc}", field="value") from None
    if "\\u0000" in text:  # a NUL character (JSON escapes it): jsonb cannot hold one
        try:
            reject_nul(value, "value")
        except ValueError as exc:
            raise ValidationError(f"item {key!r}: {exc}", field="value") from None
    return text
