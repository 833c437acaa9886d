"""Checks the ledger-writer makes before an event may enter the ledger.

These are the rules that need no task state: shape is the contracts' job, state
transitions are the reducer's. What is checked here would make an event
meaningless on any history (a plan with a cycle, a goal hash that does not
match its goal, personal content with no data subject to key it to).
"""

from __future__ import annotations

from collections.abc import Sequence

import blake3
import msgspec

from agentledger.contracts import events as ev
from agentledger.core.dag import validate_plan
from agentledger.errors import ContractError

_canonical = msgspec.json.Encoder(order="sorted")


def goal_hash(text: str, acceptance_criteria: Sequence[str]) -> str:
    """blake3 over the canonical JSON of the goal text and its criteria."""
    body = _canonical.encode({"acceptance_criteria": list(acceptance_criteria), "text": text})
    return blake3.blake3(body).hexdigest()


def has_personal_content(event: ev.EventBase) -> bool:
    """Whether the event carries a value that must be sealed before storage."""
    p = ev.payload_of(event)
    if isinstance(p, ev.TurnAppended):
        return True
    if isinstance(p, ev.VariableSet):
        return bool(p.personal)
    if isinstance(p, ev.StepSucceeded):
        return any(o.personal for o in p.outputs)
    # Memory events: the memory-policy service names the data subject of a personal value.
    if isinstance(p, ev.MemoryProposed):
        return event.data_subject is not None and p.value is not None
    if isinstance(p, ev.MemoryDecided):
        return (event.data_subject is not None and p.record is not None
                and p.record.value is not None)
    return False


def check_event(event: ev.EventBase, path: str) -> None:
    """Raise ``ContractError`` (with ``path`` prefixed) if the event cannot be stored."""
    p = ev.payload_of(event)
    if isinstance(p, ev.TaskCreated):
        want = goal_hash(p.goal.text, p.goal.acceptance_criteria)
        if p.goal.goal_hash != want:
            raise ContractError(f"goal_hash does not match the goal (expected {want})",
                                code="goal_hash_mismatch", path=f"{path}.payload.goal.goal_hash")
    elif isinstance(p, ev.PlanVersioned):
        validate_plan(p.steps, f"{path}.payload.steps")
    elif isinstance(p, ev.TurnAppended):
        if p.content is None:
            raise ContractError("a turn needs content", code="missing_field",
                                path=f"{path}.payload.content")
        _no_sealed(p.sealed, f"{path}.payload.sealed")
    elif isinstance(p, ev.VariableSet):
        _no_sealed(p.sealed, f"{path}.payload.sealed")
    elif isinstance(p, ev.StepSucceeded):
        for i, out in enumerate(p.outputs):
            _no_sealed(out.sealed, f"{path}.payload.outputs[{i}].sealed")
    if has_personal_content(event) and event.data_subject is None:
        raise ContractError("personal content needs a pseudonymous data_subject to key it to",
                            code="missing_data_subject", path=f"{path}.data_subject")


def _no_sealed(value: ev.Sealed | None, path: str) -> None:
    if value is not None:
        raise ContractError("sealed values are produced by the ledger-writer, not sent to it",
                            code="sealed_not_allowed", path=path)


# Reserved tasks that are service ledgers: task id -> (the only kinds it holds, what they are,
# who appends them).
_SERVICE_LEDGERS = {
    ev.MEMORY_TASK: (ev.MEMORY_KINDS, "memory", "the memory-policy service"),
    ev.DOCUMENTS_TASK: (ev.DOCUMENT_KINDS, "document", "the context-builder"),
    ev.FORGET_TASK: (ev.FORGET_KINDS, "forget", "the tombstone-fanout"),
}


def check_reserved(events: Sequence[ev.EventBase], *, operator: bool) -> None:
    """The reserved service ledgers: task ids starting with ``RESERVED_TASK_PREFIX`` belong to
    the runtime; memory events are the memory-policy service's, on ``MEMORY_TASK`` only, and
    document events the context-builder's, on ``DOCUMENTS_TASK`` only.

    A tenant may not append to a reserved task (``reserved_task``) nor append a memory or
    document event (``reserved_kind``); a service (an operator caller) may append memory
    events to ``MEMORY_TASK`` and document events to ``DOCUMENTS_TASK``, and nothing else there.
    """
    for i, e in enumerate(events):
        path = f"$.events[{i}]"
        kind = ev.kind_of(e)
        if e.task_id.startswith(ev.RESERVED_TASK_PREFIX) and not operator:
            raise ContractError(f"task ids starting with {ev.RESERVED_TASK_PREFIX!r} are reserved for the "
                                "runtime", code="reserved_task", path=f"{path}.task_id")
        for task, (kinds, what, owner) in _SERVICE_LEDGERS.items():
            if kind in kinds and not (operator and e.task_id == task):
                raise ContractError(f"{kind} events are appended by {owner}, to task {task!r} only",
                                    code="reserved_kind", path=f"{path}.kind")
            if e.task_id == task and kind not in kinds:
                raise ContractError(f"task {task!r} holds {what} events only", code="reserved_task",
                                    path=f"{path}.task_id")


def check_batch(events: Sequence[ev.EventBase]) -> None:
    """One task per request, no repeated event id inside it, each event storable."""
    first = events[0]
    seen: dict[str, int] = {}
    for i, e in enumerate(events):
        path = f"$.events[{i}]"
        if (e.tenant, e.task_id) != (first.tenant, first.task_id):
            raise ContractError("every event of one append must belong to the same task",
                                code="mixed_task_batch", path=f"{path}.task_id")
        if ev.kind_of(e) in ev.WRITER_ONLY_KINDS:
            raise ContractError(f"{ev.kind_of(e)} events are written by the ledger-writer itself "
                                "(take a lease through lease.acquire)", code="reserved_kind",
                                path=f"{path}.kind")
        if e.event_id in seen:
            raise ContractError(f"event id repeats $.events[{seen[e.event_id]}]",
                                code="duplicate_event_id", path=f"{path}.event_id")
        seen[e.event_id] = i
        check_event(e, path)
