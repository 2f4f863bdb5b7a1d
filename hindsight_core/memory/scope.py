"""The namespaces one search reads (sharing, docs/sharing.md): checks, no I/O.

``search(..., namespaces=[...])`` reads several namespaces at once: an agent's own and
those it was granted (a team's, a sibling agent's). An entry is a namespace (a tuple
of labels, or a string of labels joined by ``/`` as the CLI and MCP take them), or a
prefix: an entry whose last label is ``*`` (``"acme/*"``, ``("acme", "*")``) stands
for that namespace and every namespace under it (``acme``, ``acme/a``, ``acme/b/c``;
not ``acmex/a``). :class:`ReadSet` is the checked form the statements take
(``storage.sharing_sql``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError
from ..models import NS_SEPARATOR, Namespace, ns_key, show_namespace, validate_namespace
from ..storage.fulltext_sql import array_literal

MAX_READ_ENTRIES = 100
MAX_BY_CHARS = 200
WILDCARD = "*"


@dataclass(frozen=True)
class ReadSet:
    """A checked set of namespaces: exact namespaces and prefixes, as stored keys.

    Attributes:
        exact: keys of namespaces read as they are (sorted, none under a prefix).
        prefixes: keys of namespaces read with everything under them (sorted, none
            under another).
    """

    exact: tuple[str, ...]
    prefixes: tuple[str, ...]

    def params(self) -> dict[str, Any]:
        """The statement parameters of ``storage.sharing_sql.NS_SET``: the exact keys
        (a prefix's own namespace among them) and, per prefix, the key range of the
        namespaces under it (``[prefix + \\x1f, prefix + \\x20)``: labels are joined by
        ``\\x1f``, and keys compare byte by byte, ``COLLATE "C"``)."""
        return {
            "ns_exact": array_literal([*self.exact, *self.prefixes]),
            "ns_lo": array_literal([p + NS_SEPARATOR for p in self.prefixes]),
            "ns_hi": array_literal([p + chr(ord(NS_SEPARATOR) + 1) for p in self.prefixes]),
        }

    def covers(self, key: str) -> bool:
        """Whether the namespace stored as ``key`` is in the set."""
        return key in self.exact or any(
            key == p or key.startswith(p + NS_SEPARATOR) for p in self.prefixes
        )

    def show(self) -> str:
        """The set for people and messages: ``acme/agent-a, acme/team/*``."""
        return ", ".join(
            [show_namespace(k) for k in self.exact]
            + [show_namespace(p) + "/*" for p in self.prefixes]
        )


def _entry(value: object, field: str) -> tuple[Namespace, bool]:
    """One entry: its namespace and whether it is a prefix (its last label ``*``)."""
    labels: object = tuple(value.split("/")) if isinstance(value, str) else value
    if isinstance(labels, list | tuple) and labels and labels[-1] == WILDCARD:
        if len(labels) == 1:
            raise ValidationError(
                f"{field} is '*' alone, which would read every namespace: name a prefix, "
                "e.g. 'acme/*'",
                field=field,
            )
        labels, prefix = tuple(labels[:-1]), True
    else:
        prefix = False
    namespace = validate_namespace(labels, field=field)
    if WILDCARD in namespace:
        raise ValidationError(
            f"{field}: '*' may only be the last label (a prefix), got {value!r}", field=field
        )
    return namespace, prefix


def read_set(namespaces: object, *, field: str = "namespaces") -> ReadSet:
    """Check ``namespaces`` (a sequence of entries, see the module docstring; one
    string is one entry) and return it as a :class:`ReadSet`.

    Raises:
        ValidationError: not a sequence, empty, too long, or an entry is malformed
            (named ``namespaces[i]``), a lone ``*`` among them.
    """
    if isinstance(namespaces, str):
        namespaces = [namespaces]
    if not isinstance(namespaces, Sequence) or not namespaces:
        raise ValidationError(
            f"{field} must be a non-empty list of namespaces, e.g. "
            f"['acme/agent-a', 'acme/shared/*']; got {namespaces!r}",
            field=field,
        )
    if len(namespaces) > MAX_READ_ENTRIES:
        raise ValidationError(
            f"{field} has {len(namespaces)} entries; at most {MAX_READ_ENTRIES} (a prefix "
            "such as 'acme/*' stands for many)",
            field=field,
        )
    exact: set[str] = set()
    prefixes: set[str] = set()
    for i, value in enumerate(namespaces):
        namespace, prefix = _entry(value, f"{field}[{i}]")
        (prefixes if prefix else exact).add(ns_key(namespace))
    # A prefix under another prefix, or a namespace under one, adds nothing.
    outer = ReadSet((), tuple(sorted(prefixes)))
    kept = tuple(p for p in outer.prefixes if not ReadSet((), tuple(prefixes - {p})).covers(p))
    under = ReadSet((), kept)
    return ReadSet(tuple(sorted(k for k in exact if not under.covers(k))), kept)


def check_scope(namespace: object, namespaces: object) -> ReadSet | None:
    """The read set of a search given ``namespace=`` or ``namespaces=`` (``None``: one
    namespace, the given or default one).

    Raises:
        ValidationError: both were given, or ``namespaces`` is malformed.
    """
    if namespaces is None:
        return None
    if namespace is not None:
        raise ValidationError(
            "give namespace or namespaces, not both: namespaces lists every namespace "
            "read (the agent's own among them)",
            field="namespaces",
        )
    return read_set(namespaces)


def check_by(by: object, ns: str) -> str:
    """Who gives feedback (``mark_used``'s ``by``): free text naming a person, an agent
    or an MCP token, at most ``MAX_BY_CHARS``; ``None``: the namespace ``ns`` (a key)
    shown as ``acme/agent-a``."""
    if by is None:
        return show_namespace(ns)
    if not isinstance(by, str) or not by.strip() or "\x00" in by:
        raise ValidationError(
            "by must be a non-empty string naming who gives the feedback, or None",
            field="by",
        )
    if len(by) > MAX_BY_CHARS:
        raise ValidationError(f"by is {len(by)} characters; at most {MAX_BY_CHARS}", field="by")
    return by.strip()


__all__ = ["MAX_BY_CHARS", "MAX_READ_ENTRIES", "ReadSet", "check_by", "check_scope", "read_set"]
