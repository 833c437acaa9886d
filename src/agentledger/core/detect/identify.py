"""Which language a stretch of text is in: CLD2, Google's compact language detector.

The instruction detector's word classes know 43 languages; the language rule
(``language.py``) holds external text in any other, since the detector's silence on it says
nothing. Telling "a language we know" from "some language" by counting our own function words
let close relatives through (before they had classes of their own, Galician was read as
Portuguese and Croatian as Polish by its short words "i" and "u"; Nepali is read as Hindi because
both are written in Devanagari). CLD2
names the language itself, 83 of them, from character statistics, offline and in microseconds a
sentence; it is a pure function of the text, so the core stays free of I/O.

It also tells text spelled backwards: words turned round read as a language only when they were
turned round to hide it (``reads_reversed``).
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

import pycld2

# Code points CLD2 refuses (it takes UTF-8 and rejects controls and lone surrogates).
_REFUSED = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_WORD = re.compile(r"[^\W\d_]{2,}")
# A reversed reading counts when it scores this far above the forward one (CLD2's score is per
# kilobyte of text: ordinary prose scores 700 to 1,600, letters of no language 0 to 400).
REVERSED_MIN_SCORE = 500.0
REVERSED_MARGIN = 2.0
MIN_REVERSED_WORDS = 5
# No reversal can score above this (CLD2's scores stop near 2,000), so forward text scoring at
# least half of it is not looked at turned round.
_PROSE_SCORE = 2200.0


class Identified(NamedTuple):
    """CLD2's first language for a text: its ISO code (``iw`` is Hebrew, ``zh-Hant``
    traditional Chinese), its name, the share of the text in it (percent), its score, and
    whether CLD2 calls the whole answer reliable."""

    code: str
    name: str
    percent: int
    score: float
    reliable: bool


@functools.lru_cache(maxsize=8192)
def identify(text: str) -> Identified | None:
    """The language ``text`` is in, or None when CLD2 cannot tell."""
    try:
        reliable, _, details = pycld2.detect(_REFUSED.sub(" ", text), bestEffort=True)[:3]
    except pycld2.error:
        return None
    name, code, percent, score = details[0]
    if code == "un":
        return None
    return Identified(code, name.lower().replace("_", " "), int(percent), float(score), bool(reliable))


def reads_reversed(text: str) -> bool:
    """Whether the words of ``text`` (five or more) read as a language once each is spelled
    backwards, and clearly better than as they stand: text hidden from a matcher by reversal.
    Ordinary text turned round reads as no language."""
    words = _WORD.findall(text)
    if len(words) < MIN_REVERSED_WORDS:
        return False
    return reads_only_turned(" ".join(words), " ".join(w[::-1] for w in words))


def reads_only_turned(text: str, turned: str) -> bool:
    """Whether ``turned`` (``text`` undone by a reversal, a letter shift, …) reads as prose in a
    language, reliably, and clearly better than ``text`` does as it stands."""
    ahead = identify(text)
    if ahead is not None and ahead.reliable and ahead.score * REVERSED_MARGIN >= _PROSE_SCORE:
        return False  # reads as prose already (the common case: one call, cached)
    back = identify(turned)
    if back is None or not back.reliable or back.score < REVERSED_MIN_SCORE:
        return False
    return ahead is None or back.score > REVERSED_MARGIN * ahead.score
