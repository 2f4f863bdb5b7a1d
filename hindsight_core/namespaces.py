"""Namespaces: validation, the stored key form, and display.

A namespace is a tuple of labels such as ``("acme", "agent")``; it is stored as
one text key (labels joined by ``\\x1f``) and shown to people as ``acme/agent``.
"""

from __future__ import annotations

from .errors import ValidationError

NS_SEPARATOR = "\x1f"
"""Joins namespace labels into one text key; forbidden inside a label."""
MAX_LABEL_CHARS = 200
MAX_NAMESPACE_DEPTH = 16

Namespace = tuple[str, ...]


def validate_namespace(namespace: object, *, field: str = "namespace") -> Namespace:
    """Return the namespace as a tuple of labels, or raise naming what is wrong.

    A namespace is a non-empty sequence of non-empty strings, e.g. ``("acme", "agent")``;
    a single string is taken as a one-label namespace.
    """
    if isinstance(namespace, str):
        namespace = (namespace,)
    if not isinstance(namespace, list | tuple) or not namespace:
        raise ValidationError(
            f"{field} must be a non-empty tuple of strings, e.g. ('acme', 'agent'); "
            f"got {namespace!r}",
            field=field,
        )
    if len(namespace) > MAX_NAMESPACE_DEPTH:
        raise ValidationError(
            f"{field} has {len(namespace)} labels; at most {MAX_NAMESPACE_DEPTH} are allowed",
            field=field,
        )
    for i, label in enumerate(namespace):
        if not isinstance(label, str):
            raise ValidationError(
                f"{field}[{i}] must be a string, got {type(label).__name__}", field=field
            )
        if not label.strip():
            raise ValidationError(f"{field}[{i}] is empty", field=field)
        if "\x00" in label or NS_SEPARATOR in label:
            raise ValidationError(
                f"{field}[{i}] contains a control character (NUL or \\x1f)", field=field
            )
        if len(label) > MAX_LABEL_CHARS:
            raise ValidationError(
                f"{field}[{i}] is {len(label)} characters; at most {MAX_LABEL_CHARS}",
                field=field,
            )
    return tuple(namespace)


def ns_key(namespace: Namespace) -> str:
    """The stored form of a namespace (labels joined by ``\\x1f``)."""
    return NS_SEPARATOR.join(namespace)


def ns_from_key(key: str) -> Namespace:
    """Inverse of :func:`ns_key`."""
    return tuple(key.split(NS_SEPARATOR))


def show_namespace(namespace: Namespace | str) -> str:
    """A namespace for people and messages: ``acme/agent`` (as the CLI takes it).

    Accepts the tuple or its stored key.
    """
    labels = ns_from_key(namespace) if isinstance(namespace, str) else namespace
    return "/".join(labels)
