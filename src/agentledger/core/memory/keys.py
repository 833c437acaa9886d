"""Canonical keys and value identity: which proposals talk about the same thing.

A group is every record with the same scope and canonical key, so the key
decides what can conflict. It is normalised (NFKC, casefold, runs of anything
but letters and digits become ``_``) and, when the proposal names none,
derived from the value in a way each kind defines:

- an explicit ``key`` (or a JSON object's ``key`` / ``subject`` / ``name``) wins;
- ``preference``: a known subject (``response_language``, ``timezone``,
  ``units``) when the text names one, in any of the languages the lexicon knows;
- ``task_result``: the test / build / check identifier (``test:no19`` →
  ``test_no19``);
- ``diagnostic``: the error codes and exception names, sorted (``eaddrinuse``);
- otherwise the content words, stop words dropped, deduplicated and sorted,
  so word order, case, width and punctuation do not matter.

Everything here is a pure function of its input: the same proposal always
gets the same key.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

import blake3
import msgspec

from agentledger.contracts.events import MemoryKind, Sealed

MAX_KEY = 128
MAX_WORDS = 8

_NON_WORD = re.compile(r"[^\w]+|_+")
_WORD = re.compile(r"[^\W_]+")
_SPACE = re.compile(r"\s+")

# Words that carry no subject (English and Chinese function words, preference verbs).
_STOP = frozenset((
    "a", "an", "the", "to", "of", "and", "or", "in", "on", "at", "for", "from", "by", "with", "as", "is",
    "are", "was", "were", "be", "been", "being", "it", "its", "this", "that", "these", "those", "i", "me",
    "my", "we", "our", "you", "your", "he", "she", "they", "them", "their", "please", "always", "never",
    "should", "must", "will", "would", "can", "could", "do", "does", "did", "not", "no", "yes", "so", "if",
    "then", "than", "also", "just", "use", "using", "prefer", "prefers", "preferred", "user", "users",
    "likes", "like", "wants", "want", "now", "onwards", "remember", "keep", "的", "了", "和", "与", "及", "并",
    "在", "是", "请", "用", "以后", "今后", "从现在起", "用户", "偏好", "希望", "喜欢", "总是", "一次", "出现",
))

# Subjects a preference may name; the first match (in this order) is the key.
_PREFERENCE_SUBJECTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("response_language", re.compile(
        r"\b(chinese|mandarin|english|japanese|korean|french|german|spanish|portuguese|italian|russian"
        r"|arabic|hindi|language)\b|中文|汉语|普通话|英文|英语|日文|日语|日本語|韩语|한국어|法语|德语|西班牙语"
        r"|语言")),
    ("timezone", re.compile(r"\b(time ?zone|utc[+-]\d{1,2}|gmt[+-]\d{1,2})\b|时区")),
    ("units", re.compile(r"\b(metric|imperial|celsius|fahrenheit)\b|公制|英制|摄氏|华氏")),
)
_TEST_ID = re.compile(r"\b(?:test|tests|build|check|job|suite|ci)[:/][\w.\-/:]+")
_ERRNO = re.compile(
    r"\b(E(?:ADDRINUSE|ADDRNOTAVAIL|CONNREFUSED|CONNRESET|CONNABORTED|NOENT|ACCES|PERM|TIMEDOUT|PIPE"
    r"|NOSPC|MFILE|NFILE|EXIST|NOTFOUND|HOSTUNREACH|NETUNREACH|AI_AGAIN|ISDIR|NOTDIR|NOMEM|BADF|BUSY"
    r"|INVAL|NOTEMPTY|ROFS|AGAIN))\b")
_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9]*(?:Error|Exception|Fault|Panic))\b")
# Content that reads as a stack trace or a one-off error report: never a preference or a rule.
_DIAGNOSTIC = (
    re.compile(r"Traceback \(most recent call last\)"),
    re.compile(r"^\s*File \"[^\"]+\", line \d+", re.MULTILINE),
    re.compile(r"^\s*at \S.*[(\s][^()\s]+:\d+(?::\d+)?\)?\s*$", re.MULTILINE),
    re.compile(r"\b(?:panic|segmentation fault|core dumped|stack trace|stacktrace)\b", re.IGNORECASE),
    _ERRNO,
    re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception):"),
)


def normalise_text(text: str) -> str:
    """NFKC, casefold, whitespace collapsed, punctuation and symbols trimmed at both ends."""
    folded = _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    start, end = 0, len(folded)
    while start < end and _is_trim(folded[start]):
        start += 1
    while end > start and _is_trim(folded[end - 1]):
        end -= 1
    return folded[start:end]


def _is_trim(ch: str) -> bool:
    return ch.isspace() or unicodedata.category(ch)[0] in "PS"


def normalise_key(key: str) -> str:
    """An explicit key in canonical form: ``Response-Language `` → ``response_language``."""
    folded = unicodedata.normalize("NFKC", key).casefold()
    return _NON_WORD.sub("_", folded).strip("_")[:MAX_KEY].rstrip("_")


def text_leaves(value: Any) -> Iterator[str]:
    """Every string of a text or JSON value (object keys too), numbers as text."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from text_leaves(v)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from text_leaves(item)


