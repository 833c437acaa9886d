"""The time a query names, and how well each candidate's observation time fits it.

A question such as "where does Elena live now?", "what happened on 29 March 2026?", "what
news did she share last week?" or "what did he do for fun before pottery?" is answered by
*when* something was said as much as by its words: full text and vectors cannot tell the
newest of three moves from the first. ``when_of`` reads the time a query names (English
words; other languages name none here and are ranked as before):

- an **order**: ``now``, ``currently``, ``at the moment``, ``these days``, ``latest``,
  ``most recent``, ``still``, ``last`` (not "last week"), a closing ``after`` → newest first;
  ``first``, ``originally``, ``initially``, ``earliest``, ``used to``, ``previously``, a closing
  ``before`` ("where did she live before?") → oldest first;
- a **window**: a date (``29 March 2026``, ``March 29, 2026``, ``2026-03-29``: that day), a
  month (``March 2026``), or a span back from the memory's latest observation
  (``yesterday``, ``last week``, ``last month``, ``3 weeks ago``: relative to what the caller's
  memory last heard, which is now for a memory in use, and the end of a conversation for
  one that is replayed);
- a **pivot**: ``before X`` / ``after X`` (``since`` / ``until``), where X is whatever
  candidate holds most of X's words; "before or after X" names no side and orders nothing,
  and a pivot no candidate holds names no time for that read (``usable``: "resume after the
  interruption" when nothing said was about an interruption);
- ``when`` (``what date``, ``how long ago``) asks *for* a time: it orders nothing, but the
  reader needs the dates shown (``dated``).

``fit`` maps each candidate's observation time to [0, 1] for such a query; the read scores
it in place of freshness (``core.memory.read.score``). Pure functions of their inputs.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

from msgspec import Struct
from msgspec.structs import replace

_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS |= {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH})\.?,?\s+(\d{{4}})\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.IGNORECASE)
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_YEAR = re.compile(rf"\b({_MONTH})\.?\s+(\d{{4}})\b", re.IGNORECASE)
_AGO = re.compile(r"\b(\d+|a|an|one|two|three|four|five|six)\s+(day|week|month|year)s?\s+ago\b", re.IGNORECASE)
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_UNIT = {"day": timedelta(days=1), "week": timedelta(days=7), "month": timedelta(days=31),
         "year": timedelta(days=365)}
_LAST = {"yesterday": timedelta(days=1), "last night": timedelta(days=1), "last week": timedelta(days=7),
         "past week": timedelta(days=7), "last month": timedelta(days=31), "past month": timedelta(days=31),
         "last year": timedelta(days=365)}
_NEWEST = re.compile(r"\b(?:now|currently|current|at the moment|these days|nowadays|latest|most recent(?:ly)?"
                     r"|still|lately|recently|today|last(?!\s+(?:week|month|year|night)\b)|after(?=\s*[?.!]*$))\b",
                     re.IGNORECASE)
_OLDEST = re.compile(r"\b(?:first|originally|initially|earliest|used to|at first|previously|in the beginning"
                     r"|before(?=\s*[?.!]*$))\b", re.IGNORECASE)
_ASKS = re.compile(r"\b(?:when|what date|which date|what day|how long ago|what time)\b", re.IGNORECASE)
_PIVOT = re.compile(r"\b(before|after|since|until|till|prior to)\s+(.{1,60}?)(?:[?.!,;:]|$)", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+")
# Words that name no event (what a pivot phrase is matched on are its other words).
_FILLER = frozenset(("the", "a", "an", "to", "of", "in", "on", "at", "his", "her", "their", "my", "our", "your",
                     "he", "she", "they", "it", "moving", "he's", "she's", "was", "were", "did", "had", "got"))
# A day named "on 29 March" is that day; the fit falls off around a window over this scale.
_SPREAD = timedelta(days=7)


class When(Struct, frozen=True, omit_defaults=True):
    """The time a query names. ``order``: newest or oldest first; ``start``/``end``: an absolute
    window; ``back``: a window of that length ending at the latest observation; ``pivot``:
    ``before``/``after`` the candidate holding most of ``pivot_words``; ``back_to``: the
    window ``back`` ends that long before the latest observation ("3 weeks ago": from 4
    weeks to 2 weeks back); ``asks``: the query
    asks for a date (the reader needs the dates shown)."""

    order: Literal["newest", "oldest"] | None = None
    start: datetime | None = None
    end: datetime | None = None
    back: timedelta | None = None
    back_to: timedelta | None = None
    pivot: Literal["before", "after"] | None = None
    pivot_words: tuple[str, ...] = ()
    asks: bool = False

    @property
    def orders(self) -> bool:
        """Whether the query's time ranks candidates (not only asks for dates)."""
        return bool(self.order or self.start or self.back or self.pivot)


def _day(year: str, month: int, day: str) -> tuple[datetime, datetime] | None:
    try:
        start = datetime(int(year), month, int(day), tzinfo=UTC)
    except ValueError:
        return None
    return start, start + timedelta(days=1)


