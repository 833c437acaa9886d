"""What a text says once its encodings are undone, and whether it hides itself.

Two things the instruction detector needs that no list of phrases gives it:

- ``layers(text)``: the texts a model would read out of ``text`` once the encodings a carrier
  or an attacker wraps it in are undone — JSON string escapes (``\\u0627``, surrogate pairs,
  ``\\"``), C-style byte escapes (``\\x4c\\xc6``), percent-encoding, HTML character references,
  a run stored backwards behind a right-to-left override, letters spaced apart, one sentence
  cut into JSON members or table cells. Each layer is matched like the text itself.
- ``obfuscation(text)``: spans that only make sense as hiding: a direction override, TAG
  characters that are not an emoji flag's tag sequence, invisible characters inside words,
  words that mix Latin, Cyrillic and Greek letters, strike-through overlay marks, letters
  spaced apart. Ordinary text has none of them — emoji joiners, a Persian or Indic joiner, a
  right-to-left mark in Arabic, full-width Japanese and a Greek sentence naming an API are not
  counted — so from a source that may not give the agent orders their presence alone is
  suspect, in any language. The instruction detector does not report them (an obfuscated
  sentence is an instruction only if it says one); the memory policy holds them from such
  sources (``core/memory/decide.py``).
"""

from __future__ import annotations

import html
import re
import unicodedata
from urllib.parse import unquote

from agentledger.core.detect.finding import Finding

_JSON_ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}|\\[\"\\/nrt]")
_BYTE_ESCAPES = re.compile(r"(?:\\x[0-9a-fA-F]{2}){4,}")
_PERCENT = re.compile(r"(?:%[0-9A-Fa-f]{2}){4,}")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z]{2,8});")
_OVERRIDE_RUN = re.compile(r"\u202e([^\u202c\u202d]*)(?:\u202c|$)")
# Characters set apart: "i g n o r e  a l l" (single spaces inside a word, two between words;
# at least nine in a row).
_SPACED = re.compile(r"(?<!\S)(?:\S[ \t]{1,2}){8,}\S(?!\S)")
# Where a carrier cuts one sentence into fields: JSON members, table cells.
_FIELD_BREAK = re.compile(r"[\"']\s*,\s*[\"'][\w-]{1,40}[\"']\s*:\s*[\"']|</t[dh]>\s*<t[dh][^>]*>", re.IGNORECASE)
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


def layers(text: str, depth: int = 2) -> list[str]:
    """The texts encoded in ``text`` (not ``text`` itself), undone up to ``depth`` times."""
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
    return out


def _decode_once(text: str) -> list[str]:
    out = []
    if "\\" in text:
        if _JSON_ESCAPE.search(text):
            out.append(_json_unescaped(text))
        if _BYTE_ESCAPES.search(text):
            out.append(_BYTE_ESCAPES.sub(_bytes_unescaped, text))
    if "%" in text and _PERCENT.search(text):
        out.append(_PERCENT.sub(lambda m: unquote(m.group()), text))
    if "&" in text and len(_ENTITY.findall(text)) >= 4:
        out.append(html.unescape(text))
    if "\u202e" in text:
        out.append(_OVERRIDE_RUN.sub(lambda m: m.group(1)[::-1], text))
    if _SPACED.search(text):
        out.append(_SPACED.sub(_unspaced, text))
    if _FIELD_BREAK.search(text):
        out.append(_FIELD_BREAK.sub(" ", text))
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
_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


def _script(c: str) -> str:
    name = unicodedata.name(c, "")
    return next((s for s in (*_NON_JOINING, "ARABIC", "DEVANAGARI") if name.startswith(s)), "OTHER")


def obfuscation(text: str) -> list[tuple[str, int, int]]:
    """``(signal, start, end)`` for each way ``text`` hides itself (see the module docstring)."""
    if text.isascii():
        m = _SPACED.search(text)
        return [("spaced_letters", *m.span())] if m else []
    out: list[tuple[str, int, int]] = []
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
    mixed = [m.span() for m in _WORD.finditer(text)
             if len({s for c in m.group() if (s := _script(c)) in _SCRIPTS}) > 1]
    if mixed:
        out.append(("mixed_scripts", mixed[0][0], mixed[-1][1]))
    if m := _SPACED.search(text):
        out.append(("spaced_letters", *m.span()))
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
