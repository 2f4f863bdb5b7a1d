"""Vectors as statement parameters: ``real[]`` in PostgreSQL's binary format.

A vector travels as a one-dimensional float4 array, built with numpy and cast to
``vector`` in SQL (pgvector casts ``real[]`` to ``vector``). Formatting 384 numbers
as pgvector's text literal cost as much in Python as the server then spent parsing it,
for every vector of a ``write_many`` and every recall. The array's
type (``float4[]``) is built into PostgreSQL, so its OID is fixed, unlike pgvector's
own types, whose OIDs differ from one database to the next.

A batch of vectors is one flat array; :func:`unpack_sql` slices it back into vectors.
:data:`ADAPTERS`, the adapters of Hindsight's connections, also read json/jsonb
columns with a leaner decoder (:func:`_json_loads`).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
import sqlalchemy as sa
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format
from psycopg.types.json import set_json_loads

from ..embeddings.base import as_matrix

_FLOAT4_OID = 700
_FLOAT4_ARRAY_OID = 1021


class Float4Array:
    """Numbers to send as a ``real[]`` parameter (binary, encoded once)."""

    __slots__ = ("payload", "size")

    def __init__(self, values: Sequence[float] | np.ndarray) -> None:
        flat = np.asarray(values, dtype=np.float32).ravel()
        # Binary array: ndim, has-nulls, element type, then (length, lower bound) per
        # dimension, then (byte length, value) per element.
        cells = np.empty(flat.size, dtype=[("len", ">i4"), ("value", ">f4")])
        cells["len"] = 4
        cells["value"] = flat
        self.size = int(flat.size)
        if not self.size:  # an empty array has no dimensions
            self.payload = struct.pack(">iii", 0, 0, _FLOAT4_OID)
            return
        self.payload = struct.pack(">iiiii", 1, 0, _FLOAT4_OID, self.size, 1) + cells.tobytes()

    def __repr__(self) -> str:
        return f"Float4Array(<{self.size} numbers>)"

    @classmethod
    def joined(cls, arrays: Sequence[Float4Array]) -> tuple[Float4Array, int]:
        """One flat array of several of the same length (for slicing back per row,
        see :func:`vectors_param`), and that length; joined from the encoded bytes."""
        dim = arrays[0].size if arrays else 0
        if any(a.size != dim for a in arrays):
            raise ValueError("vectors of different lengths cannot be joined")
        out = cls(())
        if dim:
            out.size = dim * len(arrays)
            out.payload = struct.pack(">iiiii", 1, 0, _FLOAT4_OID, out.size, 1) + b"".join(
                a.payload[20:] for a in arrays
            )
        return out, dim


class _Float4ArrayDumper(Dumper):
    format = Format.BINARY
    oid = _FLOAT4_ARRAY_OID

    def dump(self, obj: Float4Array) -> bytes:
        return obj.payload


# Hindsight's connections only (not process-wide, which would change every other
# psycopg user's adaptation): engines it creates connect with this map as their
# context (``storage.engine``); engines given to it get the dumper on checkout
# (:func:`adopt_engine`).
ADAPTERS = AdaptersMap(psycopg.adapters)
ADAPTERS.register_dumper(Float4Array, _Float4ArrayDumper)

_JSON = json.JSONDecoder()


def _json_loads(data: str | bytes) -> Any:
    # json/jsonb text from the server: UTF-8, no surrounding whitespace. ``json.loads``
    # of bytes first detects their encoding, for every small document (a record's
    # ``source``, five or more per recall), which costs more than the decoding itself.
    return _JSON.raw_decode(data if isinstance(data, str) else data.decode())[0]


set_json_loads(_json_loads, ADAPTERS)


def _on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    driver = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    driver.adapters.register_dumper(Float4Array, _Float4ArrayDumper)


def adopt_engine(engine: sa.Engine) -> None:
    """Make an engine Hindsight did not create send vector parameters (its connections
    get the dumper at each checkout; a sync engine, or an async engine's
    ``sync_engine``)."""
    if not sa.event.contains(engine, "checkout", _on_checkout):
        sa.event.listen(engine, "checkout", _on_checkout)


class QueryVector(list[float]):
    """A (cached) query vector that keeps its parameter, encoded once.

    Args:
        values: the vector.
        array: the same vector as a float32 array, if at hand (saves converting).
    """

    __slots__ = ("param",)

    def __init__(self, values: list[float], array: np.ndarray | None = None) -> None:
        super().__init__(values)
        self.param = Float4Array(values if array is None else array)


def vector_param(vector: Sequence[float] | np.ndarray) -> Float4Array:
    """One vector, for ``CAST(:param AS vector)``."""
    if isinstance(vector, QueryVector):
        return vector.param
    return Float4Array(vector)


def vectors_param(vectors: Sequence[Sequence[float]] | np.ndarray) -> Float4Array:
    """Many vectors of the same dimension, flattened, for :func:`unpack_sql` (or
    sliced by hand: vector ``i``, from 1, is elements ``(i - 1) * dim + 1 .. i * dim``)."""
    return Float4Array(as_matrix(vectors))


def unpack_sql(param: str, dim: int, count: str) -> str:
    """Rows ``(v vector(dim), i)``: the vectors of a :func:`vectors_param`, numbered
    from 1; ``count`` is the SQL for how many there are."""
    d = int(dim)
    return (
        f"SELECT CAST((CAST(:{param} AS real[]))[(g.i - 1) * {d} + 1 : g.i * {d}] "
        f"AS vector({d})) AS v, g.i FROM generate_series(1, {count}) AS g(i)"
    )
