"""An append accepted without a lease check never lands after a grant made through another writer.

Writer A accepts an append that carries no fencing token as ``unleased`` when its copy of the
lease table shows no live lease for the task. Its copy follows the table through a watch, which
lags a grant writer B makes (here: A's watch is frozen, the lag made as long as the test needs).
The append is committed right after the task's last message as A knows it, so when B's grant
came first the server refuses it, and A checks it again against the table, which then shows the
lease: the append is refused ``fencing_token_required`` rather than stored after the grant, where
the new holder would find it (and its next append would meet ``conflict``). Two ``LedgerWriter``
instances run in this process on one NATS server (``test_writers_racing`` has the set-up).
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from agentledger.config import Settings
from agentledger.security.identity import Caller
from agentledger.services.ledger_writer.service import LedgerWriter
from test_writer import created, stored
from test_writers_racing import Call, ev, freeze_mirror, lease, table, writers

TRIALS = 1000
# Trials in flight at once.
PARALLEL = 50
HOLDER = "agent-1"
PHASES = ("start", "reading", "recorded", "answered")


async def send(w: LedgerWriter, events: list[dict[str, Any]], grant: dict[str, Any] | None = None,
               ) -> dict[str, Any]:
    """Append through writer ``w``; its reply."""
    body: dict[str, Any] = {"events": [{**e, "fencing_token": grant["token"]} if grant else e
                                       for e in events]}
    if grant is not None:
        body["lease_secret"] = grant["secret"]
    call = Call(body)
    await w._on_request(call)  # type: ignore[arg-type]
    return await asyncio.wait_for(call.reply, 60)


def as_agent(monkeypatch: pytest.MonkeyPatch, *ws: LedgerWriter) -> None:
    """Every request to ``ws`` comes from tenant agent agent-1 (the producer of the test's
    events), whom a lease binds; an operator may append to a leased task without a token."""
    async def caller(headers: Any) -> Caller:
        return Caller(tenant="acme", agent=HOLDER)

    for w in ws:
        assert w._tenants is not None
        monkeypatch.setattr(w._tenants, "caller", caller)


def code(reply: dict[str, Any]) -> str:
    return "accepted" if reply["ok"] else reply["error"]["code"]


async def test_an_unleased_append_racing_a_grant_through_another_writer_never_lands_after_it(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 trials, each on a fresh task (created through A for half of them, through B for the
    others, so A knows where some end and not the others): B grants the task's first lease while
    A, whose watch lags, takes an append without a token: as B starts the grant, as it reads the
    task's last sequence, once the grant is in the ledger or once B answered it.
    No append A acknowledges lies after the grant, and none is stored there; the holder's next
    append, through A or B, is accepted; the racing append sent again with the same ids through
    either writer is a duplicate at the same sequence when it was stored, refused when it was not.
    A trial that meets a stalled ledger (a retryable ``unavailable``: its outcome unknown) counts
    only in the ledger check; at most 5% may."""
    tasks = [f"u{i}" for i in range(TRIALS)]
    gate = asyncio.Semaphore(PARALLEL)
    async with writers(settings, 2) as (a, b):
        as_agent(monkeypatch, a, b)
        freeze_mirror(a, monkeypatch)  # A never hears of the grants: a watch that lags them all
        reached: dict[str, dict[str, asyncio.Event]] = {
            t: {p: asyncio.Event() for p in PHASES[1:]} for t in tasks}
        grants = table(b)._ledger
        read_last, record = grants.task_last_seq, grants.record_grant

        async def task_last_seq(tenant: str, task_id: str) -> int:
            reached[task_id]["reading"].set()
            return await read_last(tenant, task_id)

        async def record_grant(tenant: str, task_id: str, **grant: Any) -> int:
            token = await record(tenant, task_id, **grant)
            reached[task_id]["recorded"].set()
            return token

        monkeypatch.setattr(grants, "task_last_seq", task_last_seq)
        monkeypatch.setattr(grants, "record_grant", record_grant)
        stalled: set[str] = set()
        tokens: dict[str, int] = {}
        racing_ids: dict[str, str] = {}
        after: list[tuple[str, int, int]] = []  # (task, acked seq, grant token)
        outcomes: dict[str, int] = {}

        async def trial(i: int, task: str) -> None:
            rng = random.Random(i)
            async with gate:
                for _ in range(50):  # the same event again while the ledger is stalled
                    opened = await send(a if i % 2 else b, [created(task=task)])
                    if code(opened) != "unavailable":
                        break
                    await asyncio.sleep(0.1)
                assert code(opened) == "accepted", opened
                racing = ev(task)
                racing_ids[task] = racing["event_id"]

                # When A takes the append: as B starts the grant, as B reads the task's last
                # sequence, once B's grant is in the ledger, or once B answered it.
                phase = rng.choice(PHASES)

                async def unleased() -> dict[str, Any]:
                    if phase != "start":
                        await asyncio.wait_for(reached[task][phase].wait(), 60)
                    await asyncio.sleep(rng.uniform(0, 0.001))
                    return await send(a, [racing])

                async def grant() -> dict[str, Any]:
                    try:
                        return await lease(b, "acquire", task, holder=HOLDER, ttl_s=60)
                    finally:
                        for moment in reached[task].values():  # "answered", and any missed
                            moment.set()

                granted, reply = await asyncio.gather(grant(), unleased())
                if not granted["ok"] or code(reply) == "unavailable":
                    assert granted["ok"] or granted["error"]["code"] == "unavailable", granted
                    stalled.add(task)
                    return
                held = granted["lease"]
                tokens[task] = held["token"]
                outcomes[code(reply)] = outcomes.get(code(reply), 0) + 1
                assert code(reply) in ("accepted", "fencing_token_required"), reply
                if reply["ok"] and reply["results"][0]["seq"] > held["token"]:
                    after.append((task, reply["results"][0]["seq"], held["token"]))
                nxt = await send(rng.choice((a, b)), [ev(task)], held)
                again = await send(rng.choice((a, b)), [racing])
                if "unavailable" in (code(nxt), code(again)):
                    stalled.add(task)
                    return
                assert code(nxt) == "accepted", nxt
                if reply["ok"]:
                    assert again["ok"] and again["results"] == [{**reply["results"][0],
                                                                 "duplicate": True}], again
                else:
                    assert code(again) == "fencing_token_required", again

        await asyncio.gather(*(trial(i, t) for i, t in enumerate(tasks)))

    landed_after = []
    for seq, body in await stored(settings):
        task = body["task_id"]
        if task in tokens and body["event_id"] == racing_ids[task] and seq > tokens[task]:
            landed_after.append((task, seq, tokens[task]))
    print(f"{TRIALS} trials: racing appends {outcomes}; {len(after)} acknowledged after the grant, "
          f"{len(landed_after)} stored after it; {len(stalled)} met a stalled ledger")
    assert len(stalled) <= TRIALS // 20, f"{len(stalled)} of {TRIALS} trials met a stalled ledger"
    assert after == [], f"{len(after)} unleased appends acknowledged after the grant: {after[:5]}"
    assert landed_after == [], f"{len(landed_after)} stored after the grant: {landed_after[:5]}"


