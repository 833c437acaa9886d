"""The chained ledger against an attacker who edits the stored ledger while no service runs.

Events are appended through the real writer (which chains them), the services stop, the
ledger is edited as someone who can write the JetStream store but holds no integrity key
would (``ledger_tamper``), and then every reader of the ledger must refuse what was edited,
naming the tenant, task and index: ``resume`` answers ``integrity_violation``, the projector's
fold (the rebuild an empty projection starts with, and the live lane for what arrives later)
records an ``integrity_violation`` rejection instead of folding the event, and ``agentledger
verify`` names it. A cut-off tail is still a valid chain: the witness of heads catches it
(``up`` refuses before serving, see test_witness.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncpg
import pytest

from agentledger.cli.main import verify_command
from agentledger.config import Settings
from agentledger.core.ledger_chain import CHAIN, parse
from agentledger.errors import IntegrityViolationError
from agentledger.security import auth
from agentledger.services.projector.fold import Fold
from agentledger.services.projector.spill import read_stream
from agentledger.stores import witness
from agentledger.stores.ledger import chain_key_of, ledger_subject, msg_id
from ckpt_support import TENANT, created, running, variable
from helpers import assert_eventually
from ledger_tamper import Stored, append_raw, messages, rewrite
from test_projector import projected_state

Edit = Callable[[list[Stored]], list[Stored]]


def _index(m: Stored) -> int:
    parsed = parse(m.headers[CHAIN])
    assert parsed is not None
    return parsed[0]


def _of(task: str) -> Callable[[Stored], bool]:
    return lambda m: m.subject.endswith(f".{task}")


def change_content(ms: list[Stored]) -> list[Stored]:
    """t1's third event says another value; its headers (tag included) are left as they were."""
    out = []
    for m in ms:
        edited = m
        if _of("t1")(m) and _index(m) == 3:
            event = m.event()
            event["payload"] = {**event["payload"], "value": "edited"}  # type: ignore[dict-item]
            edited = m.with_event(event)
        out.append(edited)
    return out


def delete_middle(ms: list[Stored]) -> list[Stored]:
    return [m for m in ms if not (_of("t1")(m) and _index(m) == 3)]


def reorder(ms: list[Stored]) -> list[Stored]:
    """t1's third and fourth events swapped, each whole (body and headers)."""
    at = [i for i, m in enumerate(ms) if _of("t1")(m) and _index(m) in (3, 4)]
    out = list(ms)
    out[at[0]], out[at[1]] = ms[at[1]], ms[at[0]]
    return out


def forge_unchained(ms: list[Stored]) -> list[Stored]:
    """A well-formed event of t1 added at the end without a chain header."""
    last = next(m for m in reversed(ms) if _of("t1")(m))
    event = {**last.event(), "event_id": "forged"}
    headers = {"Nats-Msg-Id": msg_id(TENANT, "t1", "forged")}
    return [*ms, Stored(last.subject, last.with_event(event).body, headers)]


def forge_tagged(ms: list[Stored]) -> list[Stored]:
    """A well-formed event of t1 added at the end with a made-up chain header that links to the
    real last event (the attacker can read it) but whose own tag is not the key's."""
    last = next(m for m in reversed(ms) if _of("t1")(m))
    parsed = parse(last.headers[CHAIN])
    assert parsed is not None
    event = {**last.event(), "event_id": "forged", "payload": {"name": "owner", "value": "mallory"}}
    headers = {"Nats-Msg-Id": msg_id(TENANT, "t1", "forged"),
               CHAIN: f"{parsed[0] + 1};{parsed[2]};1:{'ab' * 32}"}
    return [*ms, Stored(last.subject, last.with_event(event).body, headers)]


def replay_into_other_task(ms: list[Stored]) -> list[Stored]:
    """t1's second event (headers and all) copied to the end of t2, its body and dedupe id
    rewritten to name t2."""
    source = next(m for m in ms if _of("t1")(m) and _index(m) == 2)
    event = {**source.event(), "task_id": "t2"}
    headers = {**source.headers, "Nats-Msg-Id": msg_id(TENANT, "t2", str(event["event_id"]))}
    return [*ms, Stored(source.subject.rsplit(".", 1)[0] + ".t2", source.with_event(event).body, headers)]


# edit -> (task, index the refusal names)
EDITS: dict[str, tuple[Edit, str, str]] = {
    "content_change": (change_content, "t1", "index 3 "),
    "middle_deletion": (delete_middle, "t1", "index 4 "),
    "reordering": (reorder, "t1", "index 4 "),
    "forged_insertion_unchained": (forge_unchained, "t1", "carries no chain tag"),
    "forged_insertion_tagged": (forge_tagged, "t1", "index 6 "),
    "replayed_into_another_task": (replay_into_other_task, "t2", "index 2 "),
}


async def _write_tasks(settings: Settings) -> None:
    async with running(settings, checkpointer=False, projector=False) as stack:
        await stack.append([created("t1"), *(variable("t1", "owner", f"v{i}") for i in range(4))])
        await stack.append([created("t2"), variable("t2", "owner", "bob")])


async def _rejections(settings: Settings, task: str) -> list[tuple[str, str]]:
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch("SELECT code, reason FROM rejections WHERE tenant = $1 AND task_id = $2 "
                                "ORDER BY seq", TENANT, task)
    finally:
        await conn.close()
    return [(r["code"], r["reason"]) for r in rows]


