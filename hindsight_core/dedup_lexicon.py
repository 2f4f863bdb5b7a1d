"""The word lists and patterns of the dedup guard's lexical veto (``dedup_veto.py``).

Closed classes of words (negations, quantities, sequence words, opposite terms,
synonyms) and the patterns that find them, in English and Chinese; ``dedup_veto.py``
holds the rules that use them.
"""

from __future__ import annotations

import re

from .text import CJK_RANGES, has_cjk

_CJK_CHAR = re.compile(f"[{CJK_RANGES}]")
_CJK_RUN = re.compile(f"[{CJK_RANGES}]+")

_NEGATIONS = frozenset(
    "not no never nor cannot dont doesnt didnt isnt arent wasnt werent cant wont shouldnt "
    "wouldnt couldnt mustnt neednt hasnt havent hadnt without avoid".split()
)
# Verbs that say "not" by themselves: "don't compare the case" is "ignore the case",
# and "不区分大小写" is "忽略大小写". Counted for polarity only; in a sentence they stay words
# (a swap of "don't run" for "skip" is still one word swapped for another).
_NEGATING_VERBS = frozenset(
    "ignore ignores ignored ignoring skip skips skipped skipping omit omits omitted "
    "omitting".split()
)
_CJK_NEGATIONS = (
    "不", "别", "勿", "禁止", "避免", "防止", "以免", "没有", "无需", "无须", "非",
    "忽略", "跳过", "省略",
)  # fmt: skip
# Words that hold a negation character and negate nothing ("不同" different, "不断"
# continually, "非常" very, "无论" whatever, "级别" level, "分别" each).
_CJK_NOT_NEGATIONS = re.compile(
    "不同|不断|不停|不过|不少|不久|不仅|不管|不论|差不多|非常|无论"
    "|分别|区别|差别|特别|级别|类别|识别|个别|别人|别的"
)
_OPPOSITES = [
    ("increase", "decrease"),
    ("before", "after"),
    ("enable", "disable"),
    ("always", "never"),
    ("add", "remove"),
    ("more", "less"),
    ("higher", "lower"),
    ("above", "below"),
    ("min", "max"),
    ("minimum", "maximum"),
    ("true", "false"),
    ("on", "off"),
    ("open", "close"),
    ("start", "stop"),
    ("include", "exclude"),
    ("allow", "deny"),
    ("upper", "lower"),
    ("first", "last"),
    ("tabs", "spaces"),
    ("local", "utc"),
    ("sync", "async"),
    ("earlier", "later"),
    ("larger", "smaller"),
    ("longer", "shorter"),
    ("up", "down"),
    ("raise", "lower"),
    ("accept", "reject"),
    ("keep", "delete"),
    ("keep", "remove"),
    ("之前", "之后"),
    ("前", "后"),
    ("增加", "减少"),
    ("开启", "关闭"),
    ("允许", "拒绝"),
    ("打开", "关闭"),
    ("提高", "降低"),
    ("最大", "最小"),
    ("保留", "删除"),
    ("相同", "不同"),
]
_OPPOSITE_PAIRS = [(x, y, has_cjk(x)) for x, y in _OPPOSITES]
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# English quantities without digits: a lesson that says "daily" and one that says
# "weekly" (or "one hour" / "one day") differ like "1" and "7" do, and an English-only
# model's cosine does not separate them (all-MiniLM-L6-v2: 0.95). A closed class, like
# the digits; Chinese quantity characters are also parts of other words (天气, 一定), so
# there the minimal-pair and content-character rules judge.
_QUANTITY_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve fifteen twenty "
    "thirty forty fifty sixty hundred thousand million billion dozen half twice double "
    "triple once millisecond milliseconds ms second seconds sec secs minute minutes min mins "
    "hour hours hr hrs day days week weeks month months year years hourly daily nightly "
    "weekly monthly quarterly yearly annually kb mb gb tb kib mib gib tib percent".split()
)
# Chinese units of time after a numeral or 每 ("每天" / "每周", "一小时" / "一天"): the
# digits rule's closed class for the words a rewording keeps while it moves them
# ("数据库每周全量备份一次" / "每天给数据库做一次全量备份"). Not the characters alone:
# 天 and 日 are also parts of other words (天气, 日志).
_CJK_TIME_UNIT = re.compile(
    r"(?:每|[\d一二两三四五六七八九十百千万半几])\s*个?\s*"
    r"(毫秒|秒钟|秒|分钟|小时|钟头|天|日|周|星期|礼拜|月|季度|年)"
)
_SAME_TIME_UNIT = {"秒钟": "秒", "钟头": "小时", "日": "天", "星期": "周", "礼拜": "周"}
# What names a thing in a lesson (a tool, a format, a level, a signal): in text mostly
# in Chinese, every Latin word ("用 orjson 来解析 JSON"); in English, a word in capitals
# or with a digit inside (SIGTERM, YAML, argon2). Two lessons that each name something
# the other does not are about other things however they are worded ("基础镜像用
# debian" / "Docker 基础镜像选 alpine", 0.976 with multilingual-e5-small); one that only
# adds a name adds a detail.
_NAME_SHAPE = re.compile(r"^(?:[A-Z0-9][A-Z0-9]+|\w*[a-zA-Z]\d\w*|\w*\d[a-zA-Z]\w*)$")
_LATIN_WORD = re.compile(r"[^\W_]+", re.ASCII)
# Words and characters that put steps in an order ("先 A 再 B", "A, then B"). Not
# before / after / 前 / 后: their clause moves with them in a rewording ("Check X before
# Y" / "Before Y, check X"), and swapping them is an opposite term already.
_SEQUENCE_WORDS = frozenset({"then", "first", "next", "finally", "afterwards", "later"})
_CJK_SEQUENCE = ("然后", "接着", "随后", "最后", "先", "再")
_STEP_MARK = re.compile("|".join([*_CJK_SEQUENCE, *(rf"\b{w}\b" for w in _SEQUENCE_WORDS)]))
# Words a rewording swaps for each other: one word of each group stands for all, so
# "Check X" / "Verify X" is not taken for a minimal pair.
_SYNONYMS = [
    ("check", "verify", "confirm", "validate", "ensure", "inspect"),
    ("delete", "remove", "erase"),
    ("use", "utilize", "employ"),
    ("run", "execute"),
    ("make", "create"),
    ("big", "large", "huge"),
    ("fast", "quick"),
    ("deleting", "removing"),
    ("using", "utilizing"),
]
_SYNONYM = {w: group[0] for group in _SYNONYMS for w in group}
# Words that open a clause a rewording adds or drops ("When calling X, ..." / "With X, ...").
_CLAUSE_WORDS = frozenset({"when", "while", "whenever", "during"})
# One CJK character, or one Latin word: a word stops at a CJK character ("apply发布" is
# two units), which ``[^\W_]+`` alone would swallow (CJK characters are word characters).
_UNIT = re.compile(f"[{CJK_RANGES}]|(?:(?![{CJK_RANGES}])[^\\W_])+", re.UNICODE)
_APOSTROPHES = re.compile("['\u2019]")
