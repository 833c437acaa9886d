"""The time a query names (``core.memory.when``) and how the read scores it.

A read of "where does Elena live now?" and one of "which city did she live in first?" must
order three moves differently though full text and vectors see the same words; a query that
names no time must score as it always did (freshness), and one in another language names none.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentledger.core.memory.read import score, time_fits
from agentledger.core.memory.when import When, fit, usable, when_of

T0 = datetime(2026, 1, 5, tzinfo=UTC)
DAYS = [T0, T0 + timedelta(days=40), T0 + timedelta(days=80), T0 + timedelta(days=120)]
TEXTS = ["moved to Lisbon", "relocated to Porto", "took up pottery", "a house in Graz"]


@pytest.mark.parametrize(("query", "expected"), [
    ("Where does Elena live now?", When(order="newest")),
    ("Which company does Bruno work for at the moment?", When(order="newest")),
    ("Which city did Elena live in first?", When(order="oldest")),
    ("Where did Elena live before?", When(order="oldest")),
    ("What was the last thing Bruno said about the move?", When(order="newest")),
    ("What happened to Bruno on 29 March 2026?",
     When(start=datetime(2026, 3, 29, tzinfo=UTC), end=datetime(2026, 3, 30, tzinfo=UTC))),
    ("What did she say on March 29th, 2026?",
     When(start=datetime(2026, 3, 29, tzinfo=UTC), end=datetime(2026, 3, 30, tzinfo=UTC))),
    ("Anything from 2026-03-29?",
     When(start=datetime(2026, 3, 29, tzinfo=UTC), end=datetime(2026, 3, 30, tzinfo=UTC))),
    ("What did we decide in February 2026?",
     When(start=datetime(2026, 2, 1, tzinfo=UTC), end=datetime(2026, 3, 1, tzinfo=UTC))),
    ("What did we decide in December 2026?",
     When(start=datetime(2026, 12, 1, tzinfo=UTC), end=datetime(2027, 1, 1, tzinfo=UTC))),
    ("What news did Bruno share last week?", When(back=timedelta(days=7))),
    ("What broke two weeks ago?", When(back=timedelta(days=21), back_to=timedelta(days=7))),
    ("What broke a month ago?", When(back=timedelta(days=62))),
    ("What did Elena do for fun before pottery?", When(pivot="before", pivot_words=("pottery",))),
    ("Where did Elena live before moving to Graz?", When(pivot="before", pivot_words=("graz",))),
    ("When did Elena move to Porto?", When(asks=True)),
])
def test_the_time_a_query_names(query: str, expected: When) -> None:
    assert when_of(query) == expected


@pytest.mark.parametrize("query", [
    "What is the name of Elena's cat?",
    "Did Elena adopt the cat before or after moving to Porto?",  # names no side
    "¿Dónde vive Elena ahora?",  # other languages name no time here
    "What is 2026-13-40?",  # not a date
])
def test_a_query_naming_no_time_orders_nothing(query: str) -> None:
    when = when_of(query)
    assert when is None or not when.orders


def test_fit_orders_by_the_time_named() -> None:
    assert fit(When(order="newest"), DAYS, TEXTS) == [0.0, 1 / 3, 2 / 3, 1.0]
    assert fit(When(order="oldest"), DAYS, TEXTS) == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0])
    # A day: 1 inside it, falling with the distance in weeks outside.
    day = fit(When(start=DAYS[1], end=DAYS[1] + timedelta(days=1)), DAYS, TEXTS)
    assert day[1] == 1.0 and day[0] < day[2] < 1.0 and day[3] < day[2]
    # Last week: a week back from the latest observation, whatever now is.
    assert fit(When(back=timedelta(days=7)), DAYS, TEXTS)[3] == 1.0
    assert max(fit(When(back=timedelta(days=7)), DAYS, TEXTS)[:3]) < 0.2
    # Before pottery: everything said before the day pottery was, nothing from that day on.
    assert fit(When(pivot="before", pivot_words=("pottery",)), DAYS, TEXTS) == [1.0, 1.0, 0.0, 0.0]
    assert fit(When(pivot="after", pivot_words=("pottery",)), DAYS, TEXTS) == [0.0, 0.0, 0.0, 1.0]
    # A pivot nobody mentions orders nothing.
    assert fit(When(pivot="before", pivot_words=("chess",)), DAYS, TEXTS) == [0.0] * 4


class _C:
    def __init__(self, record_id: str, observed_at: datetime, relevance: float) -> None:
        self.record_id, self.observed_at, self.relevance = record_id, observed_at, relevance


def test_the_fit_takes_freshness_place_only_when_a_time_is_named() -> None:
    now = DAYS[-1] + timedelta(days=200)
    items = [_C(str(i), d, 0.5) for i, d in enumerate(DAYS)]
    assert time_fits(when_of("Where does Elena live?"), items, lambda c: "") == {}
    assert time_fits(when_of("When did she move?"), items, lambda c: "") == {}  # asks, orders nothing
    first = time_fits(when_of("Which city did Elena live in first?"), items, lambda c: TEXTS[int(c.record_id)])
    scores = {rid: score(0.5, 6, DAYS[int(rid)], "fact", now, fit=f) for rid, f in first.items()}
    assert sorted(scores, key=lambda r: -scores[r]) == ["0", "1", "2", "3"]
    plain = {str(i): score(0.5, 6, d, "fact", now) for i, d in enumerate(DAYS)}
    assert sorted(plain, key=lambda r: -plain[r]) == ["3", "2", "1", "0"]  # freshness: newest first


def test_a_pivot_no_candidate_holds_names_no_time() -> None:
    """Protects the token budget of reads that mention an event nothing was said about: "resume
    after the interruption" parsed as a pivot put a date before every line (7 tokens each) and
    pushed two rules out of a 700-token context in the eval's budget preset."""
    query = "resume the task after the interruption: next step and budget"
    assert when_of(query) == When(pivot="after", pivot_words=("interruption",))
    assert usable(when_of(query), ["next step is S6", "budget_left 120"]) is None
    said = ["there was an interruption of the deploy", "next step is S6"]
    assert usable(when_of(query), said) == when_of(query)
    # What else the query names stays: an order, or a request for dates.
    assert usable(when_of("what is her latest job, after pottery?"), ["job nurse"]) == When(order="newest")
    assert usable(when_of("when did she move, after pottery?"), ["moved to Lyon"]) == When(asks=True)
