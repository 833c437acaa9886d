"""The checkpointer decides from the projector's notification, and reads a state only when due.

``TaskChanged.progress`` summarises what the checkpoint policy needs of a state.
The pure tests check that a decision taken from the notification is the one the
policy always took from the whole state; the service tests count the state reads
the checkpointer makes against a real projector.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec
import pytest

from agentledger.config import Settings
from agentledger.contracts.api import TaskChanged
from agentledger.contracts.codec import decode_event, encode
from agentledger.core import checkpoint_policy as policy
from agentledger.core.reducer import TERMINAL_TASK, apply
from agentledger.core.state import Changes, WorkingMemory, new_state
from agentledger.services.checkpointer.service import Checkpointer
from agentledger.services.projector.service import changed_subject
from ckpt_support import TENANT, Stack, chain, created, event, plan, running, started, succeeded, variable
from helpers import assert_eventually


def by_state(state: WorkingMemory, last: policy.LastCheckpoint | None, every_n: int) -> str | None:
    """The policy as it was stated on the whole state before notifications carried progress."""
    last = last or policy.NONE
    if state.watermark <= last.seq:
        return None
    if state.status in TERMINAL_TASK and last.task_status not in TERMINAL_TASK:
        return "task_ended"
    if any(st.status in policy.TERMINAL_STEP and st.seq > last.seq for st in state.step_states.values()):
        return "step_terminal"
    if state.events_applied - last.events >= every_n:
        return "every_n_events"
    return None


def history() -> list[dict[str, Any]]:
    """Steps end, a replan resets an ended step, steps fail and are cancelled, the task ends."""
    replanned = chain(3)
    replanned[0]["side_effect"] = True  # S1's definition changes: it restarts as pending
    return [
        created("t"), plan("t", chain(3)), started("t", "S1"), variable("t", "x", 1),
        succeeded("t", "S1"), variable("t", "x", 2), plan("t", replanned, version=2),
        variable("t", "x", 3), started("t", "S1", version=2, attempt=2, key="k1"),
        succeeded("t", "S1", version=2, attempt=2), started("t", "S2", version=2),
        event("step_failed", {"plan_version": 2, "step_id": "S2", "error_code": "boom"}, "t"),
        event("step_cancelled", {"plan_version": 2, "step_id": "S3"}, "t"),
        *[variable("t", "y", i) for i in range(4)],
        event("task_cancelled", {"reason": "stop"}, "t"),
        event("turn_appended", {"role": "user", "ordinal": 1, "content": "hi"}, "t"),
    ]


@pytest.mark.parametrize("every_n", [1, 3, 7])
def test_the_notification_decides_as_the_whole_state_would(every_n: int) -> None:
    """At every event of a history, against every checkpoint it could have had, the decision from
    the notification as sent on the wire equals the policy's decision on the state itself."""
    state = new_state(TENANT, "t")
    lasts: list[policy.LastCheckpoint | None] = [None]
    decisions = set()
    for seq, e in enumerate(history(), 1):
        apply(state, decode_event(encode(e)), seq, Changes())
        wire = encode(policy.task_changed(TENANT, "t", seq, "h", state))
        notice = msgspec.json.decode(wire, type=TaskChanged)
        assert notice.progress is not None
        for last in [*lasts, policy.of_state(state)]:  # the last: a checkpoint of this very state
            expected = by_state(state, last, every_n)
            assert policy.due(notice.seq, notice.progress, last, every_n) == expected
            assert policy.due_for_state(state, last, every_n) == expected
            decisions.add(expected)
        lasts.append(policy.of_state(state))
    assert decisions == {None, "step_terminal", "task_ended", "every_n_events"}


def test_a_notification_carries_progress_only_for_the_state_at_its_sequence() -> None:
    """Without the state, or with a state at another sequence, the notification says nothing of
    progress (and omits the field), so the reader reads the state instead of trusting a guess."""
    state = new_state(TENANT, "t")
    apply(state, decode_event(encode(created("t"))), 5, Changes())
    assert policy.task_changed(TENANT, "t", 5, "h", state).progress == policy.progress(state)
    for other, seq in ((None, 5), (state, 4)):
        notice = policy.task_changed(TENANT, "t", seq, "h", other)
        assert notice.progress is None
        assert b"progress" not in encode(notice)


