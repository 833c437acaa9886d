"""What a text says once its encodings are undone, and whether it hides itself.

Two things the instruction detector needs that no list of phrases gives it:

- ``layers(text)``: the texts a model would read out of ``text`` once the encodings a carrier
  or an attacker wraps it in are undone — JSON string escapes (``\\u0627``, surrogate pairs,
  ``\\"``), C-style byte escapes (``\\x4c\\xc6``), percent-encoding, HTML character references,
  a run stored backwards behind a right-to-left override, letters spaced apart or dotted
  (``i.g.n.o.r.e``), one word a line, words spelled backwards, one sentence cut into JSON members
  or table cells, quoted-printable, and bytes smuggled in variation selectors after an emoji.
  Each layer is matched like the text itself.
- ``obfuscation(text)``: spans that only make sense as hiding: a direction override, TAG
  characters that are not an emoji flag's tag sequence, invisible characters inside words,
  words that mix Latin, Cyrillic and Greek letters, strike-through overlays and marks stacked
  on letters, letters spaced apart or dotted, words of styled letters (circled, mathematical,
  full-width Latin), bytes in variation selectors, a sentence encoded in base64, base32 or hex,
  words spelled backwards (``reversed_runs``: they read as one of CLD2's 83 languages only turned
  round).
  None of them depends on the language of what is hidden. Ordinary text has none of them —
  emoji joiners, a Persian or Indic joiner, a right-to-left mark in Arabic, full-width Japanese,
  a Greek sentence naming an API, circled step numbers and ``U.S.A.`` are not counted — so from
  a source that may not give the agent orders their presence alone is suspect, in any language.
  The instruction detector does not report them (an obfuscated sentence is an instruction only
  if it says one); the memory policy holds them from such sources (``core/memory/decide.py``).
"""

from __future__ import annotations

import base64
import binascii
import functools
import html
import quopri
import re
import unicodedata
from urllib.parse import unquote

from agentledger.core.detect import address, identify
from agentledger.core.detect.finding import Finding

_JSON_ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}|\\[\"\\/nrt]")
_BYTE_ESCAPES = re.compile(r"(?:\\x[0-9a-fA-F]{2}){4,}")
_PERCENT = re.compile(r"(?:%[0-9A-Fa-f]{2}){4,}")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z]{2,8});")
# A numeric reference to a letter or digit ("&#73;gnore", "&#x69;"): nobody writes one in text
# but to hide a word from a reader of the text as it stands.
_LETTER_REFERENCE = re.compile(r"&#(?:0*(?:4[89]|5[0-7]|6[5-9]|[7-8][0-9]|9[07-9]|1[01][0-9]|12[0-2])"
                               r"|[xX]0*(?:3[0-9]|[46][1-9a-fA-F]|[57][0-9aA]));")
