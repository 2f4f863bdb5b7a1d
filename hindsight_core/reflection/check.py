"""The screen for a lesson phrased from one piece of evidence (``findings.py``).

A lesson passes when it:

1. copies neither the prompt, nor the task's goal, nor any user message;
2. says more than the goal and the run's tool names ("Install the requests package"
   for a run whose goal that is says nothing new);
3. names what the evidence shows: the flag, value or file kind the fix changed, the
   prerequisite it ran, or a content word of the user's correction;
4. does not say the opposite: recommend what failed (the removed argument) without
   the fix, put the fix under a negation ("never use --user"), or recommend what
   the user forbade;
5. does not say what another lesson of the same run already says;
6. fits the length limit and is in the run's language: these two are *fixable*, the
   distiller asks once more.
"""

from __future__ import annotations

import re
import unicodedata

from .evidence import (
    affirmed_units,
    asked_units,
    near_equal,
    negated_units,
    normalized,
    prohibitions,
    units,
)
from .findings import Finding
from .screen import _lead, _run_names, copies_prompt, language_problem
from .trajectory import Trajectory

_CJK = re.compile("[\u3400-\u9fff]")
# words that say nothing of their own in an order-free comparison
_STOP = frozenset("a an the to of in on for and or it is be".split())


def mentions(lesson: str, term: str) -> bool:
    """Whether ``lesson`` names ``term``: literally (a flag such as ``-r`` as a whole
    word) or, for words, by a shared content unit ("rebasing" names "--rebase")."""
    low, t = lesson.lower(), term.lower().strip()
    if not t:
        return False
    if re.search(rf"(?<![\w-]){re.escape(t)}(?![\w-])", low) or (len(t) >= 4 and t in low):
        return True
    if _CJK.search(t):
        return len(t) >= 2 and t in low
    mine = units(lesson)
    return bool(units(t) & mine) and not t.startswith("-")


def restates(lesson: str, text: str) -> bool:
    """Whether ``lesson`` is ``text`` again: nearly equal, or most of one inside the other."""
    nl, nt = normalized(lesson), normalized(text)
    if not nl or not nt:
        return False
    if near_equal(lesson, text, ratio=0.88):
        return True
    short, long_ = sorted((nl, nt), key=len)
    if len(short) >= 6 and short in long_ and len(short) >= 0.6 * len(long_):
        return True
    if _same_bag(nl, nt):
        return True
    # one of its sentences or clauses again ("Never send it to everyone, only to X");
    # a CJK character carries about a word, so a 4-character clause ("不要抄送") counts
    return any(
        len(nc) >= (4 if _CJK.search(nc) else 10)
        and (near_equal(lesson, c, ratio=0.88) or _same_bag(nl, nc))
        for c in re.split(r"[,;.!?，。；！？\n]+", text)
        if (nc := normalized(c))
    )


def _bag(text: str) -> set[str]:
    """CJK bigrams and other words: order-free, so a reordering
    ("不要删除依赖文件" for "依赖文件不要删除") keeps nearly all of them."""
    out = {w for w in re.findall(r"[^\W\u3400-\u9fff]+", text) if w not in _STOP}
    for run in re.findall("[\u3400-\u9fff]+", text):
        out.update({run} if len(run) == 1 else {run[i : i + 2] for i in range(len(run) - 1)})
    return out


def _same_bag(lesson: str, text: str) -> bool:
    """Whether nearly all of a Chinese lesson's bag is the text's and it covers most
    of it: the text's words again, in another order."""
    if not _CJK.search(lesson):  # English advice reuses the user's words by nature
        return False
    mine, theirs = _bag(lesson), _bag(text)
    if len(mine) < 3 or not theirs:
        return False
    shared = len(mine & theirs)
    return shared >= 0.8 * len(mine) and shared >= 0.6 * len(theirs)


def _user_messages(trajectory: Trajectory) -> list[tuple[int, str]]:
    return [
        (n, s.content)
        for n, s in enumerate(trajectory.steps, start=1)
        if s.kind == "message" and s.role == "user" and s.content.strip()
    ]


def _follows_instead(said: set[str], user: str, goal: set[str]) -> bool:
    """Whether the lesson follows what the user asked for instead ("only to team-dev")
    and leaves the forbidden object alone: "Delete the installer first" mentions the
    installer the user still needs, so it does not follow "Don't delete installers"."""
    banned = prohibitions(user)
    ruled = set().union(*(n | c for n, c in banned)) if banned else set()
    instead = {u for u in asked_units(user) - goal - ruled if len(u) > 1}
    objects = set().union(*(c for _, c in banned)) - goal if banned else set()
    # the words inside what was asked for ("company" of team-dev@company.example) are not
    # the forbidden object ("the whole company")
    for ident in re.findall(r"\S*[@./_-]\S*", user):
        if not prohibitions(ident):
            objects -= units(ident.strip(".,;:!?"))
    return bool(said & instead) and not said & objects


