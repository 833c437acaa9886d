"""Plan DAG: validation, cycle finding and next-ready, by example and by property."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentledger.contracts.events import StepDef
from agentledger.core.dag import find_cycle, next_ready, validate_plan
from agentledger.errors import ContractError

STATUSES = ("pending", "running", "succeeded", "failed", "cancelled")


def plan(deps: dict[str, list[str]]) -> list[StepDef]:
    return [StepDef(id=sid, depends_on=d) for sid, d in deps.items()]


# ---- examples ---------------------------------------------------------------------

def test_next_ready_initial_plan() -> None:
    """With nothing done, exactly the steps without dependencies are ready, in plan order."""
    steps = plan({"S2": ["S1"], "S1": [], "S3": [], "S4": ["S1", "S3"]})
    assert next_ready(steps, {}) == ["S1", "S3"]


def test_next_ready_needs_every_dependency_succeeded() -> None:
    """A step becomes ready only when all of its dependencies succeeded."""
    steps = plan({"S1": [], "S3": [], "S4": ["S1", "S3"]})
    assert next_ready(steps, {"S1": "succeeded", "S3": "running"}) == []
    assert next_ready(steps, {"S1": "succeeded", "S3": "succeeded"}) == ["S4"]


@pytest.mark.parametrize("dep_status", ["failed", "cancelled", "running", "pending"])
def test_next_ready_blocked_by_unsucceeded_dependency(dep_status: str) -> None:
    """A failed, cancelled, running or pending dependency keeps its dependents waiting."""
    steps = plan({"S1": [], "S2": ["S1"]})
    assert "S2" not in next_ready(steps, {"S1": dep_status})


@pytest.mark.parametrize("status", ["running", "succeeded", "failed", "cancelled"])
def test_next_ready_only_pending_steps(status: str) -> None:
    """A step that is not pending is never offered as ready, even with its dependencies done."""
    steps = plan({"S1": []})
    assert next_ready(steps, {"S1": status}) == []


def test_missing_status_counts_as_pending() -> None:
    """A step with no recorded status is pending."""
    assert next_ready(plan({"S1": [], "S2": ["S1"]}), {"S1": "succeeded"}) == ["S2"]


def test_find_cycle_none_in_dag() -> None:
    """An acyclic plan has no cycle."""
    assert find_cycle(plan({"A": [], "B": ["A"], "C": ["A", "B"]})) == []


def test_find_cycle_returns_closed_path() -> None:
    """A cycle is returned as step ids with the first one repeated last, following dependencies."""
    cycle = find_cycle(plan({"A": ["C"], "B": ["A"], "C": ["B"]}))
    assert cycle == ["A", "C", "B", "A"]


def test_find_cycle_self_loop() -> None:
    """A step depending on itself is a cycle of length one."""
    assert find_cycle(plan({"A": [], "B": ["B"]})) == ["B", "B"]


def test_find_cycle_ignores_unknown_dependencies() -> None:
    """An unknown dependency is validate_plan's concern, not a cycle."""
    assert find_cycle(plan({"A": ["ghost"]})) == []


def test_validate_plan_accepts_dag() -> None:
    """A valid DAG passes validation."""
    validate_plan(plan({"S1": [], "S2": ["S1"], "S3": ["S1", "S2"]}))


@pytest.mark.parametrize(
    ("deps", "path"),
    [
        pytest.param({"A": ["A"]}, "$.payload.steps[0].depends_on[0]", id="self"),
        pytest.param({"A": [], "B": ["A", "nope"]}, "$.payload.steps[1].depends_on[1]", id="unknown"),
        pytest.param({"A": ["B"], "B": ["A"]}, "$.payload.steps[0].depends_on", id="two-cycle"),
        pytest.param({"A": [], "B": ["C"], "C": ["D"], "D": ["B"]}, "$.payload.steps[1].depends_on",
                     id="three-cycle"),
    ],
)
def test_validate_plan_rejections(deps: dict[str, list[str]], path: str) -> None:
    """Self, unknown and cyclic dependencies are `invalid_plan` at the offending element."""
    with pytest.raises(ContractError) as info:
        validate_plan(plan(deps))
    assert (info.value.code, info.value.path) == ("invalid_plan", path)


