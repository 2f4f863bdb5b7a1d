"""A lesson built by rule from a user's correction, for when nothing the model wrote
passes the screen and no later call shows what changed.

The user's rule is the clause of the correction that says not to do something
("Don't delete installers", "依赖文件不要删除") or, failing that, an instruction
("Use my timezone"). The lesson turns it into advice tied to the call the user
corrected ("When using delete, never delete installers", "用 rm 时不要删除依赖文件"):
never the user's message again, and only when the user stated a rule at all (a
complaint alone, "that is wrong", gives none).
"""

from __future__ import annotations

import re
import unicodedata

_CLAUSES = re.compile(r"[,.;:!?，。；：！？\n]+")
_EN_NEGATION = re.compile(r"^(?:please\s+)?(?:don'?t|do not|never|stop)\s+(?P<rest>\w.*)$", re.I)
# instructions the user gives instead of a prohibition ("Use my timezone")
_EN_ORDER = re.compile(r"^(?:please\s+)?(?P<rest>(?:use|keep|always|only|ask|check)\b.*)$", re.I)
_ZH_NEGATION = re.compile(r"^(?P<obj>[^不别勿]*?)(?:千万别|不要|不能|不该|别|勿)(?P<rest>.+)$")
_EXAMPLES = re.compile(r"\s+(?:like|such as|e\.g\.)\s.*$", re.I)
_OWNER = ((r"\bmy\b", "the user's"), (r"\bme\b", "the user"), (r"\bI\b", "the user"))


def _clauses(text: str) -> list[str]:
    return [c.strip() for c in _CLAUSES.split(unicodedata.normalize("NFKC", text)) if c.strip()]


def _third_person(text: str) -> str:
    for pattern, repl in _OWNER:
        text = re.sub(pattern, repl, text)
    return text


def correction_lesson(user: str, tool: str, *, chinese: bool, limit: int) -> str | None:
    """Advice from the user's rule in ``user``, for calls of ``tool``; None when the
    user stated no rule or no wording fits ``limit`` characters."""
    candidates: list[str] = []
    for clause in _clauses(user):
        if chinese:
            m = _ZH_NEGATION.match(clause)
            if m and re.search("[\u3400-\u9fff]", m["rest"]):
                rule = f"不要{m['rest'].strip()}{m['obj'].strip()}"
                candidates += [f"用 {tool} 时{rule}", f"调用 {tool} 时{rule}"]
            continue
        m = _EN_NEGATION.match(clause)
        if m:
            for rest in dict.fromkeys((m["rest"], _EXAMPLES.sub("", m["rest"]))):
                rest = _third_person(rest)
                candidates += [f"When using {tool}, never {rest}", f"{tool}: never {rest}"]
    if not candidates and not chinese:
        for clause in _clauses(user):
            m = _EN_ORDER.match(clause)
            if m:
                rest = _third_person(m["rest"])
                candidates.append(f"When using {tool}, {rest[0].lower()}{rest[1:]}")
    return next((c for c in candidates if len(c) <= limit), None)
