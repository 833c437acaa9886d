"""Canonical keys and value identity: which proposals talk about the same thing.

A group is every record with the same scope and canonical key, so the key
decides what can conflict. It is normalised (NFKC, casefold, runs of anything
but letters and digits become ``_``) and, when the proposal names none,
derived from the value in a way each kind defines:

- an explicit ``key`` (or a JSON object's ``key`` / ``subject`` / ``name``) wins;
- ``preference``: a known subject (``response_language``, ``timezone``,
  ``units``) when the text names one, in any of the languages the lexicon knows;
- ``fact`` and ``preference``: the *attribute* a one-line statement sets, never
  its value, so that updates of one attribute meet in one group: ``my employer
  is Acme``, ``I now work at Globex`` and ``employer: Globex`` are all
  ``employer`` (``attribute_key``: ``my X is Y``, ``X: Y``, ``X is Y`` for a
  known attribute, and verb phrases of one person such as ``I live in`` / ``I work at``, in
  English and a few words of German, French, Spanish and Chinese);
- ``task_result``: the test / build / check identifier (``test:no19`` →
  ``test_no19``);
- ``diagnostic``: the error codes and exception names, sorted (``eaddrinuse``);
- an attribute that holds several values at once (``MULTI_VALUED``: e-mail, phone,
  address, allergy, language, …) gets one group per value (``allergy_peanuts``; a personal
  value: the attribute and its keyed digest), so a second value is kept beside the first;
- otherwise the text keeps its own identity (``content_key``): its first content words
  for a reader and a digest of the normalised text, so a line that sets no attribute (a
  turn of a conversation, a note) is never a tie or a supersession of another line.

An attribute outside the vocabulary is taken only from a statement that reads as one
(``attribute_of``): a short value, not all capitalised words (a speaker's ``Caroline:``
or a heading is not an attribute).

Everything here is a pure function of its input: the same proposal always
gets the same key. A personal value's key comes from the closed attribute
vocabulary only (``known_attribute``; the policy adds the detector's kind and
a keyed digest, see ``decide``), since a key is never sealed.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

import blake3
import msgspec

from agentledger.contracts.events import MemoryKind, Sealed

MAX_KEY = 128
MAX_WORDS = 8
# Content words a content key shows before its digest; hex digits of that digest (``content_key``).
READABLE_WORDS = 6
DIGEST_PART = 10
_CONTENT_DIGEST = re.compile(rf"_[0-9a-f]{{{DIGEST_PART}}}$")
# Kinds whose one-line statements are keyed on the attribute they set.
ATTRIBUTE_KINDS: frozenset[MemoryKind] = frozenset({"fact", "preference"})

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


# Attributes a statement may set, each with the phrases (normalised: casefolded, words
# separated by one space) that name it; a phrase in no entry is used as it stands.
_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "employer": ("employer", "current employer", "company", "workplace", "work place", "place of work",
                 "arbeitgeber", "firma", "employeur", "entreprise", "empleador", "empresa", "雇主", "公司"),
    "home_city": ("city", "home city", "hometown", "home town", "city of residence", "residence",
                  "wohnort", "heimatstadt", "stadt", "ville", "ciudad", "城市", "所在城市"),
    "home_address": ("home address", "residential address", "wohnadresse", "adresse personnelle",
                     "dirección de casa", "住址", "家庭住址"),
    "address": ("address", "postal address", "street address", "mailing address", "billing address",
                "shipping address", "work address", "adresse", "anschrift", "dirección", "direccion", "地址"),
    "email_address": ("email", "e mail", "email address", "e mail address", "mail address", "mail",
                      "courriel", "correo", "correo electrónico", "邮箱", "电子邮件", "邮件地址"),
    "phone_number": ("phone", "phone number", "telephone", "telephone number", "mobile", "mobile number",
                     "cell", "cell phone", "cell number", "number", "telefon", "telefonnummer", "handynummer",
                     "téléphone", "numéro de téléphone", "teléfono", "telefono", "电话", "手机", "手机号",
                     "电话号码"),
    "name": ("name", "full name", "nom", "nombre", "名字", "姓名"),
    "birthday": ("birthday", "date of birth", "birth date", "dob", "geburtstag", "anniversaire",
                 "cumpleaños", "生日"),
    "allergy": ("allergy", "allergies", "food allergy", "food allergies", "allergic to", "allergie", "allergien",
                "allergies alimentaires", "alergia", "alergias", "过敏", "过敏源"),
    "spoken_language": ("languages", "spoken language", "spoken languages", "languages spoken", "sprachen",
                        "langues", "idiomas", "lenguas"),
    "pet": ("pet", "pets", "haustier", "haustiere", "animal de compagnie", "mascota", "mascotas", "宠物"),
    "hobby": ("hobby", "hobbies", "hobbys", "passe temps", "pasatiempo", "pasatiempos", "爱好"),
    "job_title": ("job title", "title", "role", "position", "job", "occupation", "profession", "beruf",
                  "métier", "profesión", "职位", "职业"),
}
_PHRASE_ATTRIBUTE = {phrase: attr for attr, phrases in _ATTRIBUTES.items() for phrase in phrases}
# What a personal value's detector finding says the attribute is, when the text names none.
PERSONAL_KIND_ATTRIBUTE: dict[str, str] = {"email": "email_address", "phone": "phone_number",
                                           "card": "payment_card", "iban": "bank_account",
                                           "national_id": "national_id"}
# Attributes a person holds several values of at once (a work and a private address, two
# allergies): each distinct value is a group of its own (``multi_valued_key``), so a second value
# is kept beside the first instead of superseding it or tying with it.
MULTI_VALUED: frozenset[str] = frozenset(("email_address", "phone_number", "address", "payment_card",
                                          "bank_account", "national_id", "allergy", "spoken_language",
                                          "pet", "hobby"))
# Words that qualify an attribute without changing it ("my new employer").
_MODIFIERS = frozenset(("new", "current", "present", "old", "previous", "former", "latest", "actual",
                        "updated", "primary", "main", "neue", "neuer", "neues", "nouveau", "nouvelle",
                        "nuevo", "nueva", "新"))
# Labels of a note, not attributes: ``Note: …`` is keyed on its content words.
_LABELS = frozenset(("note", "notes", "fact", "rule", "info", "important", "reminder", "remember", "todo",
                     "tip", "warning", "fyi", "update", "summary", "context", "user", "preference", "memory",
                     "ps", "nb", "correction", "answer", "question", "example", "result", "status", "error"))
_MAX_ATTRIBUTE_WORDS = 4
_MAX_STATEMENT = 240
# What an attribute outside the vocabulary may be given: a value of a few words, none of them
# a word that only an utterance holds (a pronoun, a clause's start).
_MAX_VALUE_WORDS = 6
_MAX_VALUE_WORDS_IN_KEY = 4
_NOT_IN_VALUES = frozenset(("i", "me", "you", "we", "us", "he", "him", "she", "they", "them", "it", "that",
                            "because", "when", "if", "what", "how", "why", "ich", "du", "je", "tu", "yo"))
_SENTENCE_BREAK = re.compile(r"[?!]|[.;]\s+\S")
_DETERMINERS = frozenset(("the", "a", "an", "this", "that", "these", "those", "our", "my", "your", "its"))
_POSSESSIVE = (r"(?:my|our|the user'?s|user'?s|his|her|their|mein|meine|meiner|unser|unsere|mon|ma|mes"
               r"|notre|mi|mis|nuestro|nuestra)")
_COPULA = r"(?:is now|is|are|was|has changed to|changed to|ist|est|es|=)"
# (pattern with an ``attr`` group, which attributes it may take: "open" any, "colon" / "copula"
# the vocabulary's but the words that mean other things when they stand bare: "Title: fix
# the bug", "name is required").
_STATEMENTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"^{_POSSESSIVE}\s+(?P<attr>[^\W\d][^:=]{{0,40}}?)\s+{_COPULA}\s+\S"), "open"),
    (re.compile(r"^我的(?P<attr>[^\s是]{1,8})是\S"), "open"),
    (re.compile(r"^(?:the\s+|user\s+)?(?P<attr>[^\W\d][\w' -]{0,40}?)(?:\s*[:：]\s+|\s*=\s*|\s+[-–—]\s+)\S"),
     "colon"),
    (re.compile(rf"^(?:the\s+)?(?P<attr>[^\W\d][\w' -]{{0,40}}?)\s+{_COPULA}\s+\S"), "copula"),
)
_BARE_AMBIGUOUS = {
    "colon": frozenset(("title", "role", "position", "job", "number", "cell", "residence")),
    "copula": frozenset(("title", "role", "position", "job", "number", "cell", "residence", "name", "address",
                         "city", "company", "mail", "mobile", "phone", "firma", "stadt", "nom", "nombre")),
}
# Who a verb phrase speaks of: one person ("we are based in" may be a company, not a home).
_PERSON = r"(?:i|i'm|i am|user|the user|he|she|he's|she's|ich|je|yo)"
_ADVERBS = r"(?:\s+(?:now|currently|still|recently|just|actually|no longer|also|jetzt|maintenant|ahora))*"
_NOT_A_PLACE = r"(?!(?:night|nights|home|weekends?|the weekend|the moment|times|least|most|once|all|it)\b)"
_AUX = r"(?:(?:have|has|am|is|are|was)\s+)?(?:been\s+)?(?:start(?:ed)?\s+)?"
_VERB_PHRASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("employer", re.compile(
        rf"^{_PERSON}{_ADVERBS}\s+{_AUX}(?:work(?:s|ing|ed)?{_ADVERBS}\s+(?:at|for)|employed{_ADVERBS}\s+(?:at|by)"
        rf"|(?:got|found|took|have|has)\s+a\s+(?:new\s+)?job\s+(?:at|with)|arbeite[tn]?{_ADVERBS}\s+(?:bei|für)"
        rf"|travaille{_ADVERBS}\s+(?:chez|pour)|trabajo{_ADVERBS}\s+(?:en|para))\s+{_NOT_A_PLACE}\S")),
    ("employer", re.compile(rf"^(?:ahora\s+)?trabajo{_ADVERBS}\s+(?:en|para)\s+\S"
                            r"|^我(?:现在|目前)?(?:在\S+工作|就职于)")),
    ("home_address", re.compile(
        rf"^{_PERSON}{_ADVERBS}\s+{_AUX}(?:live[sd]?|living|reside[sd]?){_ADVERBS}\s+at\s+\S")),
    ("home_city", re.compile(
        rf"^{_PERSON}{_ADVERBS}\s+{_AUX}(?:live[sd]?|living|reside[sd]?|based|wohne|lebe|vivo){_ADVERBS}"
        rf"\s+(?:in|en)\s+{_NOT_A_PLACE}\S")),
    ("home_city", re.compile(rf"^(?:ahora\s+)?vivo{_ADVERBS}\s+en\s+\S|^我(?:现在|目前)?住在\S"
                             r"|^j'(?:habite|vis)\s+(?:à|a|en)\s+\S")),
    ("allergy", re.compile(rf"^{_PERSON}{_ADVERBS}\s+(?:am\s+|'m\s+)?(?:severely\s+|very\s+)?allergic\s+to\s+\S"
                           r"|^(?:ich\s+bin|je\s+suis|soy)\s+allergi(?:sch\s+gegen|que\s+(?:à|au|aux)|co\s+a)\s+\S"
                           r"|^我对\S+过敏")),
    ("spoken_language", re.compile(rf"^{_PERSON}{_ADVERBS}\s+(?:also\s+)?(?:speak|speaks)\s+(?:fluent\s+)?\S"
                                   r"|^(?:ich\s+spreche|je\s+parle|hablo)\s+\S")),
    ("name", re.compile(
        rf"^(?:call me(?!\s+(?:on|at|back|later|when|if)\b)|{_PERSON}{_ADVERBS}\s+(?:am called|called|heiße"
        r"|heisse|m'appelle|me llamo))\s+\S"
        r"|^我叫\S")),
)


def attribute_key(text: str, *, closed: bool = False) -> str | None:
    """The attribute a one-line statement sets (``employer``), or None when none is recognised.

    Only a statement is looked at (one line, short): a paragraph sets no single attribute.
    ``closed``: only attributes of the vocabulary (what a personal value may be keyed on,
    as its key stays in plaintext).
    """
    found = attribute_of(text, closed=closed)
    return found[0] if found else None


def attribute_of(text: str, *, closed: bool = False) -> tuple[str, str] | None:
    """The attribute a one-line statement sets and the words of the value it gives it
    (``("allergy", "peanuts")`` of ``Allergy: peanuts``), or None.

    An attribute outside the vocabulary is taken only from a statement that reads as one:
    its value a few words with no pronoun, question or second sentence in it (``Preferred
    airline is KLM``), its words not all capitalised (``Caroline: hey, how are you?`` is a
    speaker's line and ``Release Notes: …`` a heading: neither names an attribute), and in
    the ``X is V`` form at least two words (``the weather is nice`` sets nothing).
    """
    folded = normalise_text(text)
    if not folded or "\n" in text.strip() or len(folded) > _MAX_STATEMENT:
        return None
    for pattern, form in _STATEMENTS:
        m = pattern.match(folded)
        if m is None:
            continue
        value = folded[m.end() - 1:]
        found = _attribute(m.group("attr"), form, closed, value=value, original=text)
        if found:
            return found, value
    for attr, pattern in _VERB_PHRASES:
        m = pattern.match(folded)
        if m:
            return attr, folded[m.end() - 1:]
    return None


def known_attribute(phrase: str) -> str | None:
    """The vocabulary's attribute for a phrase (``e-mail`` → ``email_address``), if it has one."""
    words = [w for w in _WORD.findall(normalise_text(phrase)) if w not in _MODIFIERS]
    return _PHRASE_ATTRIBUTE.get(" ".join(words))


def named_attributes(text: str) -> tuple[str, ...]:
    """The vocabulary's attributes a question names (``What is my e-mail address?`` →
    ``email_address``), longest phrase first, each once: how a read finds the records of an
    attribute that are in no search index (a personal value is sealed, so it has no words to
    match)."""
    words = _WORD.findall(normalise_text(text))
    found: list[str] = []
    used = [False] * len(words)
    for size in range(_MAX_ATTRIBUTE_WORDS, 0, -1):
        for i in range(len(words) - size + 1):
            if any(used[i:i + size]):
                continue
            attr = _PHRASE_ATTRIBUTE.get(" ".join(words[i:i + size]))
            if attr is not None and not (size == 1 and words[i] in _BARE_AMBIGUOUS["copula"]
                                         and attr not in MULTI_VALUED):
                used[i:i + size] = [True] * size
                found.append(attr)
    return tuple(dict.fromkeys(found))


def multi_valued_key(attr: str, value_words: str) -> str:
    """The key of one value of an attribute that holds several: ``allergy_peanuts``, or the
    attribute and a digest of the value when it has more than a few words. A personal
    value's key takes its keyed digest instead (``decide``), never its words."""
    words = [w for w in _WORD.findall(normalise_text(value_words)) if w not in _STOP]
    if not words:
        return attr
    if len(words) <= _MAX_VALUE_WORDS_IN_KEY:
        return normalise_key(f"{attr}_{'_'.join(words)}")
    return f"{attr}_{_digest_of(' '.join(words))}"


def attribute_prefix(attr: str) -> str:
    """The SQL ``LIKE`` pattern of every per-value key of a multi-valued attribute."""
    return attr.replace("_", "\\_") + "\\_%"


def _attribute(phrase: str, form: str, closed: bool, *, value: str, original: str) -> str | None:
    words = [w for w in _WORD.findall(phrase) if w not in _MODIFIERS]
    if not words or (len(words) == 1 and words[0] in _BARE_AMBIGUOUS.get(form, ())):
        return None
    known = known_attribute(phrase)
    if known is not None:
        return known
    if closed or len(words) > _MAX_ATTRIBUTE_WORDS:
        return None
    if any(w.isdigit() for w in words) or (len(words) == 1 and (len(words[0]) < 2 or words[0] in _LABELS
                                                                 or words[0] in _STOP)):
        return None
    return normalise_key("_".join(words)) if _states_open_attribute(form, words, value, original) else None


def _states_open_attribute(form: str, words: list[str], value: str, original: str) -> bool:
    """Whether a statement gives an attribute outside the vocabulary a value: the value reads as
    one, the words are not a name or a heading, and ``X is V`` has two words of attribute."""
    if not _reads_as_value(value) or _all_capitalised(original, words):
        return False
    return form != "copula" or len([w for w in words if w not in _DETERMINERS]) >= 2


def _reads_as_value(value: str) -> bool:
    """A few words with no pronoun, question or second sentence: a value, not an utterance."""
    words = _WORD.findall(value)
    return (0 < len(words) <= _MAX_VALUE_WORDS and not any(w in _NOT_IN_VALUES for w in words)
            and not _SENTENCE_BREAK.search(value))


def _all_capitalised(original: str, words: list[str]) -> bool:
    """Whether each of the attribute's words starts with a capital where the text has it: a
    name (a speaker's label) or a heading, not an attribute."""
    head = _WORD.findall(unicodedata.normalize("NFKC", original))[:len(words) + 2]
    cased = [w for w in head if w.casefold() in words and w[:1].isalpha() and w[:1].lower() != w[:1].upper()]
    return bool(cased) and len(cased) >= len(words) and all(w[:1].isupper() for w in cased)


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
    return _kind_key(kind, text, value) or content_key(text)


def _kind_key(kind: MemoryKind, text: str, value: Any) -> str | None:
    """The key a kind's own rule finds in the text, if any (the preference lexicon, the
    attribute a statement sets, a test id, error codes)."""
    if kind == "preference":
        folded = normalise_text(text)
        for subject, pattern in _PREFERENCE_SUBJECTS:
            if pattern.search(folded):
                return subject
    if kind in ATTRIBUTE_KINDS and isinstance(value, str):
        found = attribute_of(value)
        if found is None:
            return None
        attr, given = found
        return multi_valued_key(attr, given) if attr in MULTI_VALUED else attr
    if kind == "task_result":
        ident = _TEST_ID.search(unicodedata.normalize("NFKC", text).casefold())
        return normalise_key(ident.group(0)) if ident else None
    if kind == "diagnostic":
        codes = sorted({m.group(1).casefold() for p in (_ERRNO, _EXCEPTION) for m in p.finditer(text)})
        return normalise_key("_".join(codes[:MAX_WORDS])) if codes else None
    return None


def lookup_keys(text: str) -> tuple[str, ...]:
    """The canonical keys a key written as a person says it may stand for, most literal first.

    A proposal gets its key from an explicit key (its normal form) or, without one, from
    its value (the attribute a statement sets, the preference lexicon, then the content
    words), so a lookup tries the same: ``answer language`` is ``answer_language`` as an
    explicit key would be, then the attribute it names (``e-mail`` → ``email_address``),
    then ``response_language`` as the lexicon names it (what ``answer in Chinese`` proposed
    without a key is stored under), then its sorted content words (an explicit key said in
    another order: ``target deploy`` → ``deploy_target``), then its content key (a note
    without a key, said in the same words). Empty forms
    are left out; the tuple has at least one key whenever the text holds a letter or a
    digit.
    """
    keys = [normalise_key(text)]
    keys += [a for a in (known_attribute(text), attribute_key(text)) if a]
    folded = normalise_text(text)
    keys += [subject for subject, pattern in _PREFERENCE_SUBJECTS if pattern.search(folded)][:1]
    words = sorted({w for w in _WORD.findall(folded) if w not in _STOP})
    keys += [normalise_key("_".join(words[:MAX_WORDS])), content_key(text)]
    return tuple(dict.fromkeys(k for k in keys if k))


def key_repeats_value(key: str, value: Any) -> bool:
    """Whether every word of ``key`` is a word of the value's text: a key derived from the
    content words (``build_python_uv_…`` of ``The build uses Python and uv``) adds nothing a
    reader of the value does not see, so rendering it only spends tokens of the budget. A
    content key's digest part (``content_key``) is no word of the key."""
    parts = [p for p in _CONTENT_DIGEST.sub("", key).split("_") if p]
    words = set(_WORD.findall(normalise_text(text_of(value))))
    return bool(parts) and all(p in words for p in parts)


def content_key(text: str) -> str:
    """The key of a text that sets no attribute: its first content words (stop words dropped,
    in their order) and a digest of the whole text as ``value_identity`` normalises it.

    So a line keeps its own identity: two texts share a key only when they are the same value
    (case, width, spacing and the punctuation at their ends aside), and then they merge; a
    different line, however many words it shares, is never its tie or its supersession. The
    words are there for a reader of a receipt; the digest decides.
    """
    words = [w for w in _WORD.findall(normalise_text(text)) if w not in _STOP]
    if not words:
        return ""
    readable = normalise_key("_".join(dict.fromkeys(words[:READABLE_WORDS])))[:MAX_KEY - DIGEST_PART - 1].rstrip("_")
    return f"{readable}_{_digest_of(normalise_text(text))}"


def _digest_of(text: str) -> str:
    return blake3.blake3(text.encode()).hexdigest()[:DIGEST_PART]


def value_identity(value: Any, sealed: Sealed | None = None, digest: str | None = None) -> str:
    """What "the same value" means in a group: normalised text, canonical JSON, the keyed
    digest of a personal value, or the ciphertext.

    A sealed value cannot be compared without its key and two sealings of one
    plaintext differ, so a personal record carries ``value_digest`` (``value_digest``
    below), made before it was sealed: two records of one value have one digest. A
    sealed record without one (it arrived sealed) counts as a value of its own.
    """
    if digest is not None:
        return "digest:" + digest
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


# Digests made without an installation key (``key=None``): a key drawn once per process, so
# they agree within it and confirm nothing to anyone outside it.
_PROCESS_KEY = os.urandom(32)
_DIGEST_INFO = b"agentledger/memory-value/v1\x00"
DIGEST_HEX = 32


def value_digest(scope: str, value: Any, key: bytes | None) -> str:
    """The keyed digest of a personal value in one scope (HMAC-SHA256, 128 bits in hex).

    Keyed with the installation's marker key, so that a copy of the ledger cannot check a
    guessed value against it offline; the scope is in the message, so one value of two users
    gives two digests that link nothing.
    """
    message = _DIGEST_INFO + scope.encode() + b"\x00" + value_identity(value).encode()
    return hmac.new(key or _PROCESS_KEY, message, hashlib.sha256).hexdigest()[:DIGEST_HEX]


# What a group of tombstones is keyed by once no record of its key is left (``tombstone_key``).
TOMBSTONE_KEY_PREFIX = "forgotten:"
_TOMBSTONE_INFO = b"agentledger/forgotten-key/v1\x00"


def tombstone_key(scope: str, key: str, secret: bytes) -> str:
    """The keyed digest a forgotten key is kept under (HMAC-SHA256, 128 bits in hex).

    A key is often made of its value's words (``content_key``): a tombstone that kept it would
    keep the words the forget removed, in the group row, the record row, the history and the
    column statistics of each. So once only tombstones are left of a key, their group is keyed
    by this digest instead; the same key proposed again gives the same digest, so the group is
    found and the forget still holds (``core.memory.state``). ``secret`` is the installation's
    marker key (derived from the key-encryption key): a copy of the data folder cannot check a
    guessed key against it. Normalised keys never hold a ``:``, so no key looks like one.
    """
    message = _TOMBSTONE_INFO + scope.encode() + b"\x00" + key.encode()
    return TOMBSTONE_KEY_PREFIX + hmac.new(secret, message, hashlib.sha256).hexdigest()[:DIGEST_HEX]


def is_tombstone_key(key: str) -> bool:
    """Whether ``key`` is a ``tombstone_key`` (a group of forgotten records only)."""
    return key.startswith(TOMBSTONE_KEY_PREFIX)