_OVERRIDE_RUN = re.compile(r"\u202e([^\u202c\u202d]*)(?:\u202c|$)")
# Characters set apart: "i g n o r e  a l l" (single spaces inside a word, two between words;
# at least nine in a row).
_SPACED = re.compile(r"(?<!\S)(?:\S[ \t]{1,2}){8,}\S(?!\S)")
# Where a carrier cuts one sentence into fields: JSON members, table cells.
_FIELD_BREAK = re.compile(r"[\"']\s*,\s*[\"'][\w-]{1,40}[\"']\s*:\s*[\"']|</t[dh]>\s*<t[dh][^>]*>", re.IGNORECASE)
# Letters set apart by dots: "i.g.n.o.r.e" (five letters or more; "U.S.A." and "e.g." are not).
_DOTTED = re.compile(r"(?<![\w.])(?:[^\W\d_]\.){4,}[^\W\d_](?![\w])\.?")
# Once a text has such a word, its short dotted words ("a.l.l") are put back too.
_DOTTED_SHORT = re.compile(r"(?<![\w.])(?:[^\W\d_]\.){1,}[^\W\d_](?![\w])\.?")
# One word a line, six lines or more in a row.
_WORD_LINES = re.compile(r"(?:^[ \t]*[^\s]+[ \t]*\n){5,}[ \t]*[^\s]+[ \t]*$", re.MULTILINE)
_QUOTED_PRINTABLE = re.compile(r"=[0-9A-F]{2}|=\n")
# Bytes in variation selectors (U+FE00..FE0F for 0..15, U+E0100..E01EF for 16..255); one FE0E
# or FE0F after a symbol is the ordinary text or emoji presentation, not a byte.
_SMUGGLED = re.compile("[\ufe00-\ufe0f\U000e0100-\U000e01ef]{4,}")
# Words cut by hyphens into three pieces or more, two such words or more ("pre-vi-ous
# in-struc-tions"): read without the hyphens too (a compound, "state-of-the-art", is one such word).
_HYPHENATED = re.compile(r"(?<=[^\W\d_])-(?=[^\W\d_])")
_CHOPPED_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+){2,}")
# Letters no normalisation turns into letters: small capitals, negative squared letters, regional
# indicators (a flag is two of them). Read as the letters they show: a view, never a signal, since
# a shop's stylised name or a row of flags is ordinary.
_SMALL_CAPS = "ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘꞯʀꜱᴛᴜᴠᴡxʏᴢ"
_LETTERS = str.maketrans({**{c: "abcdefghijklmnopqrstuvwxyz"[i] for i, c in enumerate(_SMALL_CAPS) if c != "x"},
                          **{chr(0x1F170 + i): chr(0x41 + i) for i in range(26)},
                          **{chr(0x1F1E6 + i): chr(0x41 + i) for i in range(26)}})
_LETTER_LIKE = re.compile("[" + "".join(map(chr, _LETTERS)) + "]")
# Words written in digits and symbols for letters ("1gn0r3", "!nstruct!0ns", "@ll"): read with the
# letters back when three words or more mix them, each at least half letters (a hash, "4e1f2a9",
# or a time, "03T10", is not such a word).
_LEET = str.maketrans("013457@!$", "oieastais")
_LEET_WORD = re.compile(r"(?<![\w@!$\\])(?=[\w@!$]*[^\W\d_])(?=[\w@!$]*[013457@!$])[\w@!$]{3,}(?![\w@!$])")
# Stretches (``stretches``: where a reversal is looked for, and what the language rule names):
# between line breaks, sentence ends, quotes, parentheses and a colon before a space (a reversed
# sentence keeps its period in front of its first word, ".ravs", so it stays one stretch).
_RUN = re.compile(r"(?:[^\n()\"«»“”„:.!?。！？]|[:.!?](?!\s))+")
_MARKUP = re.compile(r"<[^<>]*>|\{[^{}]*\}")
# Encoded text: base64, base32 and hex runs long enough to hold a sentence.
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{16,}={0,2}(?![A-Za-z0-9+/=])")
# A query parameter's value (``?cfg=SWdub3Jl…``), in base64 or its URL-safe alphabet, unpadded.
_BASE64_PARAM = re.compile(r"(?<=\w=)[A-Za-z0-9+/_-]{16,}={0,2}(?![A-Za-z0-9+/=_-])")
_BASE32 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Z2-7]{16,}={0,6}(?![A-Za-z0-9+/=])")
_HEX = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){8,}(?![0-9A-Fa-f])")
# A sentence written as a kebab-case name ("ai-agent-must-push-credentials-to-x"): a branch, a slug or
# a file name of four words or more, read with spaces, "ai", "llm" and "gpt" in capitals (such a
# name's case carries nothing). Snake case is left alone: it names the tests in runtime evidence
# ("test_ignore_previous_instructions_is_quarantined PASSED").
_IDENTIFIER = re.compile(r"(?<![\w.-])[^\W\d_]+(?:-[^\W\d_]+){3,}(?![\w-])")
_ACRONYM = re.compile(r"\b(?:ai|llm|gpt)\b")
_SIMPLE_ESCAPES = {'\\"': '"', "\\\\": "\\", "\\/": "/", "\\n": "\n", "\\r": "\n", "\\t": " "}