def count_reads(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The (tenant, task) of every state the checkpointer reads from the projection."""
    assert stack.checkpointer is not None
    projection = stack.checkpointer.projection
    load_state = projection.load_state
    reads: list[tuple[str, str]] = []

    async def counted(pool: Any, tenant: str, task_id: str) -> Any:
        reads.append((tenant, task_id))
        return await load_state(pool, tenant, task_id)

    monkeypatch.setattr(projection, "load_state", counted)
    return reads


async def test_the_checkpointer_reads_a_state_only_when_a_checkpoint_is_due(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thirty appends that make nothing due cause no read; the step end that makes a checkpoint due
    causes exactly one, and so does nothing after it until the next one is due."""
    async with running(settings) as stack:
        reads = count_reads(stack, monkeypatch)
        seq = await stack.append([created("t1"), plan("t1", chain(2)), started("t1", "S1")])
        for i in range(30):
            seq = await stack.append([variable("t1", "x", i)])
        await stack.projected()
        await stack.evaluated("t1", seq)
        assert reads == []
        assert await stack.pointer("t1") is None

        done = await stack.append([succeeded("t1", "S1")])

        async def saved() -> bool:
            row = await stack.pointer("t1")
            return row is not None and row["seq"] == done

        await assert_eventually(saved, message="no checkpoint after S1 succeeded")
        assert reads == [(TENANT, "t1")]
        for i in range(10):
            seq = await stack.append([variable("t1", "x", 100 + i)])
        await stack.projected()
        await stack.evaluated("t1", seq)
        assert reads == [(TENANT, "t1")]
        assert (await stack.pointer("t1"))["seq"] == done


async def test_a_notification_without_progress_is_decided_on_the_state(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A notification that carries no progress (an older projector's) makes the checkpointer read
    the state and decide on it: here a step has ended, so it saves."""
    async with running(settings, checkpointer=False) as stack:
        done = await stack.append([created("t1"), plan("t1", chain(1)), started("t1", "S1"),
                                   succeeded("t1", "S1")])
        await stack.projected()
        # Started after the projection: it heard none of the projector's notifications.
        stack.checkpointer = Checkpointer(settings)
        await stack.checkpointer.start()
        reads = count_reads(stack, monkeypatch)
        await stack.c.nc.publish(changed_subject(settings.prefix, TENANT, "t1"),
                                 encode(TaskChanged(TENANT, "t1", done, "h")))

        async def saved() -> bool:
            row = await stack.pointer("t1")
            return row is not None and row["seq"] == done

        await assert_eventually(saved, message="no checkpoint from a progress-less notification")
        assert reads == [(TENANT, "t1")]


async def test_a_database_lost_mid_statement_does_not_end_the_checkpointer(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects the checkpointer's life: a PostgreSQL killed mid-statement leaves asyncpg's protocol
    raising ``InternalClientError`` ("cannot switch to state 15"), which crashed the checkpointer.
    Now the evaluation is retried on the next notification and the checkpoint is saved."""
    async with running(settings) as stack:
        assert stack.checkpointer is not None
        real = stack.checkpointer._projected
        failures = []

        async def projected(key: Any) -> Any:
            if not failures:
                failures.append(key)
                raise asyncpg.InternalClientError("cannot switch to state 15; another operation is in progress")
            return await real(key)

        monkeypatch.setattr(stack.checkpointer, "_projected", projected)
        first = await stack.append([created("t1"), plan("t1", chain(2)), started("t1", "S1"),
                                    succeeded("t1", "S1")])
        await assert_eventually(lambda: failures, message="the failure was never injected")
        done = await stack.append([started("t1", "S2"), succeeded("t1", "S2")])

        async def saved() -> bool:
            row = await stack.pointer("t1")
            return row is not None and row["seq"] == done

        await assert_eventually(saved, message="no checkpoint after the database came back")
        assert not stack.checkpointer._failed.done()
        assert first < done