def test_validate_plan_duplicate_id() -> None:
    """A repeated step id is `invalid_plan` at the repeat, with a caller-given path prefix."""
    steps = [StepDef(id="A"), StepDef(id="B"), StepDef(id="A")]
    with pytest.raises(ContractError) as info:
        validate_plan(steps, "$.events[2].payload.steps")
    assert (info.value.code, info.value.path) == ("invalid_plan", "$.events[2].payload.steps[2].id")


# ---- properties -----------------------------------------------------------------------

@st.composite
def dags(draw: st.DrawFn) -> list[StepDef]:
    """Random acyclic plans: each step depends only on steps listed before it."""
    n = draw(st.integers(1, 12))
    ids = [f"S{i}" for i in range(n)]
    steps = []
    for i, sid in enumerate(ids):
        deps = draw(st.lists(st.sampled_from(ids[:i]), unique=True, max_size=4)) if i else []
        steps.append(StepDef(id=sid, depends_on=deps))
    return draw(st.permutations(steps))


@st.composite
def dag_and_status(draw: st.DrawFn) -> tuple[list[StepDef], dict[str, str]]:
    steps = draw(dags())
    status = {s.id: draw(st.sampled_from(STATUSES)) for s in steps
              if draw(st.booleans())}  # absent means pending
    return steps, status


@settings(max_examples=200, deadline=None)
@given(dag_and_status())
def test_next_ready_matches_definition(case: tuple[list[StepDef], dict[str, str]]) -> None:
    """next_ready is exactly the pending steps whose dependencies all succeeded, in plan order."""
    steps, status = case
    ready = next_ready(steps, status)
    done = {sid for sid, s in status.items() if s == "succeeded"}
    for sid in ready:
        step = next(s for s in steps if s.id == sid)
        assert status.get(sid, "pending") == "pending"
        assert set(step.depends_on) <= done
    expected = [s.id for s in steps
                if status.get(s.id, "pending") == "pending" and set(s.depends_on) <= done]
    assert ready == expected


@settings(max_examples=200, deadline=None)
@given(dags())
def test_random_dags_validate(steps: list[StepDef]) -> None:
    """Every generated DAG passes validation and has no cycle."""
    validate_plan(steps)
    assert find_cycle(steps) == []


def has_cycle_reference(deps: dict[str, list[str]]) -> bool:
    """Kahn's algorithm: a graph is acyclic iff repeatedly removing sinks empties it."""
    remaining = {k: {d for d in v if d in deps} for k, v in deps.items()}
    while True:
        free = [k for k, v in remaining.items() if not v]
        if not free:
            return bool(remaining)
        for k in free:
            del remaining[k]
        for v in remaining.values():
            v.difference_update(free)


@st.composite
def graphs(draw: st.DrawFn) -> dict[str, list[str]]:
    """Arbitrary dependency graphs, cycles and self loops included."""
    n = draw(st.integers(1, 9))
    ids = [f"S{i}" for i in range(n)]
    return {sid: draw(st.lists(st.sampled_from(ids), unique=True, max_size=3)) for sid in ids}


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_find_cycle_iff_cycle_exists(deps: dict[str, list[str]]) -> None:
    """find_cycle reports a cycle exactly when one exists, and what it reports is a real cycle."""
    cycle = find_cycle(plan(deps))
    assert bool(cycle) == has_cycle_reference(deps)
    if cycle:
        assert cycle[0] == cycle[-1]
        assert len(set(cycle[:-1])) == len(cycle) - 1
        for a, b in itertools.pairwise(cycle):
            assert b in deps[a], f"{a} does not depend on {b}"
