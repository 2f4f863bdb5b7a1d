"""SQL for value filters on items (``$eq $ne $gt $gte $lt $lte``).

Numbers compare as numbers and strings as text (LangGraph's PostgresStore compares
both as text, so ``10 < 9`` there); a dotted key is a literal top-level key when
one exists, else a nested path.
"""

from __future__ import annotations

import json
from typing import Any, Literal

Op = Literal["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]
_CMP = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
FilterSpec = tuple[tuple[str, Op, str], ...]
"""(key, operator, kind) with kind 'json', 'number' or 'text'; values are bound apart."""


def _field(key: str, i: int) -> str:
    if "." in key:  # a literal top-level key wins, else the nested path
        return f"COALESCE(i.value -> CAST(:fk{i} AS text), i.value #> CAST(:fp{i} AS text[]))"
    return f"(i.value -> CAST(:fk{i} AS text))"


def filter_conditions(spec: FilterSpec) -> list[str]:
    """SQL for value filters; numbers compare as numbers, strings as text."""
    out = []
    for i, (key, op, kind) in enumerate(spec):
        e = _field(key, i)
        if op in ("$eq", "$ne"):
            out.append(f"{e} {'=' if op == '$eq' else '!='} CAST(:fv{i} AS jsonb)")
        elif kind == "number":
            out.append(
                f"(CASE WHEN jsonb_typeof({e}) = 'number' THEN CAST({e} AS numeric) END)"
                f" {_CMP[op]} CAST(:fv{i} AS numeric)"
            )
        elif kind == "text":
            out.append(
                f"(CASE WHEN jsonb_typeof({e}) = 'string' THEN {e} #>> '{{}}' END)"
                f" {_CMP[op]} CAST(:fv{i} AS text)"
            )
        else:
            out.append(f"({e} #>> '{{}}') {_CMP[op]} CAST(:fv{i} AS text)")
    return out


def filter_params(spec: FilterSpec, values: list[Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for i, ((key, op, kind), value) in enumerate(zip(spec, values, strict=True)):
        params[f"fk{i}"] = key
        if "." in key:
            params[f"fp{i}"] = key.split(".")
        if op in ("$eq", "$ne"):
            params[f"fv{i}"] = json.dumps(value)
        elif kind == "number":
            params[f"fv{i}"] = str(value)
        elif kind == "text":
            params[f"fv{i}"] = value
        else:
            params[f"fv{i}"] = json.dumps(value)
    return params