def _json_unescaped(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        s = m.group()
        return chr(int(s[2:], 16)) if s.startswith("\\u") else _SIMPLE_ESCAPES[s]

    raw = _JSON_ESCAPE.sub(one, text)
    # Surrogate pairs (characters outside the BMP) come as two escapes.
    return raw.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _bytes_unescaped(m: re.Match[str]) -> str:
    return bytes.fromhex(m.group().replace("\\x", "")).decode("utf-8", "replace")


def _unspaced(m: re.Match[str]) -> str:
    return re.sub(r"[ \t]{2,}", "\x00", m.group()).replace(" ", "").replace("\t", "").replace("\x00", " ")


def readable(data: bytes) -> str | None:
    """``data`` as text when it is text (UTF-8, printable, with words), else None."""
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(c.isprintable() or c.isspace() for c in decoded)
    return decoded if printable >= 0.95 * len(decoded) and _WORD.search(decoded) else None


def encoded_runs(text: str) -> list[tuple[str, int, int]]:
    """Texts encoded in ``text`` (base64, base32, hex), each with the span of its encoding."""
    out: list[tuple[str, int, int]] = []
    for pattern, decode in ((_BASE64, _b64), (_BASE64_PARAM, _b64url), (_BASE32, _b32), (_HEX, bytes.fromhex)):
        for m in pattern.finditer(text):
            token = m.group()
            try:
                data = decode(token)
            except (binascii.Error, ValueError):
                continue
            if (decoded := readable(data)) is not None:
                out.append((decoded, *m.span()))
    return out


def _b64(token: str) -> bytes:
    return base64.b64decode(token + "=" * (-len(token) % 4), validate=True)


def _b64url(token: str) -> bytes:
    return _b64(token.rstrip("=").replace("-", "+").replace("_", "/"))


def _b32(token: str) -> bytes:
    return base64.b32decode(token + "=" * (-len(token.rstrip("=")) % 8 if "=" not in token else 0))


def _undotted(m: re.Match[str]) -> str:
    return m.group().replace(".", "")


def _unsmuggled(m: re.Match[str]) -> str:
    data = bytes(ord(c) - 0xFE00 if ord(c) < 0xFE10 else ord(c) - 0xE0100 + 16 for c in m.group())
    return " " + data.decode("utf-8", "replace") + " "


def _leet(word: str) -> bool:
    letters = sum(c.isalpha() for c in word)
    return letters >= 2 and 2 * letters >= len(word)


def _spelled_out(m: re.Match[str]) -> str:
    return _ACRONYM.sub(lambda a: a.group().upper(), m.group().replace("-", " "))


def as_letters(text: str) -> str:
    """``text`` with small capitals, negative squared letters and regional indicators as the
    letters they show."""
    return text if text.isascii() else text.translate(_LETTERS)


def stretches(text: str) -> list[str]:
    """The lines, sentences and quoted or parenthesised stretches of ``text``."""
    return _RUN.findall(text)


def reversed_runs(text: str) -> list[tuple[int, int]]:
    """Spans of ``text`` (a line, a sentence, a quoted or parenthesised stretch, markup left out)
    whose words read as a language only once each is spelled backwards (``identify``): the
    language does not matter, so a reversed Danish sentence is found as a reversed English one."""
    return list(_reversed_runs(text))


@functools.lru_cache(maxsize=1024)
def _reversed_runs(text: str) -> tuple[tuple[int, int], ...]:
    return tuple(m.span() for m in _RUN.finditer(text)
                 if identify.reads_reversed(address.without_addresses(_MARKUP.sub(" ", m.group()))))


def _unreversed(text: str, runs: list[tuple[int, int]]) -> str:
    out, last = [], 0
    for a, b in runs:
        out += [text[last:a], re.sub(r"[^\W\d_]+", lambda m: m.group()[::-1], text[a:b])]
        last = b
    return "".join([*out, text[last:]])


def layers(text: str, depth: int = 2) -> list[str]:
    """The texts encoded in ``text`` (not ``text`` itself), undone up to ``depth`` times."""
    return list(_layers(text, depth))


@functools.lru_cache(maxsize=1024)
def _layers(text: str, depth: int) -> tuple[str, ...]:
    """``layers``, kept for the texts just seen: the instruction detector and the language rule
    both read the layers of the same proposal."""
    out: list[str] = []
    seen = {text}
    frontier = [text]
    for _ in range(depth):
        nxt: list[str] = []
        for t in frontier:
            for decoded in _decode_once(t):
                if decoded not in seen:
                    seen.add(decoded)
                    out.append(decoded)
                    nxt.append(decoded)
        frontier = nxt
    return tuple(out)


def _decode_once(text: str) -> list[str]:
    out = []
    if "\\" in text:
        if _JSON_ESCAPE.search(text):
            out.append(_json_unescaped(text))
        if _BYTE_ESCAPES.search(text):
            out.append(_BYTE_ESCAPES.sub(_bytes_unescaped, text))
    if "%" in text and _PERCENT.search(text):
        out.append(_PERCENT.sub(lambda m: unquote(m.group()), text))
    if "&" in text and (len(_ENTITY.findall(text)) >= 4 or _LETTER_REFERENCE.search(text)):
        out.append(html.unescape(text))
    if "\u202e" in text:
        out.append(_OVERRIDE_RUN.sub(lambda m: m.group(1)[::-1], text))
    if _SPACED.search(text):
        out.append(_SPACED.sub(_unspaced, text))
    if _FIELD_BREAK.search(text):
        out.append(_FIELD_BREAK.sub(" ", text))
    return out + _relaid(text)


def _relaid(text: str) -> list[str]:
    """What a text says once letters and words laid out to pass a matcher are put back."""
    out = []
    if "." in text and _DOTTED.search(text):
        out.append(_DOTTED_SHORT.sub(_undotted, text))
    if "\n" in text and _WORD_LINES.search(text):
        out.append(_WORD_LINES.sub(lambda m: " ".join(m.group().split()), text))
    if "=" in text and len(_QUOTED_PRINTABLE.findall(text)) >= 3:
        out.append(quopri.decodestring(text.encode("utf-8", "replace")).decode("utf-8", "replace"))
    if not text.isascii() and _SMUGGLED.search(text):
        out.append(_SMUGGLED.sub(_unsmuggled, text))
    if runs := reversed_runs(text):
        out.append(_unreversed(text, runs))
    if "-" in text and _IDENTIFIER.search(text):
        out.append(_IDENTIFIER.sub(_spelled_out, text))
    if "-" in text and len(_CHOPPED_WORD.findall(text)) >= 2:
        out.append(_HYPHENATED.sub("", text))
    if not text.isascii() and len(_LETTER_LIKE.findall(text)) >= 3:
        out.append(as_letters(text))
    if sum(map(_leet, _LEET_WORD.findall(text))) >= 3:
        out.append(_LEET_WORD.sub(lambda m: m.group().translate(_LEET) if _leet(m.group()) else m.group(), text))
    return out


_OVERRIDES = frozenset("\u202a\u202b\u202d\u202e")
_TAG = range(0xE0000, 0xE0080)
_FLAG_TAGS = re.compile("\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{2,7}\U000e007f")
# Invisible inside a word: always suspect (zero-width space, word joiner, BOM, soft hyphen,
# invisible operators, Mongolian vowel separator)...
_INVISIBLE = frozenset("\u200b\u2060\ufeff\u00ad\u2061\u2062\u2063\u2064\u180e")
# ...and the joiners when they sit between letters of scripts that never join (they are
# ordinary in emoji sequences, Arabic-script and Indic text).
_JOINERS = frozenset("\u200c\u200d")
_NON_JOINING = ("LATIN", "CYRILLIC", "GREEK", "HEBREW", "CJK", "HIRAGANA", "KATAKANA", "HANGUL", "THAI")
_OVERLAYS = frozenset(chr(c) for c in (*range(0x0334, 0x0339), *range(0x20D2, 0x20D5), 0x20E5, 0x20E6))
_WORD = re.compile(r"[^\W\d_]{2,}")
# Marks no ordinary text stacks on a Latin letter: the combining Latin small letters, the marks of
# the supplement and extended blocks, or three marks in a row on one letter.
_STACKED_MARKS = re.compile("[\u0363-\u036f\u1ab0-\u1aff\u1dc0-\u1dff]|[\u0300-\u036f]{3,}")
# Words of letters styled to pass a matcher: circled, mathematical, full-width Latin (two or more
# in a row; full-width digits and a Japanese text's three-letter company name are not words of it).
_STYLED_WORD = re.compile("[\u24b6-\u24e9\U0001d400-\U0001d6a5\uff21-\uff3a\uff41-\uff5a]{2,}")
_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


def _script(c: str) -> str:
    name = unicodedata.name(c, "")
    return next((s for s in (*_NON_JOINING, "ARABIC", "DEVANAGARI") if name.startswith(s)), "OTHER")


def obfuscation(text: str) -> list[tuple[str, int, int]]:
    """``(signal, start, end)`` for each way ``text`` hides itself (see the module docstring)."""
    out = _laid_out(text)
    if text.isascii():
        return out
    over = [i for i, c in enumerate(text) if c in _OVERRIDES]
    if over:
        out.append(("direction_override", over[0], over[-1] + 1))
    flags = {i for m in _FLAG_TAGS.finditer(text) for i in range(*m.span())}
    tags = [i for i, c in enumerate(text) if ord(c) in _TAG and i not in flags]
    if tags:
        out.append(("tag_characters", tags[0], tags[-1] + 1))
    inside = [i for i in range(1, len(text) - 1) if _hides_in_word(text, i)]
    if len(inside) >= 2:
        out.append(("invisible_in_words", inside[0], inside[-1] + 1))
    overlays = [i for i, c in enumerate(text) if c in _OVERLAYS]
    if len(overlays) >= 3:
        out.append(("overlay_marks", overlays[0], overlays[-1] + 1))
    stacked = [m.start() for m in _STACKED_MARKS.finditer(text)]
    if len(stacked) >= 3:
        out.append(("stacked_marks", stacked[0], stacked[-1] + 1))
    styled = [m.span() for m in _STYLED_WORD.finditer(text)]
    if len(styled) >= 3:
        out.append(("styled_letters", styled[0][0], styled[-1][1]))
    if m := _SMUGGLED.search(text):
        out.append(("smuggled_bytes", *m.span()))
    mixed = [m.span() for m in _WORD.finditer(text)
             if len({s for c in m.group() if (s := _script(c)) in _SCRIPTS}) > 1]
    if mixed:
        out.append(("mixed_scripts", mixed[0][0], mixed[-1][1]))
    return out


def _laid_out(text: str) -> list[tuple[str, int, int]]:
    """The signals of letters and words laid out or encoded to pass a matcher, in any script."""
    out: list[tuple[str, int, int]] = []
    if m := _SPACED.search(text):
        out.append(("spaced_letters", *m.span()))
    dotted = [m.span() for m in _DOTTED.finditer(text)] if "." in text else []
    if len(dotted) >= 2:
        out.append(("dotted_letters", dotted[0][0], dotted[-1][1]))
    if backwards := reversed_runs(text):
        out.append(("reversed_words", backwards[0][0], backwards[-1][1]))
    encoded = [(a, b) for decoded, a, b in encoded_runs(text) if len(_WORD.findall(decoded)) >= 4]
    if encoded:
        out.append(("encoded_text", encoded[0][0], encoded[-1][1]))
    return out


def _hides_in_word(text: str, i: int) -> bool:
    c = text[i]
    if c not in _INVISIBLE and c not in _JOINERS:
        return False
    j = i + 1
    while j < len(text) and (text[j] in _INVISIBLE or text[j] in _JOINERS):
        j += 1
    before, after = text[i - 1], text[j] if j < len(text) else ""
    if not (before.isalpha() and after.isalpha()):
        return False
    if c in _INVISIBLE:
        return True
    return _script(before) in _NON_JOINING and _script(after) in _NON_JOINING


def find_obfuscation(text: str) -> list[Finding]:
    """``obfuscation(text)`` as findings, one per signal (its kind)."""
    return [Finding(signal, start, end, "own.obfuscation") for signal, start, end in obfuscation(text)]
