"""Which texts of an item value are embedded: JSON paths, as LangGraph's stores read them.

Paths: ``"a.b"``, ``"items[0]"``, ``"items[-1]"``, ``"items[*].text"``, ``"*"``,
``"{title,meta.author}"``, and ``"$"`` for the whole value. Strings, numbers and
booleans are embedded as ``str(x)``; lists and objects as sorted JSON; a path that
does not exist yields nothing. A path yielding several texts gives fields
``path.0``, ``path.1``, ... (the field names LangGraph's PostgresStore uses).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ..text import tokens


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False)


@lru_cache(maxsize=512)
def tokenize(path: str) -> tuple[str, ...]:
    """Split a path on dots, keeping ``[..]`` and ``{..}`` groups whole."""
    out: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(path):
        char = path[i]
        if char in "[{":
            if current:
                out.append("".join(current))
                current = []
            close = "]" if char == "[" else "}"
            depth, j = 1, i + 1
            while j < len(path) and depth:
                depth += (path[j] == char) - (path[j] == close)
                j += 1
            out.append(path[i:j])
            i = j
            continue
        if char == ".":
            if current:
                out.append("".join(current))
                current = []
        else:
            current.append(char)
        i += 1
    if current:
        out.append("".join(current))
    return tuple(out)


def _leaf(obj: Any) -> list[str]:
    if isinstance(obj, str | int | float | bool):
        return [str(obj)]
    if isinstance(obj, list | dict):
        return [_dumps(obj)]
    return []


def _walk(obj: Any, toks: tuple[str, ...], pos: int) -> list[Any]:
    """The objects at ``toks[pos:]`` below ``obj`` (nulls too: :func:`_objects_at` keeps
    those with a text)."""
    if pos >= len(toks):
        return [obj]
    tok = toks[pos]
    out: list[Any] = []
    if tok.startswith("[") and tok.endswith("]"):
        if not isinstance(obj, list):
            return []
        index = tok[1:-1]
        if index == "*":
            for element in obj:
                out.extend(_walk(element, toks, pos + 1))
            return out
        try:
            idx = int(index)
        except ValueError:
            return []
        idx = idx + len(obj) if idx < 0 else idx
        return _walk(obj[idx], toks, pos + 1) if 0 <= idx < len(obj) else []
    if tok.startswith("{") and tok.endswith("}"):
        if not isinstance(obj, dict):
            return []
        for name in (f.strip() for f in tok[1:-1].split(",")):
            current: Any = obj
            for part in tokenize(name):
                current = current.get(part) if isinstance(current, dict) else None
                if current is None:
                    break
            if current is not None:
                out.append(current)
        return out
    if tok == "*":
        values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ()
        for element in values:
            out.extend(_walk(element, toks, pos + 1))
        return out
    if isinstance(obj, dict) and tok in obj:
        return _walk(obj[tok], toks, pos + 1)
    return []


def _objects_at(value: Mapping[str, Any], path: str) -> list[Any]:
    """The objects ``path`` finds in ``value`` that have a text (see :func:`_leaf`)."""
    obj = dict(value) if not isinstance(value, dict) else value
    if not path or path == "$":
        return [obj]
    return [o for o in _walk(obj, tokenize(path), 0) if _leaf(o)]


def texts_at(value: Mapping[str, Any], path: str) -> list[str]:
    """Texts found at ``path`` in ``value``."""
    return [_leaf(o)[0] for o in _objects_at(value, path)]


def field_texts(
    value: Mapping[str, Any], paths: tuple[str, ...] | list[str]
) -> list[tuple[str, str]]:
    """``(field name, text)`` pairs for every path; see the module docstring."""
    return [(name, text) for name, text, _ in indexed_fields(value, paths)]


# A leaf of at most this many search tokens is a label: a name, a role, a tag, an id.
LABEL_MAX_TOKENS = 3


def labels(obj: Any) -> frozenset[str]:
    """The search tokens (``text.tokens``) of the labels in ``obj``: its leaves (strings,
    numbers, booleans, at any depth) of at most :data:`LABEL_MAX_TOKENS` tokens.

    A label says who or what the item is about ({"speaker": "Melanie", ...},
    {"role": "user"}, {"tags": ["billing"]}), where the same word in a sentence may be
    said in passing; item search counts a query term matching one as more specific than
    its document frequency says (``storage.fulltext_sql.bm25_sql``)."""
    out: set[str] = set()
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
        elif isinstance(o, str | int | float | bool):
            toks = tokens(str(o))
            if len(toks) <= LABEL_MAX_TOKENS:
                out.update(toks)
    return frozenset(out)


def indexed_fields(
    value: Mapping[str, Any], paths: tuple[str, ...] | list[str]
) -> list[tuple[str, str, frozenset[str]]]:
    """``(field name, text, labels)`` for every path: :func:`field_texts` with the
    search tokens of the labels each field's text holds (:func:`labels`). Only a field
    holding an object or a list has labels: a field that is one string is the text
    itself, however short (an index on ``"title"`` ranks titles by their words)."""
    out: list[tuple[str, str, frozenset[str]]] = []
    for path in paths:
        objs = _objects_at(value, path)
        names = [path] if len(objs) == 1 else [f"{path}.{i}" for i in range(len(objs))]
        out.extend(
            (n, _leaf(o)[0], labels(o) if isinstance(o, dict | list) else frozenset())
            for n, o in zip(names, objs, strict=True)
        )
    return out
