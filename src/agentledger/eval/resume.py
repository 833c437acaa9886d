"""Resume success from the checkpointer's real resume, not from the evaluator's own reading.

The task is interrupted after S5: ``run.ingest`` saves a checkpoint there (``checkpoint.save``),
then the conversation and the memory go on. ``run.resume_task`` asks the checkpointer to resume
the task (``resume``): it checks the checkpoint (schema, checksum, expiry), that its ledger cursor
exists, that every artifact it cites is in the store with the hash it cites, replays the ledger
after the cursor with the projector's reducer, and lists the side-effecting steps whose outcome
is unknown. What it answers is ``Resumed``.

A strategy's resume succeeds when the executor, acting on that strategy's context only, would
carry on from what the resume established: the resume was ``resumable`` (checkpoint, hashes,
side effects reconciled by the checkpointer), the step it dispatches is one the resume allows
(cursor), the steps it skips are the resumed done set, the artifact hashes it acts on are
those of the resumed task's current artifacts, and the budget it acts on is the resumed
``budget_left`` variable (``reconcile``). The executor never sees ``Resumed``: like the ground
truth, it is only compared with the executor's actions afterwards. Pure: the calls are in ``run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentledger.eval.executor import ARTIFACT_KEYS, Actions, artifact_key


@dataclass(frozen=True)
class Resumed:
    """What the checkpointer's resume answered, reduced to what an executor reconciles with.

    ``artifacts``: (schema, blake3) of the resumed task's current artifacts (replaced ones are
    not current); ``variables``: each variable's value; ``reasons``: the codes it gave."""

    status: str
    checkpoint_id: int | None = None
    replayed_events: int = 0
    dispatch: tuple[str, ...] = ()
    done: tuple[str, ...] = ()
    artifacts: tuple[tuple[str, str], ...] = ()
    variables: dict[str, Any] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    reconcile: tuple[str, ...] = ()

    @classmethod
    def from_reply(cls, reply: Any) -> Resumed:
        state = reply.state or {}
        return cls(status=reply.status or "rejected", checkpoint_id=reply.checkpoint_id,
                   replayed_events=reply.replayed_events, dispatch=tuple(reply.dispatch),
                   done=tuple(state.get("done", ())),
                   artifacts=tuple((a["schema"], a["blake3"]) for a in state.get("artifacts", ())),
                   variables={k: v.get("value") for k, v in (state.get("variables") or {}).items()},
                   reasons=tuple(r.code for r in reply.reasons),
                   reconcile=tuple(r.step_id for r in reply.reconcile))

    def summary(self) -> str:
        return (f"resume {self.status} from checkpoint {self.checkpoint_id} ({self.replayed_events} events "
                f"replayed; dispatch {', '.join(self.dispatch) or '-'}; done {', '.join(self.done) or '-'}"
                + (f"; reasons {', '.join(self.reasons)}" if self.reasons else "") + ")")


def reconcile(actions: Actions, resumed: Resumed) -> list[str]:
    """What of the executor's actions does not reconcile with the resume (empty: all does)."""
    out = []
    if resumed.status != "resumable":
        out.append(f"the resume is {resumed.status} ({', '.join(resumed.reasons) or 'no reason'}"
                   + (f"; side effects to reconcile: {', '.join(resumed.reconcile)}" if resumed.reconcile else "")
                   + ")")
    if actions.dispatch is None or actions.dispatch not in resumed.dispatch:
        out.append(f"cursor: dispatches {actions.dispatch}, the resume allows {list(resumed.dispatch)}")
    if set(actions.skip) != set(resumed.done):
        out.append(f"done set: skips {list(actions.skip)}, the resume has {list(resumed.done)} done")
    current = {artifact_key(schema): blake3 for schema, blake3 in resumed.artifacts}
    for key in ARTIFACT_KEYS:
        it, want = actions.resolved.get(key), current.get(key)
        if it is None or want is None or not want.startswith(it.value):
            out.append(f"hash: acts on {key} {it.value if it else None}, the resumed artifact is "
                       f"{want[:16] if want else None}")
    budget, want_budget = actions.resolved.get("budget_left"), resumed.variables.get("budget_left")
    if budget is None or str(budget) != want_budget:
        out.append(f"budget: acts on {budget}, the resumed variable is {want_budget}")
    return out
