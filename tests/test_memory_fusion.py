"""Reciprocal rank fusion, the winners' order, the budget cap and compact keys (the I/O-free core)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentledger.core.memory.keys import canonical_key, key_repeats_value
from agentledger.core.memory.read import (
    FILL_MAX,
    FILL_MIN,
    NEIGHBOUR_WEIGHT,
    RRF_K,
    candidate_cap,
    fuse,
    read_order,
    with_neighbours,
)

ids = st.text(alphabet="abcdefgh", min_size=1, max_size=3)
rankings = st.lists(st.lists(ids, max_size=12, unique=True), min_size=1, max_size=3)


@given(rankings, st.sets(ids, max_size=3))
def test_fused_relevance_is_in_unit_range_and_exact_matches_are_one(rs: list[list[str]], exact: set[str]) -> None:
    fused = fuse(rs, exact=exact)
    assert set(fused) == {i for r in rs for i in r} | exact
    assert all(0.0 < v <= 1.0 for v in fused.values())
    assert all(fused[i] == 1.0 for i in exact)
    # 1 only for the first of every ranking (or an exact match).
    for i, v in fused.items():
        if i not in exact and v == 1.0:
            assert all(r and r[0] == i for r in rs)


@given(rankings)
def test_fusion_is_reciprocal_rank_sum(rs: list[list[str]]) -> None:
    fused = fuse(rs)
    for i, v in fused.items():
        raw = sum(1.0 / (RRF_K + r.index(i) + 1) for r in rs if i in r)
        assert abs(v - raw * (RRF_K + 1) / len(rs)) < 1e-12


@given(st.lists(ids, min_size=2, max_size=12, unique=True), st.lists(ids, max_size=12, unique=True))
def test_a_better_rank_in_one_source_and_no_worse_in_the_other_fuses_higher(a: list[str], b: list[str]) -> None:
    fused = fuse([a, b])
    first, second = a[0], a[1]
    rank_b = {i: n for n, i in enumerate(b)}
    if first in rank_b and (second not in rank_b or rank_b[first] < rank_b[second]):
        assert fused[first] > fused[second]
    if first not in rank_b and second not in rank_b:
        assert fused[first] > fused[second]


def test_agreement_of_two_sources_beats_one_source_alone() -> None:
    """Found second by both beats first by one: the point of fusing."""
    fused = fuse([["lex", "both"], ["vec", "both"]])
    assert fused["both"] > fused["lex"] == fused["vec"]
    assert fused["lex"] == fuse([["lex"], []])["lex"]


def test_read_order_puts_exact_matches_first_then_score_then_newest() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [(False, 0.9, now, "a"), (True, 0.1, now - timedelta(days=9), "b"),
            (False, 0.5, now - timedelta(days=1), "c"), (False, 0.5, now, "d"), (False, 0.5, now, "e")]
    assert [r[3] for r in sorted(rows, key=lambda r: read_order(*r))] == ["b", "a", "d", "e", "c"]


@given(st.integers(min_value=1, max_value=200_000))
def test_candidate_cap_follows_an_explicit_k_else_the_budget(budget: int) -> None:
    assert candidate_cap(7, budget) == 7
    cap = candidate_cap(None, budget)
    assert FILL_MIN <= cap <= FILL_MAX
    assert cap <= candidate_cap(None, budget + 1000)


def test_a_derived_content_key_repeats_its_value_and_an_explicit_one_may_not() -> None:
    value = "The build uses Python 3.11 and uv"
    assert key_repeats_value(canonical_key("fact", None, value), value)
    assert not key_repeats_value(canonical_key("fact", "build toolchain", value), value)
    assert key_repeats_value("deploy_target", {"deploy target": "prod-eu"})
    assert not key_repeats_value("response_language", "answer in Chinese")
    assert not key_repeats_value("", "anything")


def test_a_neighbour_shares_half_the_relevance_of_the_record_beside_it() -> None:
    """The record said next to a relevant one gets ``NEIGHBOUR_WEIGHT`` of its relevance on
    top of its own; nothing else moves; the result stays in (0, 1]."""
    base = {"q": 1.0, "other": 0.4}
    out = with_neighbours(base, {"q": ["answer"], "other": []})
    assert out["answer"] == pytest.approx(NEIGHBOUR_WEIGHT) and out["q"] == 1.0 and out["other"] == 0.4
    both = with_neighbours({"a": 1.0, "b": 1.0}, {"a": ["b"], "b": ["a"]})
    assert both == {"a": 1.0, "b": 1.0}  # each boosted by the other, scaled back to at most 1
    assert with_neighbours(base, {}) == base