def text_of(value: Any) -> str:
    """The free text of a value, what the detectors scan."""
    return "\n".join(text_leaves(value))


def looks_diagnostic(text: str) -> bool:
    """A stack trace, an errno, ``SomeError:``: short-lived diagnostic content."""
    return any(p.search(text) for p in _DIAGNOSTIC)


def canonical_key(kind: MemoryKind, key: str | None, value: Any) -> str:
    """The canonical key of a proposal (``""`` when nothing usable is there: the policy rejects it)."""
    if key is not None:
        return normalise_key(key)
    if isinstance(value, dict):
        for field in ("key", "subject", "name"):
            named = value.get(field)
            if isinstance(named, str) and normalise_key(named):
                return normalise_key(named)
    text = text_of(value)
    if kind == "preference":
        folded = normalise_text(text)
        for subject, pattern in _PREFERENCE_SUBJECTS:
            if pattern.search(folded):
                return subject
    elif kind == "task_result":
        ident = _TEST_ID.search(unicodedata.normalize("NFKC", text).casefold())
        if ident:
            return normalise_key(ident.group(0))
    elif kind == "diagnostic":
        codes = sorted({m.group(1).casefold() for p in (_ERRNO, _EXCEPTION) for m in p.finditer(text)})
        if codes:
            return normalise_key("_".join(codes[:MAX_WORDS]))
    return content_key(text)


def lookup_keys(text: str) -> tuple[str, ...]:
    """The canonical keys a key written as a person says it may stand for, most literal first.

    A proposal gets its key from an explicit key (its normal form) or, without one, from
    its value (the preference lexicon, then the content words), so a lookup tries the
    same three: ``answer language`` is ``answer_language`` as an explicit key would be,
    then ``response_language`` as the lexicon names it (what ``answer in Chinese``
    proposed without a key is stored under), then its sorted content words. Empty forms
    are left out; the tuple has at least one key whenever the text holds a letter or a
    digit.
    """
    keys = [normalise_key(text)]
    folded = normalise_text(text)
    keys += [subject for subject, pattern in _PREFERENCE_SUBJECTS if pattern.search(folded)][:1]
    keys.append(content_key(text))
    return tuple(dict.fromkeys(k for k in keys if k))


def key_repeats_value(key: str, value: Any) -> bool:
    """Whether every word of ``key`` is a word of the value's text: a key derived from the
    content words (``build_python_uv`` of ``The build uses Python and uv``) adds nothing a
    reader of the value does not see, so rendering it only spends tokens of the budget."""
    parts = [p for p in key.split("_") if p]
    words = set(_WORD.findall(normalise_text(text_of(value))))
    return bool(parts) and all(p in words for p in parts)


def content_key(text: str) -> str:
    """Content words of a text, stop words dropped, sorted and deduplicated."""
    words = sorted({w for w in _WORD.findall(normalise_text(text)) if w not in _STOP})
    return normalise_key("_".join(words[:MAX_WORDS]))


def value_identity(value: Any, sealed: Sealed | None = None) -> str:
    """What "the same value" means in a group: normalised text, canonical JSON, or the ciphertext.

    A sealed value cannot be compared without its key; two sealings of one
    plaintext differ, so they count as different values (a correction bumps
    ``subject_version``, which makes that harmless).
    """
    if sealed is not None:
        return "sealed:" + blake3.blake3(sealed.ciphertext.encode()).hexdigest()[:32]
    if isinstance(value, str):
        return _text_identity(value)
    return "json:" + msgspec.json.encode(_normalise_json(value), order="sorted").decode()


# A group resolution compares every record's value; text values repeat across resolutions.
@functools.lru_cache(maxsize=65536)
def _text_identity(value: str) -> str:
    return "text:" + normalise_text(value)


def _normalise_json(value: Any) -> Any:
    if isinstance(value, str):
        return normalise_text(value)
    if isinstance(value, dict):
        return {str(k): _normalise_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise_json(v) for v in value]
    return value