async def test_writer_chains_every_event(settings: Settings) -> None:
    """Each task's events carry indexes 1, 2, 3... and each links to the one before it; an
    untouched ledger verifies, and its fold has no violation."""
    await _write_tasks(settings)
    ms = await messages(settings)
    t1 = [parse(m.headers[CHAIN]) for m in ms if _of("t1")(m)]
    assert [p[0] for p in t1 if p] == [1, 2, 3, 4, 5]
    assert [p[1] for p in t1 if p][1:] == [p[2] for p in t1 if p][:-1]
    assert t1[0] is not None and t1[0][1] is None
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        fold = await read_stream(nc, settings, fold=Fold(chain_key_of(settings)))
    finally:
        await nc.close()
    assert not fold.violations
    assert await asyncio.to_thread(verify_command, settings, TENANT, None) == 0


@pytest.mark.parametrize("kind", list(EDITS))
async def test_edited_ledger_is_refused_on_every_read(settings: Settings, kind: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The edit is refused by resume (integrity_violation), by the projector's fold (a rejection
    row, the event not folded) and by ``agentledger verify``, each naming the task and index."""
    edit, task, names = EDITS[kind]
    await _write_tasks(settings)
    await rewrite(settings, edit)

    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        fold = await read_stream(nc, settings, fold=Fold(chain_key_of(settings)))
    finally:
        await nc.close()
    violation = fold.violations[(TENANT, task)]
    assert violation.code == "integrity_violation" and names in violation.message
    assert f"task {task!r}" in violation.message and f"tenant {TENANT!r}" in violation.message

    capsys.readouterr()
    assert await asyncio.to_thread(verify_command, settings, TENANT, task) == 1
    out = capsys.readouterr().out
    assert "INTEGRITY VIOLATION" in out and names in out and f"task {task!r}" in out

    async with running(settings) as stack:
        with pytest.raises(IntegrityViolationError) as info:
            await stack.c.resume(TENANT, task, "exec-1")
        assert info.value.code == "integrity_violation" and names in info.value.message

        async def refused_by_the_fold() -> bool:
            codes = [code for code, _ in await _rejections(settings, task)]
            return "integrity_violation" in codes

        await assert_eventually(refused_by_the_fold)
        # wm.get does not serve the state folded up to the break as the task's.
        with pytest.raises(IntegrityViolationError) as refused:
            await stack.c.working_memory(TENANT, task)
        assert refused.value.code == "integrity_violation" and f"task {task!r}" in refused.value.message


async def test_live_lane_refuses_a_forged_event_after_a_restart(settings: Settings) -> None:
    """Folded live, stopped, a forged event appended at the end: the projector, started again,
    reads the task's head back from the ledger at its watermark and refuses the forgery, and the
    task stays at its last good event. The writer will not link a new event to the forgery: the
    append is refused, and another task's append is not held up by it."""
    async with running(settings, checkpointer=False) as stack:
        await stack.append([created("t1"), variable("t1", "owner", "alice")])
        seq = await stack.append([variable("t1", "owner", "bob")])
        await stack.c.working_memory(TENANT, "t1", min_seq=seq, wait_ms=10_000)
    [forged] = forge_tagged(await messages(settings))[-1:]
    await append_raw(settings, forged)
    async with running(settings, checkpointer=False) as stack:

        async def refused() -> list[tuple[str, str]]:
            return await _rejections(settings, "t1")

        rows = await assert_eventually(refused)
        assert [code for code, _ in rows] == ["integrity_violation"]
        assert "index 4 " in rows[0][1]
        with pytest.raises(IntegrityViolationError) as info:
            await stack.append([variable("t1", "owner", "carol")])
        assert "index 4 " in info.value.message
        seq2 = await stack.append([created("t2")])
        state = await projected_state(settings, "t1")
        assert state.variables["owner"].value == "bob" and state.events_applied == 3
        with pytest.raises(IntegrityViolationError) as info:
            await stack.c.working_memory(TENANT, "t1")
        assert "fails its chain" in info.value.message
        # Another task is served.
        assert (await stack.c.working_memory(TENANT, "t2", min_seq=seq2, wait_ms=10_000)).seq >= seq2


async def test_tail_cut_is_named_by_verify_against_the_witness(settings: Settings,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A cut tail is still a valid chain: the witness (published by the writer as it stopped)
    names the task, the index the ledger ends at and the index it saw committed."""
    await _write_tasks(settings)
    body = witness.read(settings)
    assert body is not None and body.heads[f"{TENANT}/t1"][0] == 5
    await rewrite(settings, lambda ms: [m for m in ms if not (_of("t1")(m) and _index(m) >= 4)])
    capsys.readouterr()
    assert await asyncio.to_thread(verify_command, settings, TENANT, None) == 1
    out = capsys.readouterr().out
    assert f"task {TENANT}/t1: the ledger ends at index 3, the witness saw index 5" in out
    subject = ledger_subject(settings.prefix, TENANT, "t2")
    assert subject not in out


async def test_tail_cut_is_refused_by_resume(settings: Settings) -> None:
    """The cut tail's chain is valid link by link, so only the witness can tell: resume compares
    the task's ledger head with the head the witness saw and refuses the older state; a task
    whose ledger reaches its witnessed head resumes."""
    await _write_tasks(settings)
    await rewrite(settings, lambda ms: [m for m in ms if not (_of("t1")(m) and _index(m) >= 4)])
    async with running(settings) as stack:
        with pytest.raises(IntegrityViolationError) as info:
            await stack.c.resume(TENANT, "t1", "exec-1")
        assert info.value.code == "integrity_violation"
        assert "ends at index 3" in info.value.message and "witness saw index 5" in info.value.message
        reply = await stack.c.resume(TENANT, "t2", "exec-1")
        assert reply.ok and reply.status == "resumable", reply.reasons
