"""What a tool call is made of, and what changed between two calls.

The evidence (``findings``) compares a failed call with the one that worked: by its
program (``shell: git``, not just ``shell``), its argument parts (the words of a
command line, the keys and values of a dict) and, per argument, the change in words
(``port: 5433 -> 5432``, ``cmd: added --user``).
"""

from __future__ import annotations

import json
from typing import Any

from .rules import _Call

_SHELLS = frozenset("shell bash sh zsh run exec terminal cmd powershell run_command".split())
COMMAND_KEYS = ("cmd", "command", "script", "commandline", "command_line")


def command_line(call: _Call) -> str | None:
    """The command line of a shell-like call, or None."""
    for key in COMMAND_KEYS:
        value = call.args.get(key)
        if isinstance(value, str) and value.split():
            return value
    if call.tool.lower() in _SHELLS:
        return next((v for v in call.args.values() if isinstance(v, str) and v.split()), None)
    return None


def program(call: _Call) -> str:
    """The tool, with the program of a command line (``shell: git``)."""
    command = command_line(call)
    return f"{call.tool}: {command.split()[0]}" if command else call.tool


def render(call: _Call) -> str:
    return f"{call.tool} {json.dumps(call.args, ensure_ascii=False)}"[:400]


def _flat(value: Any) -> list[str]:
    """A value's parts: the words of a command line, the keys and values of a dict."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in (str(k), *_flat(v))]
    if isinstance(value, list):
        return [p for v in value for p in _flat(v)]
    if isinstance(value, str):
        return [w.strip(",;") for w in value.split()] or [value]
    return [json.dumps(value)]


def arg_values(args: dict[str, Any]) -> list[str]:
    """The parts of a call's argument values (not its top-level keys)."""
    return [p for v in args.values() for p in _flat(v)]


def arg_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(added, removed)``: the argument parts only ``new`` has, and only ``old`` has."""
    added: list[str] = []
    removed: list[str] = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        pa = _flat(a) if a is not None else []
        pb = _flat(b) if b is not None else []
        if a is None:
            pb = [key, *pb]
        if b is None:
            pa = [key, *pa]
        gone = [p for p in pa if p not in pb]
        come = [p for p in pb if p not in pa]
        if not gone and not come and isinstance(a, str) and isinstance(b, str):
            # same words, other spacing: name what the whitespace was
            gone, come = _spacing(a), _spacing(b)
        removed.extend(p for p in gone if p not in removed)
        added.extend(p for p in come if p not in added)
    return added, removed


def describe_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``["port: 5433 -> 5432", "cmd: added --user"]``: what changed, per argument."""
    out = []
    for key in changed_keys(old, new):
        a, b = old.get(key), new.get(key)
        if isinstance(a, str) and isinstance(b, str) and (len(a.split()) > 1 or len(b.split()) > 1):
            added, removed = arg_changes({key: a}, {key: b})
            parts = [f"added {' '.join(added)}"] * bool(added)
            parts += [f"removed {' '.join(removed)}"] * bool(removed)
            out.append(f"{key}: " + "; ".join(parts))
        elif a is None:
            out.append(f"{key}: added {json.dumps(b, ensure_ascii=False)}")
        elif b is None:
            out.append(f"{key}: removed {json.dumps(a, ensure_ascii=False)}")
        else:
            out.append(
                f"{key}: {json.dumps(a, ensure_ascii=False)} -> {json.dumps(b, ensure_ascii=False)}"
            )
    return out


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return [str(k) for k in sorted(set(old) | set(new), key=str) if old.get(k) != new.get(k)]


def as_program(call: _Call) -> _Call:
    """The call under its program's name (``pip``, not ``shell``), for wording."""
    command = command_line(call)
    if not command:
        return call
    return _Call(tool=command.split()[0], args=call.args, failed=call.failed, error=call.error)


def _spacing(text: str) -> list[str]:
    out = []
    if "\t" in text:
        out.append("tabs")
    if "    " in text:
        out.append("spaces")
    return out
