"""What a caller may read and write: the grant of an MCP token (or of a stdio server).

A grant names the one namespace its holder writes (and always reads) and the
namespaces or prefixes it may read besides. It is parsed here from the token
settings, with no MCP import, so the inspector can show every token's grant.

Text form (``HINDSIGHT_MCP_TOKENS``, or the lines of ``HINDSIGHT_MCP_TOKENS_FILE``)::

    # entries are separated by new lines or commas; '#' starts a comment
    tokA=acme/agent-a;read=acme/shared,acme/agent-b;name=agent-a
    tokB=acme/agent-b;read=acme/*
    tokC=acme/shared

- ``token=namespace`` is an entry; options follow, each after ``;``: ``read=``
  (namespaces or ``prefix/*``, separated by commas) and ``name=`` (the token's
  label in feedback, version histories and the inspector; default
  ``mcp:<namespace>``).
- A comma-separated piece that holds no ``=`` (such as ``acme/agent-b`` above)
  continues the ``read=`` list of the entry before it. Every configuration written
  before read grants existed means what it meant.
- ``prefix/*`` grants the prefix and every namespace under it; ``*`` alone is
  refused (name the tree you mean).

JSON form (the whole setting or file is one object)::

    {"tokA": {"write": "acme/agent-a", "read": ["acme/shared", "acme/*"], "name": "agent-a"},
     "tokC": "acme/shared"}

Messages never show a token: an entry is named by its position, its name and the
namespace it writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from hindsight_core.errors import ConfigurationError, ValidationError
from hindsight_core.models import Namespace, validate_namespace
from hindsight_core.settings import Settings

from . import _http

T = TypeVar("T")

PREFIX = "*"
"""The last label of a read pattern that means "this prefix and everything under it"."""
MAX_NAME_CHARS = 100
MAX_READS = 99
"""Read patterns one grant may hold: with its own namespace, the core's limit on the
namespaces one search reads (``memory.scope.MAX_READ_ENTRIES``)."""
MAX_LABEL_CHARS = 200
"""The core's limit on who gave feedback (``memory.scope.MAX_BY_CHARS``; not imported:
that package loads the engine, which a stdio server imports only once it serves)."""
_OPTION = re.compile(r";\s*(read|name)\s*=", re.IGNORECASE)
_CONTINUES = re.compile(r"^[^=;]*;\s*(read|name)\s*=", re.IGNORECASE)


def show(pattern: Sequence[str]) -> str:
    """A namespace or read pattern as written in settings: ``acme/shared``, ``acme/*``."""
    return "/".join(pattern)


def parse_namespace(text: str, *, field: str = "namespace") -> Namespace:
    """``'acme/agent'`` -> ``('acme', 'agent')``, validated."""
    return validate_namespace(tuple(text.strip().split("/")), field=field)


def parse_pattern(value: object, *, field: str = "read") -> Namespace:
    """A read pattern: a namespace (``'acme/shared'``) or a prefix (``'acme/*'``).

    Raises:
        ValidationError: not a namespace, ``*`` other than as the last label, or
            ``*`` alone.
    """
    if isinstance(value, str):
        pattern = parse_namespace(value, field=field)
    elif isinstance(value, list | tuple):
        pattern = validate_namespace(tuple(value), field=field)
    else:
        raise ValidationError(f"{field} must be 'a/b' or 'a/*', got {value!r}", field=field)
    if PREFIX in pattern[:-1]:
        raise ValidationError(
            f"{field}: '*' may only be the last label: {show(pattern)}", field=field
        )
    if pattern == (PREFIX,):
        raise ValidationError(
            f"{field}: '*' alone would read everything: name a prefix such as acme/*",
            field=field,
        )
    return pattern


def matches(pattern: Namespace, namespace: Namespace) -> bool:
    """Whether ``namespace`` is ``pattern`` or, for ``prefix/*``, under the prefix."""
    if pattern[-1] == PREFIX:
        return namespace[: len(pattern) - 1] == pattern[:-1]
    return namespace == pattern


@dataclass(frozen=True)
class Grant:
    """What one caller may do: write ``write``, read it and the ``read`` patterns.

    Attributes:
        write: the one namespace written (and read).
        read: further namespaces or ``prefix/*`` patterns it may read, in the order given.
        name: the caller's label; ``None`` for the default ``mcp:<write>``.
    """

    write: Namespace
    read: tuple[Namespace, ...] = ()
    name: str | None = None

    @property
    def label(self) -> str:
        """Who gave feedback or superseded: the name, else ``mcp:<write namespace>``
        (cut to what the core records, for a namespace of many long labels)."""
        label = self.name or "mcp:" + show(self.write)
        return label if len(label) <= MAX_LABEL_CHARS else label[: MAX_LABEL_CHARS - 1] + "…"

    @property
    def shares(self) -> bool:
        """Whether anything besides the own namespace is readable."""
        return any(p != self.write for p in self.read)

    @property
    def readable(self) -> tuple[Namespace, ...]:
        """The own namespace first, then the read patterns (each once)."""
        return tuple(dict.fromkeys((self.write, *self.read)))

    def reads(self, namespace: Namespace) -> bool:
        """Whether ``namespace`` (a namespace, not a pattern) is readable."""
        return any(matches(p, namespace) for p in self.readable)

    def covers(self, pattern: Namespace) -> bool:
        """Whether everything ``pattern`` names is readable (a prefix only under a
        granted prefix: a granted namespace does not grant what is under it)."""
        if pattern[-1] != PREFIX:
            return self.reads(pattern)
        return any(p[-1] == PREFIX and matches(p, pattern[:-1]) for p in self.readable)

    def describe(self) -> str:
        """``acme/a (its own), acme/shared, acme/*`` for messages."""
        return ", ".join([show(self.write) + " (its own)", *(show(p) for p in self.read)])


def read_patterns(values: Iterable[str], *, source: str) -> tuple[Namespace, ...]:
    """Read patterns from ``--read`` options or ``HINDSIGHT_MCP_READ`` (commas split)."""
    out: list[Namespace] = []
    for value in values:
        for piece in value.split(","):
            if piece.strip():
                out.append(_checked(source, parse_pattern, piece, field="read"))
    return tuple(dict.fromkeys(out))


def stdio_grant(settings: Settings, namespace: str | None, read: Sequence[str] | None) -> Grant:
    """The grant of a stdio server (or HTTP with no tokens): ``--namespace`` /
    ``HINDSIGHT_NAMESPACE`` written, ``--read`` (or else ``HINDSIGHT_MCP_READ``) read."""
    write = parse_namespace(namespace or settings.namespace)
    if read:
        patterns = read_patterns(read, source="--read")
    else:
        patterns = read_patterns([settings.mcp_read or ""], source="HINDSIGHT_MCP_READ")
    return Grant(write, _few(patterns, "--read" if read else "HINDSIGHT_MCP_READ"))


def _checked(where: str, make: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``make(*args, **kwargs)``, its ValidationError as a ConfigurationError saying ``where``."""
    try:
        return make(*args, **kwargs)
    except ValidationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def _who(n: int, name: str | None = None, write: Namespace | None = None) -> str:
    """An entry named without its secret: ``token 2 (agent-a, writes acme/a)``."""
    parts = [p for p in (name, write and "writes " + show(write)) if p]
    return f"token {n}" + (f" ({', '.join(parts)})" if parts else "")


def _name(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{where}: name must be a non-empty string")
    name = value.strip()
    if len(name) > MAX_NAME_CHARS or any(ord(c) < 32 for c in name):
        raise ConfigurationError(
            f"{where}: name must be at most {MAX_NAME_CHARS} printable characters"
        )
    return name


class _Entry:
    """One text entry being read: ``token=ns;read=...;name=...``."""

    def __init__(self, n: int, token: str, rest: str, source: str) -> None:
        self.n, self.token, self.source = n, token, source
        self.name: str | None = None
        self.write: Namespace | None = None
        head, *options = _OPTION.split(rest)
        self.write = _checked(self.where, parse_namespace, head)
        self.read: list[Namespace] = []
        self.reading = False  # has a read= option: later pieces without '=' extend it
        self.options(options)

    @property
    def where(self) -> str:
        return f"{self.source}: {_who(self.n, self.name, self.write)}"

    def options(self, parts: list[str]) -> None:
        """``['read', 'acme/x', 'name', 'a']`` (what ``_OPTION.split`` leaves) applied."""
        for key, value in zip(parts[::2], parts[1::2], strict=True):
            if key.lower() == "name":
                self.name = _name(value, self.where)
            else:
                self.reading = True
                self.add(value)

    def add(self, text: str) -> None:
        self.read.append(_checked(self.where, parse_pattern, text, field="read"))

    def grant(self) -> Grant:
        assert self.write is not None  # set in __init__ (or it raised)
        return Grant(self.write, _few(self.read, self.where), self.name)


def _parse_text(text: str, source: str) -> dict[str, Grant]:
    entries: list[_Entry] = []
    for raw in text.splitlines():
        for piece in raw.split("#", 1)[0].split(","):
            piece = piece.strip()
            if not piece:
                continue
            if "=" not in piece or _CONTINUES.match(piece):
                # More of the read list before it (and maybe further options).
                last = entries[-1] if entries else None
                if last is None or not last.reading:
                    where = f"after {_who(last.n, last.name, last.write)}" if last else "token 1"
                    raise ConfigurationError(
                        f"{source}: {where}: expected 'token=acme/agent' (with ';read=ns,...' "
                        "to grant reads); a piece without '=' only continues a read= list"
                    )
                head, *options = _OPTION.split(piece)
                last.add(head)
                last.options(options)
                continue
            token, _, rest = piece.partition("=")
            n = len(entries) + 1
            if not token.strip() or not rest.strip():
                raise ConfigurationError(
                    f"{source}: {_who(n)}: expected 'token=acme/agent' (a token and a namespace)"
                )
            entries.append(_Entry(n, token.strip(), rest, source))
    return {e.token: e.grant() for e in entries}


def _parse_json(text: str, source: str) -> dict[str, Grant]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{source}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"{source}: JSON tokens must be an object of token -> grant")
    return {str(k): _json_grant(n, v, source) for n, (k, v) in enumerate(data.items(), 1)}


def _json_grant(n: int, value: object, source: str) -> Grant:
    where = f"{source}: {_who(n)}"
    if isinstance(value, str | list):
        return Grant(_checked(where, _namespace, value))
    if not isinstance(value, dict):
        raise ConfigurationError(
            f"{where}: expected 'acme/agent', a list of labels or "
            '{"write": "acme/agent", "read": [...], "name": "..."}'
        )
    unknown = sorted(set(value) - {"write", "read", "name"})
    if unknown:
        raise ConfigurationError(f"{where}: unknown key(s) {', '.join(unknown)}")
    name = _name(value["name"], where) if "name" in value else None
    if "write" not in value:
        raise ConfigurationError(f"{_where(source, n, name)}: 'write' (the namespace) is missing")
    write = _checked(_where(source, n, name), _namespace, value["write"])
    where = _where(source, n, name, write)
    reads = value.get("read", [])
    if isinstance(reads, str):
        reads = [reads]
    if not isinstance(reads, list):
        raise ConfigurationError(f"{where}: 'read' must be a list of 'a/b' or 'a/*'")
    patterns = [_checked(where, parse_pattern, r, field="read") for r in reads]
    return Grant(write, _few(patterns, where), name)


def _few(patterns: Iterable[Namespace], where: str) -> tuple[Namespace, ...]:
    """The patterns, each once; at most ``MAX_READS`` of them."""
    unique = tuple(dict.fromkeys(patterns))
    if len(unique) > MAX_READS:
        raise ConfigurationError(
            f"{where}: {len(unique)} read patterns; at most {MAX_READS} (a prefix such as "
            "acme/* reads a whole tree)"
        )
    return unique


def _where(source: str, n: int, name: str | None, write: Namespace | None = None) -> str:
    return f"{source}: {_who(n, name, write)}"


def _namespace(value: object) -> Namespace:
    if isinstance(value, list):
        return validate_namespace(tuple(value))
    if isinstance(value, str):
        return parse_namespace(value)
    raise ValidationError("a namespace must be 'a/b' or a list of labels", field="namespace")


def parse_tokens(text: str, *, source: str = "HINDSIGHT_MCP_TOKENS") -> dict[str, Grant]:
    """Token -> grant from the text or JSON form (see the module docstring).

    Raises:
        ConfigurationError: naming the entry (never its token) and what is wrong.
    """
    if text.lstrip()[:1] in ("{", "["):  # a JSON array is refused, with JSON's words
        return _parse_json(text, source)
    return _parse_text(text, source)


def load_tokens(settings: Settings) -> dict[str, Grant]:
    """All configured tokens: ``HINDSIGHT_MCP_TOKENS`` plus ``HINDSIGHT_MCP_TOKENS_FILE``
    (a token in both: the file's grant)."""
    tokens: dict[str, Grant] = {}
    if settings.mcp_tokens is not None:
        tokens.update(parse_tokens(settings.mcp_tokens.get_secret_value()))
    path = settings.mcp_tokens_file
    if path is not None:
        source = f"HINDSIGHT_MCP_TOKENS_FILE ({path})"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"{source}: cannot read: {exc.strerror}") from None
        tokens.update(parse_tokens(text, source=source))
    _http.check_tokens(tokens, source="HINDSIGHT_MCP_TOKENS")
    _check_names(tokens)
    return tokens


def _check_names(tokens: Mapping[str, Grant]) -> None:
    """Two tokens with one name could not be told apart in feedback and histories."""
    seen: dict[str, Grant] = {}
    for grant in tokens.values():
        if grant.name is not None and grant.name in seen:
            raise ConfigurationError(
                f"HINDSIGHT_MCP_TOKENS: two tokens are named {grant.name!r} (writing "
                f"{show(seen[grant.name].write)} and {show(grant.write)}): give each its own name"
            )
        if grant.name is not None:
            seen[grant.name] = grant


__all__ = [
    "Grant",
    "load_tokens",
    "matches",
    "parse_namespace",
    "parse_pattern",
    "parse_tokens",
    "read_patterns",
    "show",
    "stdio_grant",
]
