"""When the checkpointer saves a task's checkpoint: a pure decision over Working Memory.

A checkpoint is due when, since the task's last checkpoint,

* at least ``every_n`` ledger events of the task were applied (counted with
  ``state.events_applied``, i.e. events of this task, not stream sequences, which
  interleave every task), or
* a step reached a terminal status (succeeded / failed / cancelled): its
  ``StepState.seq`` is past the last checkpoint's ledger sequence, or
* the task itself ended (completed / failed / cancelled) after it.

A task that has no checkpoint yet counts from an empty one (no events, sequence 0,
status ``new``). Nothing is due when the state is not past the last checkpoint.
No I/O and no clock: the service feeds it what it remembers (or reads back) of
the last checkpoint and the task's ``TaskProgress``, a summary of the state
small enough for the projector to send with every ``TaskChanged``, so the
checkpointer reads a task's state only when a checkpoint of it is due.
"""

from __future__ import annotations

from msgspec import Struct

from agentledger.contracts.api import TaskChanged, TaskProgress
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


def progress(state: WorkingMemory) -> TaskProgress:
    """What ``due`` needs to know of ``state``."""
    terminal = (st.seq for st in state.step_states.values() if st.status in TERMINAL_STEP)
    return TaskProgress(events=state.events_applied, status=state.status,
                        terminal_seq=max(terminal, default=0))


def due(seq: int, progress: TaskProgress, last: LastCheckpoint | None,
        every_n: int = EVERY_N_EVENTS) -> str | None:
    """The reason a checkpoint of the state at ledger sequence ``seq`` is due now, or None.

    Reasons: ``task_ended``, ``step_terminal``, ``every_n_events``. A step whose
    terminal status is past the last checkpoint is exactly one that makes
    ``progress.terminal_seq`` pass it.
    """
    last = last or NONE
    if seq <= last.seq:
        return None
    if progress.status in TERMINAL_TASK and last.task_status not in TERMINAL_TASK:
        return "task_ended"
    if progress.terminal_seq > last.seq:
        return "step_terminal"
    if progress.events - last.events >= every_n:
        return "every_n_events"
    return None


def due_for_state(state: WorkingMemory, last: LastCheckpoint | None,
                  every_n: int = EVERY_N_EVENTS) -> str | None:
    """``due`` for a state in hand."""
    return due(state.watermark, progress(state), last, every_n)


def task_changed(tenant: str, task_id: str, seq: int, state_hash: str,
                 state: WorkingMemory | None) -> TaskChanged:
    """The notification of a commit that left the task at ``seq``, with its progress when
    ``state`` is the task's state at exactly that sequence (otherwise readers read the state)."""
    known = progress(state) if state is not None and state.watermark == seq else None
    return TaskChanged(tenant, task_id, seq, state_hash, known)


def of_state(state: WorkingMemory) -> LastCheckpoint:
    """The ``LastCheckpoint`` a checkpoint of ``state`` becomes once saved."""
    return LastCheckpoint(seq=state.watermark, events=state.events_applied, task_status=state.status)