def _window(query: str) -> tuple[datetime, datetime] | None:
    """The absolute window a query names: a day, else a month."""
    if m := _DAY_MONTH_YEAR.search(query):
        return _day(m.group(3), _MONTHS[m.group(2).lower()], m.group(1))
    if m := _MONTH_DAY_YEAR.search(query):
        return _day(m.group(3), _MONTHS[m.group(1).lower()], m.group(2))
    if m := _ISO_DAY.search(query):
        return _day(m.group(1), int(m.group(2)), m.group(3)) if 1 <= int(m.group(2)) <= 12 else None
    if m := _MONTH_YEAR.search(query):
        year, month = int(m.group(2)), _MONTHS[m.group(1).lower()]
        start = datetime(year, month, 1, tzinfo=UTC)
        return start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return None


def _back(query: str) -> tuple[timedelta | None, timedelta | None]:
    """A window back from the latest observation: its start and end, how long before it."""
    folded = query.lower()
    if m := _AGO.search(folded):
        n, unit = _NUMBERS.get(m.group(1)) or int(m.group(1)), _UNIT[m.group(2)]
        return unit * (n + 1), unit * (n - 1) if n > 1 else None
    return next((span for phrase, span in _LAST.items() if phrase in folded), None), None


def when_of(query: str) -> When | None:
    """The time ``query`` names, or None when it names none (see the module docstring)."""
    window = _window(query)
    back, back_to = (None, None) if window else _back(query)
    pivots = {m.group(1).lower() for m in _PIVOT.finditer(query)}
    pivot: Literal["before", "after"] | None = None
    words: tuple[str, ...] = ()
    if len(pivots) == 1 and not re.search(r"\bbefore or after\b|\bafter or before\b", query, re.IGNORECASE):
        side = pivots.pop()
        pivot = "before" if side in ("before", "until", "till", "prior to") else "after"
        phrase = next(m.group(2) for m in _PIVOT.finditer(query))
        words = tuple(w for w in _WORD.findall(phrase.lower()) if w not in _FILLER)[:4]
        pivot = pivot if words else None
    order: Literal["newest", "oldest"] | None = None
    if _NEWEST.search(query):
        order = "newest"
    elif _OLDEST.search(query):
        order = "oldest"
    asks = bool(_ASKS.search(query))
    when = When(order=order, start=window[0] if window else None, end=window[1] if window else None, back=back,
                back_to=back_to, pivot=pivot, pivot_words=words, asks=asks)
    return when if when.orders or asks else None


def usable(when: When | None, texts: Sequence[str]) -> When | None:
    """``when`` as a read of candidates with words ``texts`` can use it: a pivot none of them
    holds a word of is dropped (it names no moment here, so it neither orders nor asks for
    dates to be shown); None when nothing is left of it."""
    if when is None or when.pivot is None:
        return when
    words = set(when.pivot_words)
    if any(words & set(_WORD.findall(text.lower())) for text in texts):
        return when
    rest = replace(when, pivot=None, pivot_words=())
    return rest if rest.orders or rest.asks else None


def fit(when: When, observed: Sequence[datetime], texts: Sequence[str]) -> list[float]:
    """How well each candidate's observation time fits ``when``, in [0, 1] (``texts``: the
    candidates' words, to find a pivot). The parts a query names are averaged: an order is
    linear over the candidates' span (1 for the newest, or the oldest); a window is 1 inside,
    ``1 / (1 + distance / 7 days)`` outside; a pivot is 1 on its side of the pivot's day,
    0 on the pivot's day and the other side."""
    if not observed:
        return []
    parts: list[list[float]] = []
    first, last = min(observed), max(observed)
    span = (last - first).total_seconds() or 1.0
    if when.order is not None:
        newness = [(t - first).total_seconds() / span for t in observed]
        parts.append(newness if when.order == "newest" else [1 - x for x in newness])
    window = (when.start, when.end) if when.start and when.end else \
        (last - when.back, last - (when.back_to or -timedelta(seconds=1))) if when.back else None
    if window is not None:
        parts.append([_inside(t, *window) for t in observed])
    if when.pivot is not None:
        at = _pivot_time(when.pivot_words, observed, texts)
        if at is not None:
            day = at.date()
            parts.append([float(t.date() < day) if when.pivot == "before" else float(t.date() > day)
                          for t in observed])
    if not parts:
        return [0.0] * len(observed)
    return [sum(p[i] for p in parts) / len(parts) for i in range(len(observed))]


def _inside(t: datetime, start: datetime, end: datetime) -> float:
    if start <= t < end:
        return 1.0
    distance = start - t if t < start else t - end
    return 1.0 / (1.0 + distance / _SPREAD)


def _pivot_time(words: Sequence[str], observed: Sequence[datetime], texts: Sequence[str]) -> datetime | None:
    """The observation time of the candidate holding most of ``words`` (the first such
    candidate: the caller's best ranked); None when none holds any."""
    best, at = 0, None
    for t, text in zip(observed, texts, strict=True):
        have = set(_WORD.findall(text.lower()))
        n = sum(w in have for w in words)
        if n > best:
            best, at = n, t
    return at