_ONLY = r"(?:只|仅|only\s+)"


def _narrows(lesson: str, user: str) -> bool:
    """Whether the lesson narrows an act the user forbade to other objects ("只抄送给指定的
    人" for "不要抄送全组", "cc only the people named" for "don't cc everyone"): the act
    right after "only" and never the forbidden span itself (the act with its object)."""
    text = unicodedata.normalize("NFKC", lesson).lower()
    spans = re.findall(r"(?:不要|别|勿|禁止)([^\s，。,.;；!！?？]{2,4})", user)
    spans += [
        m.group(1)
        for m in re.finditer(r"\b(?:don'?t|do not|never)\s+(\w+(?:\s+\w+)?)", user.lower())
    ]
    for span in spans:
        verb = span[:2] if re.match(r"[\u4e00-\u9fff]", span) else span.split()[0]
        if span.lower() in text:
            return False
        if re.search(_ONLY + re.escape(verb.lower()), text) or re.search(
            rf"\b{re.escape(verb.lower())}\s+only\b", text
        ):
            return True
    return False


def _opposite(lesson: str, finding: Finding, goal: set[str]) -> str | None:
    said = affirmed_units(lesson)
    # what the fix added (for a correction, also the user's words) outweighs a failed part
    named = [t for t in finding.added if mentions(lesson, t)]
    if finding.kind == "correction":
        named += [t for t in finding.key if mentions(lesson, t)]
    if finding.kind == "correction" and not (
        _follows_instead(said, finding.user, goal) or _narrows(lesson, finding.user)
    ):
        for forbidden, clause in prohibitions(finding.user):
            # the forbidden verb on the forbidden object, or as the lesson's own verb
            if forbidden & said and (not clause or clause & said or forbidden & _lead(lesson)):
                return (
                    "recommends what the user said not to do "
                    f"({', '.join(sorted(forbidden & said))})"
                )
    avoided = [t for t in finding.avoid if mentions(lesson, t)]
    negated = negated_units(lesson)
    if avoided and not named and not any(units(t) & negated for t in avoided):
        return f"recommends what failed ({', '.join(avoided)}), not the fix"
    if finding.kind != "correction":
        against = [
            t
            for t in finding.added
            if mentions(lesson, t) and (_negates(lesson, t) or (t.isalpha() and units(t) & negated))
        ]
        if against:
            return f"says the opposite of the fix (puts {', '.join(against)} under a negation)"
    return None


def _negates(lesson: str, term: str) -> bool:
    """ "without -r", "no --user", "don't add --user", "不要加--user"."""
    low, t = lesson.lower(), re.escape(term.lower())
    return bool(
        re.search(rf"\b(without|no|never|not|don'?t|avoid)\b(\s+\w+){{0,2}}\s+{t}", low)
        or re.search(rf"(不要|别|勿|不用|去掉|避免)\S{{0,3}}{t}", low)
    )


def check_lesson(
    lesson: str,
    finding: Finding,
    trajectory: Trajectory,
    *,
    prompt_fragments: list[str],
    others: list[str],
    max_chars: int,
    chinese: bool,
) -> tuple[str | None, str | None]:
    """``(reason, fix)``: why ``lesson`` is dropped, or what to ask the model to fix
    (length, language); both None when it passes."""
    lesson = lesson.strip()
    if not lesson:
        return "the lesson is empty", None
    copied = copies_prompt(lesson, prompt_fragments)
    if copied is not None:
        return f"copies the prompt ({copied[:60]!r})", None
    if restates(lesson, trajectory.goal):
        return "restates the task's goal", None
    for n, text in _user_messages(trajectory):
        if restates(lesson, text):
            return f"restates the user's message in step {n}", None
    if not units(lesson) - _run_names(trajectory) - units(trajectory.goal):
        return "generic advice or the goal again; nothing taken from this run", None
    if not any(mentions(lesson, t) for t in finding.key):
        what = (
            "the user's rule"
            if finding.kind == "correction"
            else "what changed (" + ", ".join(finding.key[:4]) + ")"
        )
        return f"does not name {what}", None
    opposite = _opposite(lesson, finding, units(trajectory.goal))
    if opposite:
        return opposite, None
    for other in others:
        a, b = units(lesson), units(other)
        if near_equal(lesson, other) or (a and b and len(a & b) / len(a | b) >= 0.6):
            return f"says what another lesson of this run says ({other[:60]!r})", None
    fixes = []
    if len(lesson) > max_chars:
        fixes.append(
            f"the lesson is {len(lesson)} characters: shorten it to at most {max_chars} "
            "characters (a CJK character counts as one)"
        )
    wrong_language = language_problem(lesson, chinese)
    if wrong_language:
        fixes.append(wrong_language)
    return None, "; ".join(fixes) or None
