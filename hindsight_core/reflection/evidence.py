"""What a run offers as evidence: its numbered steps, the failures, corrections and
complaints in it, and the content words a lesson has to share with them.

Small models answer an unrelated run with the prompt's example, turn a run with
nothing to learn into "use ls to list files", or invert what the run showed. The
screen (``screen.py``) catches that with the cheap lexical facts computed here:

- *units*: the content of a text as comparable tokens: Latin words (lower-cased,
  cut to a 5-letter stem so that "deleting" meets "delete"), numbers and CJK
  character bigrams, without stop words and without the vocabulary every lesson
  uses ("check", "file", "command", "注意", "文件"...), which would make any lesson
  look grounded in any run;
- *signals*: steps that show something went wrong: a failed step, the corrected
  call after it (a retry), and a user message after the agent acted that is not
  just thanks (a complaint or correction);
- *negated units*: what a text says not to do ("don't delete", "不要删除"), to
  catch a lesson that recommends what the user forbade.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from functools import lru_cache

from ..text import CJK_FUNCTION_CHARS, CJK_RANGES, cjk_share, is_cjk_text, tokens
from .trajectory import Step, Trajectory

# Words every lesson may use: sharing only these with a step grounds nothing.
_GENERIC_WORDS = """
use using used make sure careful carefully check checking verify ensure always never
attention pay thing things properly correct correctly task tasks run running tool tools
command commands step steps result results try again before after first when should need
needed good work works working time times way able want call calls calling called output
input data value values list listing lists file files folder folders directory
directories path show get read write open create find look see give take keep know
note next agent user help helps helpful important better best possible instead also
just only every each any all some more less most many much first last new old one two
set setting settings option options run it its their them they you your we our us can
could would will may might must do does did done doing have has had
""".split()
_GENERIC_CJK = """
注意 小心 仔细 确保 检查 使用 命令 工具 文件 目录 列出 任务 执行 运行 调用 时候 之前 之后
需要 应该 一定 确认 操作 结果 问题 可以 如果 那么 然后 进行 一下 相关 情况 是否 存在 时要
不要 别 勿 没有 它 他 她 我们 你们 主机 端口 连接 正确 无误 确定
""".split()
_NEGATION_WORDS = frozenset("not no never dont don't avoid without stop nor cannot".split())
_CJK_NEGATIONS = ("不要", "不该", "不能", "不可", "别", "勿", "禁止", "避免", "千万别", "不")
_THANK_WORD = (
    r"(thanks?( you)?( so much| a lot)?|thank you|thx|great|perfect|good( job)?|nice|ok(ay)?|"
    r"cool|awesome|excellent|looks good|that'?s (it|all|great|perfect)|"
    r"谢谢|多谢|好的|很好|完美|不错|辛苦了|可以了|没问题)"
)
# "Perfect, thanks." is thanks too: a run of thanks words and nothing else.
_THANKS = re.compile(rf"^\W*{_THANK_WORD}(\W+{_THANK_WORD})*\W*$", re.IGNORECASE)
_FAILS = re.compile(
    r"(\b(error|errno|exception|traceback|failed|failure|fatal|denied|refused|timed out|"
    r"timeout|not found|no such|invalid|unauthori[sz]ed|forbidden|rejected|exit (code|status) "
    r"[1-9]|\w+error)\b"
    r"|\berr!|错误|失败|异常|拒绝|找不到|不存在|超时|无效|无法)",
    re.IGNORECASE,
)
_SPACE = re.compile(r"\s+")
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


# Irregular forms whose 5-letter stem would not meet the base form's ("built", "build").
_IRREGULAR = {
    "built": "build",
    "ran": "run",
    "sent": "send",
    "wrote": "write",
    "written": "write",
    "made": "make",
    "kept": "keep",
    "left": "leave",
    "took": "take",
    "taken": "take",
    "went": "go",
    "gone": "go",
    "began": "begin",
    "begun": "begin",
    "chose": "choose",
    "chosen": "choose",
    "broke": "break",
    "broken": "break",
    "found": "find",
}


def _stem(word: str) -> str:
    word = _IRREGULAR.get(word, word)
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word[:5]


@lru_cache(maxsize=1)
def _generic() -> frozenset[str]:
    cjk_chars = {ch for word in _GENERIC_CJK for ch in word}
    return frozenset(
        {_stem(w) for w in _GENERIC_WORDS} | set(_GENERIC_CJK) | cjk_chars | CJK_FUNCTION_CHARS
    )


_IDENTIFIER = re.compile(f"[^\\s,;:()\\[\\]{{}}\"'`，。；：！？、（）{CJK_RANGES}]+")
_JOINER = re.compile(r"[-_./%=@]")


def units(text: str) -> set[str]:
    """The content units of ``text`` (see the module docstring), generic ones removed.

    CJK text gives its bigrams and also its single characters: a Chinese paraphrase
    ("删除前" for "不该删") often shares no bigram with what it paraphrases.
    Identifiers (``--user``, ``%Y-%m-%d``, ``package-lock.json``) are units as a whole
    too: split into words, ``%Y-%m-%d`` would leave nothing.
    """
    generic = _generic()
    out: set[str] = {
        ident.lower().rstrip(".!?")
        for ident in _IDENTIFIER.findall(text)
        if _JOINER.search(ident) and re.search(r"\w", ident) and len(ident) > 2
    }
    for tok in tokens(text):
        if cjk_share(tok):
            out.add(tok)
            out.update(tok)
        elif len(tok) > 1 or tok.isdigit():  # not the "s" of "file's"
            out.add(_stem(tok))
    return out - generic


def normalized(text: str) -> str:
    """Lower-cased, NFKC, punctuation and runs of space folded: for near-equality."""
    text = unicodedata.normalize("NFKC", text).lower()
    return _SPACE.sub(" ", _PUNCT.sub(" ", text)).strip()


def near_equal(a: str, b: str, *, ratio: float = 0.85) -> bool:
    """Whether two texts are the same sentence up to punctuation and small edits."""
    na, nb = normalized(a), normalized(b)
    if not na or not nb:
        return False
    if na == nb:
        return True
    if min(len(na), len(nb)) / max(len(na), len(nb)) < ratio - 0.1:
        return False
    return SequenceMatcher(None, na, nb, autojunk=False).ratio() >= ratio


def quoted_in(quote: str, text: str) -> bool:
    """Whether ``quote`` appears in ``text`` (normalized; at 85 % for a long quote)."""
    nq, nt = normalized(quote), normalized(text)
    if not nq:
        return False
    if nq in nt:
        return True
    if len(nq) < 12:
        return False
    match = SequenceMatcher(None, nt, nq, autojunk=False).find_longest_match(0, len(nt), 0, len(nq))
    return match.size >= 0.85 * len(nq)


_CLAUSE = re.compile(r"[,.;:!?，。；：！？\n]+")


def prohibitions(text: str) -> list[tuple[set[str], set[str]]]:
    """What ``text`` says not to do: per negation, ``(negated, clause)``: the units of
    the verb the negation governs ("do not *delete* the lock file", "依赖文件不要*删除*")
    and the rest of its clause (the object: "lock file", "依赖文件")."""
    out: list[tuple[set[str], set[str]]] = []
    negations = {w.replace("'", "") for w in _NEGATION_WORDS}
    for clause in _CLAUSE.split(unicodedata.normalize("NFKC", text).lower()):
        words = re.findall(r"[\w']+", clause)
        for i, word in enumerate(words):
            if word.replace("'", "") in negations:
                # the verb it governs ("don't *rename* public functions"), not its object
                negated = next((u for w in words[i + 1 : i + 4] if (u := units(w))), set())
                out.append((negated, units(clause) - negated))
        for neg in _CJK_NEGATIONS:
            for m in re.finditer(re.escape(neg), clause):
                negated = {u for u in units(clause[m.end() : m.end() + 3]) if cjk_share(u)}
                out.append((negated, units(clause[: m.start()])))
    return [(n, c) for n, c in out if n]


def asked_units(text: str) -> set[str]:
    """Units of the clauses of ``text`` that hold no negation: what it asks for instead
    ("never send it to everyone, *only to team-dev*")."""
    return set().union(*(units(c) for c in _CLAUSE.split(text) if not prohibitions(c)))


def negated_units(text: str) -> set[str]:
    """Units that ``text`` puts under a negation ("do not delete X" gives delete, X)."""
    return set().union(*(n for n, _ in prohibitions(text)))


def affirmed_units(text: str) -> set[str]:
    """Units of ``text`` that are not under a negation."""
    return units(text) - negated_units(text)


def step_text(step: Step) -> str:
    """All of a step as one text: tool, arguments and content."""
    parts = [step.tool or ""]
    if step.args:
        parts.append(json.dumps(step.args, ensure_ascii=False))
    parts.append(step.content)
    return " ".join(p for p in parts if p)


def failed_step(step: Step) -> bool:
    """Whether a step reports a failure: ``Step.failed``, or a result that names one
    anywhere near its start ("! [rejected]", "E  ModuleNotFoundError", "HTTP 403 禁止")."""
    return step.failed or (
        step.kind in ("tool_result", "error") and bool(_FAILS.search(step.content[:300]))
    )


@dataclass
class Run:
    """A trajectory as evidence: steps numbered from 1, and its signal steps.

    Attributes:
        texts: step number -> the step's text (tool, arguments, content).
        failed: numbers of failed steps (errors, results that read as failures).
        corrected: numbers of tool calls made after a failure (a retry or a fix).
        complaints: numbers of user messages after the agent acted, other than thanks.
        context: signal step number -> the numbers it speaks about (itself, and the
            call that failed or was complained about); the call that failed or was
            complained about -> itself and that failure or complaint.
        chinese: whether the run is written in CJK script.
    """

    texts: dict[int, str]
    failed: list[int] = field(default_factory=list)
    corrected: list[int] = field(default_factory=list)
    complaints: list[int] = field(default_factory=list)
    context: dict[int, list[int]] = field(default_factory=dict)
    chinese: bool = False

    @property
    def signals(self) -> list[int]:
        """Every step that shows something went wrong or was put right."""
        return sorted({*self.failed, *self.corrected, *self.complaints})


def is_chinese(trajectory: Trajectory) -> bool:
    """Whether the run is mostly in Chinese/Japanese/Korean script."""
    return is_cjk_text(trajectory.goal) or is_cjk_text(trajectory.text())


def analyse(trajectory: Trajectory) -> Run:
    """The :class:`Run` of a trajectory (numbering as :func:`render_trajectory` shows it)."""
    run = Run(
        texts={n: step_text(s) for n, s in enumerate(trajectory.steps, start=1)},
        chinese=is_chinese(trajectory),
    )
    last_call: int | None = None
    pending_failure = False
    acted = False
    for n, step in enumerate(trajectory.steps, start=1):
        if step.kind == "tool_call":
            if pending_failure:
                run.corrected.append(n)
                run.context[n] = [n]
                pending_failure = False
            last_call, acted = n, True
        elif failed_step(step):
            run.failed.append(n)
            run.context[n] = [n] + ([last_call] if last_call else [])
            if last_call:  # citing the call that failed is citing its failure
                run.context.setdefault(last_call, [last_call]).append(n)
            pending_failure = True
            acted = True
        elif step.kind == "message" and step.role == "user":
            if acted and not _THANKS.match(step.content):
                run.complaints.append(n)
                run.context[n] = [n] + ([last_call] if last_call else [])
                if last_call:
                    run.context.setdefault(last_call, [last_call]).append(n)
        elif step.kind in ("thought", "message", "tool_result"):
            acted = acted or step.kind != "message" or step.role == "assistant"
    return run


def _call_text(step: Step) -> str:
    return f"{step.tool or ''} {json.dumps(step.args or {}, ensure_ascii=False)}"


def changed_units(run: Run, trajectory: Trajectory) -> tuple[set[str], set[str]]:
    """Units only the failed calls had, and units only their corrections have.

    Each correction is compared with the call that *failed* (the latest failed call
    of the same tool before it), not with the call just before it: an unrelated
    ``ssh staging-01`` between them would make "staging" a failed argument.
    """
    steps = trajectory.steps
    bad: set[str] = set()
    good: set[str] = set()
    for fix in run.corrected:
        tool = steps[fix - 1].tool
        failed = [n for n in run.failed if n < fix and (steps[n - 1].tool in (None, tool))]
        if not failed:
            continue
        n = failed[-1]
        # a failure reported in one step carries its call; else the call it answers
        culprit = (
            n
            if steps[n - 1].args
            else next(
                (m for m in run.context.get(n, [])[1:] if steps[m - 1].kind == "tool_call"), None
            )
        )
        if culprit is None or (steps[culprit - 1].tool not in (None, tool)):
            continue
        b, g = units(_call_text(steps[culprit - 1])), units(_call_text(steps[fix - 1]))
        bad |= b - g
        good |= g - b
    return bad, good
