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


def _walk(obj: Any, toks: tuple[str, ...], pos: int) -> list[str]:
    if pos >= len(toks):
        return _leaf(obj)
    tok = toks[pos]
    out: list[str] = []
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
                out.extend(_leaf(current))
        return out
    if tok == "*":
        values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ()
        for element in values:
            out.extend(_walk(element, toks, pos + 1))
        return out
    if isinstance(obj, dict) and tok in obj:
        return _walk(obj[tok], toks, pos + 1)
    return []


def texts_at(value: Mapping[str, Any], path: str) -> list[str]:
    """Texts found at ``path`` in ``value``."""
    obj = dict(value) if not isinstance(value, dict) else value
    if not path or path == "$":
        return [_dumps(obj)]
    return _walk(obj, tokenize(path), 0)


def field_texts(
    value: Mapping[str, Any], paths: tuple[str, ...] | list[str]
) -> list[tuple[str, str]]:
    """``(field name, text)`` pairs for every path; see the module docstring."""
    out: list[tuple[str, str]] = []
    for path in paths:
        texts = texts_at(value, path)
        if len(texts) == 1:
            out.append((path, texts[0]))
        else:
            out.extend((f"{path}.{i}", t) for i, t in enumerate(texts))
    return out