async def test_callers_of_one_task_through_two_writers_keep_their_order_and_store_once(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through A, 150 appends of one task (single events and atomic batches of two or three,
    coalesced by the group committer), every tenth one a resend of an earlier one's ids (a
    shared batch holding it is refused and split), while B appends to the same task between
    them (A's knowledge of the task goes stale: A's appends are refused, checked again and
    committed after what came). A's appends are stored in the order A took them, each event
    once, the resends answered duplicate at the first sequences. Then B grants the task's lease:
    A, whose watch lags, refuses an append without a token, and the holder's append through A
    is accepted."""
    task = "hot"
    async with writers(settings, 2) as (a, b):
        as_agent(monkeypatch, a, b)
        freeze_mirror(a, monkeypatch)
        assert code(await send(a, [created(task=task)])) == "accepted"
        calls: list[tuple[Call, bool]] = []  # (call, is a resend)
        others: list[asyncio.Task[dict[str, Any]]] = []
        for i in range(150):
            if i % 10 == 9:
                earlier = calls[i // 2][0]
                call, resend = Call({"events": [dict(e) for e in _events(earlier)]}), True
            else:
                call, resend = Call({"events": [ev(task) for _ in range(1 + i % 3)]}), False
            calls.append((call, resend))
            await a._on_request(call)  # type: ignore[arg-type]
            if i % 4 == 0:
                others.append(asyncio.create_task(send(b, [ev(task)])))
            if i % 16 == 0:
                await asyncio.sleep(0.002)  # let some commits settle between bursts
        replies = [await asyncio.wait_for(c.reply, 60) for c, _ in calls]
        # A retryable `unavailable` (an ack that took over 2 s on a loaded machine, or a task
        # overtaken by the other writer on every attempt): its outcome is unknown; few may.
        theirs = [code(r) for r in await asyncio.gather(*others)]
        assert set(theirs) <= {"accepted", "unavailable"}, theirs
        assert all(code(r) in ("accepted", "unavailable") for r in replies), replies
        unknown = [r for r in replies if not r["ok"]] + [c for c in theirs if c != "accepted"]
        assert len(unknown) <= 10, unknown
        first_seqs: dict[str, int] = {}
        order = []
        for (_, resend), reply in zip(calls, replies, strict=True):
            for result in reply.get("results") or []:
                if resend and result["event_id"] in first_seqs:
                    assert result["duplicate"] and result["seq"] == first_seqs[result["event_id"]]
                elif not resend:
                    assert not result["duplicate"], reply
                    first_seqs[result["event_id"]] = result["seq"]
                    order.append(result["seq"])
        assert order == sorted(order)
        assert len(order) > 100
        ids = [body["event_id"] for _, body in await stored(settings) if body["task_id"] == task]
        assert len(ids) == len(set(ids))
        assert set(first_seqs) <= set(ids)

        held = (await lease(b, "acquire", task, holder=HOLDER, ttl_s=60))["lease"]
        assert code(await send(a, [ev(task)])) == "fencing_token_required"
        assert code(await send(a, [ev(task)], held)) == "accepted"
        kinds = [body["kind"] for _, body in await stored(settings) if body["task_id"] == task]
        assert kinds[-2:] == ["lease_granted", "variable_set"]


def _events(call: Call) -> list[dict[str, Any]]:
    return list(json.loads(call.data)["events"])
