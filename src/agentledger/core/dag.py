"""Plan DAG checks and next-ready computation.

next-ready is always recomputed from the DAG and the step states; nothing stores
it, so it cannot drift from the plan it claims to describe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentledger.contracts.events import StepDef
from agentledger.errors import ContractError


def validate_plan(steps: Sequence[StepDef], path: str = "$.payload.steps") -> None:
    """Reject duplicate step ids, unknown or self dependencies, and cycles."""
    index: dict[str, int] = {}
    for i, step in enumerate(steps):
        if step.id in index:
            raise ContractError(f"duplicate step id {step.id!r} (also at index {index[step.id]})",
                                code="invalid_plan", path=f"{path}[{i}].id")
        index[step.id] = i
    for i, step in enumerate(steps):
        for j, dep in enumerate(step.depends_on):
            if dep not in index:
                raise ContractError(f"unknown dependency {dep!r}", code="invalid_plan",
                                    path=f"{path}[{i}].depends_on[{j}]")
            if dep == step.id:
                raise ContractError("a step cannot depend on itself", code="invalid_plan",
                                    path=f"{path}[{i}].depends_on[{j}]")
    cycle = find_cycle(steps)
    if cycle:
        first = index[cycle[0]]
        raise ContractError("dependency cycle: " + " -> ".join(cycle), code="invalid_plan",
                            path=f"{path}[{first}].depends_on")


def find_cycle(steps: Sequence[StepDef]) -> list[str]:
    """Return one dependency cycle as a list of step ids (first repeated last), or []."""
    deps = {s.id: s.depends_on for s in steps}
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(deps, white)
    for root in deps:
        if color[root] != white:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        trail: list[str] = [root]
        color[root] = grey
        while stack:
            node, i = stack[-1]
            children = [d for d in deps[node] if d in deps]
            if i < len(children):
                stack[-1] = (node, i + 1)
                child = children[i]
                if color[child] == grey:
                    return [*trail[trail.index(child):], child]
                if color[child] == white:
                    color[child] = grey
                    stack.append((child, 0))
                    trail.append(child)
            else:
                color[node] = black
                stack.pop()
                trail.pop()
    return []


def next_ready(steps: Sequence[StepDef], status: Mapping[str, str]) -> list[str]:
    """Pending steps whose every dependency succeeded, in plan order."""
    return [
        s.id for s in steps
        if status.get(s.id, "pending") == "pending"
        and all(status.get(d) == "succeeded" for d in s.depends_on)
    ]
