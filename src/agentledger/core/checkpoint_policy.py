"""When the checkpointer saves a task's checkpoint: a pure decision over Working Memory.

A checkpoint is due when, since the task's last checkpoint,

* at least ``every_n`` ledger events of the task were applied (counted with
  ``len(state.applied)``, i.e. events of this task, not stream sequences, which
  interleave every task), or
* a step reached a terminal status (succeeded / failed / cancelled): its
  ``StepState.seq`` is past the last checkpoint's ledger sequence, or
* the task itself ended (completed / failed / cancelled) after it.

A task that has no checkpoint yet counts from an empty one (no events, sequence 0,
status ``new``). Nothing is due when the state is not past the last checkpoint.
No I/O and no clock: the service feeds it the projected state and what it
remembers (or reads back) of the last checkpoint.
"""

from __future__ import annotations

from msgspec import Struct

from agentledger.core.reducer import TERMINAL_TASK
from agentledger.core.state import WorkingMemory

# Save at least every this many events of a task.
EVERY_N_EVENTS = 100
# Checkpoints kept per task (the newest; the active one is always among them).
KEEP_PER_TASK = 3
# Lifetime of a checkpoint, in seconds (7 days); an expired one is refused by resume.
CHECKPOINT_TTL_S = 7 * 24 * 3600.0

TERMINAL_STEP = frozenset({"succeeded", "failed", "cancelled"})


class LastCheckpoint(Struct, frozen=True):
    """What the policy needs to know of a task's latest checkpoint."""

    seq: int
    events: int
    task_status: str


NONE = LastCheckpoint(seq=0, events=0, task_status="new")


def due(state: WorkingMemory, last: LastCheckpoint | None,
        every_n: int = EVERY_N_EVENTS) -> str | None:
    """The reason a checkpoint of ``state`` is due now, or None.

    Reasons: ``task_ended``, ``step_terminal``, ``every_n_events``.
    """
    last = last or NONE
    if state.watermark <= last.seq:
        return None
    if state.status in TERMINAL_TASK and last.task_status not in TERMINAL_TASK:
        return "task_ended"
    if any(st.status in TERMINAL_STEP and st.seq > last.seq for st in state.step_states.values()):
        return "step_terminal"
    if len(state.applied) - last.events >= every_n:
        return "every_n_events"
    return None


def of_state(state: WorkingMemory) -> LastCheckpoint:
    """The ``LastCheckpoint`` a checkpoint of ``state`` becomes once saved."""
    return LastCheckpoint(seq=state.watermark, events=len(state.applied), task_status=state.status)
