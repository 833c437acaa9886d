"""Several ledger-writers serving one ledger at once: fencing, leases and expectations stay exact.

Two or three ``LedgerWriter`` instances run in this process on the same settings
(each is a micro service instance in the same queue group, as separate processes
would be). A test talks to a chosen writer by handing its handlers a request
directly (``Call``), which is what NATS does with the message it picked for
that instance; the writer's reply is the reply the client would get.

What is checked: a lease is granted once, through whichever writers are asked
at the same moment; a grant made by one writer fences appends that another
writer validated against its own (stale) copy of the lease table, because each
fenced append is committed with an expectation on the task's last sequence and
a refused expectation makes the writer read what was appended since (see
``agentledger.stores.leases``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from agentledger.client import connect
from agentledger.config import Settings
from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.stores.leases import Lease, LeaseTable
from helpers import assert_eventually
from test_writer import created, event, stored

_ids = itertools.count()


class Call:
    """A request handed to one writer's handler; ``reply`` is what it answered."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()
        self.headers: dict[str, str] | None = None  # no identity header: the services' account
        self.reply: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def respond(self, data: bytes = b"", headers: dict[str, str] | None = None) -> None:
        if not self.reply.done():
            self.reply.set_result(json.loads(data))


@contextlib.asynccontextmanager
async def writers(settings: Settings, n: int) -> AsyncIterator[list[LedgerWriter]]:
    started: list[LedgerWriter] = []
    try:
        for _ in range(n):
            w = LedgerWriter(settings)
            await w.start()
            started.append(w)
        yield started
    finally:
        for w in reversed(started):
            with contextlib.suppress(Exception):
                await w.stop()


def table(w: LedgerWriter) -> LeaseTable:
    assert w._leases is not None
    return w._leases


async def lease(w: LedgerWriter, action: str, task: str, **body: Any) -> dict[str, Any]:
    call = Call({"tenant": "acme", "task_id": task, **body})
    await w._lease_handler(action)(call)  # type: ignore[arg-type]
    return await asyncio.wait_for(call.reply, 30)


async def append(w: LedgerWriter, events: list[dict[str, Any]], grant: dict[str, Any] | None = None,
                 secret: str | None = None, expected: int | None = None) -> str:
    """Append through writer ``w``: "accepted" or the error code."""
    body: dict[str, Any] = {"events": [{**e, "fencing_token": grant["token"]} if grant else e
                                       for e in events]}
    if secret is not None:
        body["lease_secret"] = secret
    if expected is not None:
        body["expected_last_seq"] = expected
    call = Call(body)
    await w._on_request(call)  # type: ignore[arg-type]
    reply = await asyncio.wait_for(call.reply, 30)
    return "accepted" if reply["ok"] else reply["error"]["code"]


def ev(task: str) -> dict[str, Any]:
    return event(f"v{next(_ids)}", task=task)


def freeze_mirror(w: LedgerWriter, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on writer ``w``'s watch of the lease table delivers nothing: a lagging watch."""
    monkeypatch.setattr(table(w), "_remember", lambda *a, **k: None)


async def grants_of(settings: Settings, task: str) -> list[int]:
    return [seq for seq, body in await stored(settings)
            if body["task_id"] == task and body["kind"] == "lease_granted"]


# ---- a stale copy of the lease table does not let an old token through -----------------------


async def test_a_grant_through_b_fences_an_append_that_a_checks_against_its_stale_mirror(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """exec-a's lease is granted through A, released through B and granted to exec-b through B
    while A's watch lags: A still believes exec-a holds the lease, yet exec-a's append with its
    old token and secret through A is refused (the grant on the ledger is what fences it), and
    exec-b's append through A is accepted. A caller's expected_last_seq holds across writers."""
    async with writers(settings, 2) as (a, b):
        assert await append(a, [created(task="t1")]) == "accepted"
        old = (await lease(a, "acquire", "t1", holder="exec-a", ttl_s=30))["lease"]
        assert await append(a, [ev("t1")], old, old["secret"]) == "accepted"
        freeze_mirror(a, monkeypatch)
        assert (await lease(b, "release", "t1", holder="exec-a", token=old["token"],
                            secret=old["secret"]))["ok"]
        new = (await lease(b, "acquire", "t1", holder="exec-b", ttl_s=30))["lease"]
        assert new["token"] > old["token"]
        assert table(a)._mirror["acme.t1"].lease.token == old["token"]  # A's copy is stale
        assert await append(a, [ev("t1")], old, old["secret"]) == "stale_fencing_token"
        assert await append(a, [ev("t1")], new, new["secret"]) == "accepted"
        assert await append(b, [ev("t1")], old, old["secret"]) == "stale_fencing_token"
        assert await grants_of(settings, "t1") == [old["token"], new["token"]]
        # The caller's own expectation, checked by a writer that did not commit the last event.
        last = (await stored(settings))[-1][0]
        assert await append(b, [ev("t1")], new, new["secret"], expected=last) == "accepted"
        assert await append(a, [ev("t1")], new, new["secret"], expected=last) == "conflict"


async def test_an_expired_lease_regranted_through_b_fences_a_writer_whose_clock_lags(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """exec-a's lease (granted through B) lapses and B grants the task to exec-b. Writer A's watch
    lags and its clock is 30 s behind, so by A's copy exec-a still holds a live lease: exec-a's
    append with the old token through A is refused all the same."""
    async with writers(settings, 2) as (a, b):
        assert await append(a, [created(task="t1")]) == "accepted"
        old = (await lease(b, "acquire", "t1", holder="exec-a", ttl_s=0.3))["lease"]
        await asyncio.sleep(0.2)  # A's watch delivers the grant (it did not write it)
        freeze_mirror(a, monkeypatch)
        monkeypatch.setattr(table(a), "_clock", lambda: time.time() - 30)
        await asyncio.sleep(0.35)
        new = (await lease(b, "acquire", "t1", holder="exec-b", ttl_s=30))["lease"]
        assert table(a)._mirror["acme.t1"].lease.token == old["token"]
        assert await append(a, [ev("t1")], old, old["secret"]) == "stale_fencing_token"
        assert await append(a, [ev("t1")], new, new["secret"]) == "accepted"



async def test_an_append_checked_before_a_grant_and_stored_after_it_is_refused(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """exec-a's append is checked by A while exec-a's lease is live, and held back on its way to
    the ledger; the lease lapses and B grants the task to exec-b; then A's commit goes out. It
    is refused (the task moved past the sequence A checked against, and what moved it is a
    grant): the ledger never holds exec-a's event after exec-b's grant."""
    async with writers(settings, 2) as (a, b):
        assert await append(a, [created(task="t1")]) == "accepted"
        old = (await lease(a, "acquire", "t1", holder="exec-a", ttl_s=0.5))["lease"]
        committer = a._committer
        assert committer is not None
        real = committer.submit_nowait
        gate, held = asyncio.Event(), asyncio.Event()

        def submit(unit: Any) -> asyncio.Future[Any]:
            if held.is_set():
                return real(unit)
            held.set()

            async def later() -> None:
                await gate.wait()
                real(unit)

            asyncio.get_running_loop().create_task(later())
            return unit.future

        monkeypatch.setattr(committer, "submit_nowait", submit)
        late = asyncio.create_task(append(a, [event("late", task="t1")], old, old["secret"]))
        await asyncio.wait_for(held.wait(), 10)
        await asyncio.sleep(0.6)
        new = (await lease(b, "acquire", "t1", holder="exec-b", ttl_s=30))["lease"]
        gate.set()
        assert await late in ("stale_fencing_token", "lease_expired")
        assert await append(a, [ev("t1")], new, new["secret"]) == "accepted"
        ids = [body["event_id"] for _, body in await stored(settings)]
        assert "late" not in ids


async def test_a_stale_mirror_never_lets_an_old_token_through_over_many_tasks(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The expiry case of the previous test on 100 tasks and three writers at once: the leases
    granted through C lapse and are granted again through B while A's copy is frozen and its
    clock lags; every old token is refused through A, every new one accepted through A and C."""
    tasks = [f"s{i}" for i in range(100)]
    async with writers(settings, 3) as (a, b, c):
        await asyncio.gather(*(append(c, [created(task=t)]) for t in tasks))
        old = {t: (await lease(c, "acquire", t, holder="old", ttl_s=0.5))["lease"] for t in tasks}
        await asyncio.sleep(0.2)  # A's watch delivers them
        assert all(table(a)._mirror[f"acme.{t}"].lease.token == old[t]["token"] for t in tasks)
        freeze_mirror(a, monkeypatch)
        monkeypatch.setattr(table(a), "_clock", lambda: time.time() - 30)
        await asyncio.sleep(0.5)
        new = dict(zip(tasks, [r["lease"] for r in await asyncio.gather(
            *(lease(b, "acquire", t, holder="new", ttl_s=30) for t in tasks))], strict=True))
        stale = await asyncio.gather(*(append(a, [ev(t)], old[t], old[t]["secret"]) for t in tasks))
        assert set(stale) == {"stale_fencing_token"}
        fresh = await asyncio.gather(*(append(w, [ev(t)], new[t], new[t]["secret"])
                                       for t in tasks for w in (a, c)))
        assert set(fresh) == {"accepted"}



# ---- lease changes through writers that did not make the grant ---------------------------------


async def test_renew_release_and_regrant_through_other_writers_at_once(settings: Settings) -> None:
    """On 100 tasks, without waiting for any watch: granted through A, renewed through B,
    released through C, granted to another holder through A (whose copy still shows the first
    lease), and renewed through C. Every step succeeds, and the first token is refused
    through every writer afterwards."""
    tasks = [f"l{i}" for i in range(100)]
    async with writers(settings, 3) as (a, b, c):

        async def steps(task: str) -> list[str]:
            assert await append(b, [created(task=task)]) == "accepted"
            first = (await lease(a, "acquire", task, holder="one", ttl_s=30))["lease"]
            renewed = await lease(b, "renew", task, holder="one", token=first["token"],
                                  secret=first["secret"], ttl_s=60)
            released = await lease(c, "release", task, holder="one", token=first["token"],
                                   secret=first["secret"])
            second = await lease(a, "acquire", task, holder="two", ttl_s=30)
            assert second["ok"], second
            got = second["lease"]
            again = await lease(c, "renew", task, holder="two", token=got["token"],
                                secret=got["secret"], ttl_s=60)
            codes = [await append(w, [ev(task)], first, first["secret"]) for w in (a, b, c)]
            return [str(renewed["ok"]), str(released["ok"]), str(again["ok"]), *codes]

        outcomes = await asyncio.gather(*(steps(t) for t in tasks))
    assert {tuple(o) for o in outcomes} == {("True", "True", "True", *["stale_fencing_token"] * 3)}


async def test_one_holder_asking_every_writer_at_once_ends_with_one_working_lease(
        settings: Settings) -> None:
    """200 trials: the same holder asks three writers for one task's lease at the same moment.
    Each grant that succeeds retires the ones before it, as a second grant to a holder does:
    the lease table ends with the highest token granted, which is the task's last grant on the
    ledger and works through every writer; every other token returned is refused as stale."""
    tasks = [f"h{i}" for i in range(200)]
    async with writers(settings, 3) as ws, await connect(settings) as client:
        kv = await client.nc.jetstream().key_value(settings.leases_bucket)

        async def trial(task: str) -> tuple[list[str], list[str], int, int]:
            assert await append(ws[0], [created(task=task)]) == "accepted"
            replies = await asyncio.gather(*(lease(w, "acquire", task, holder="h", ttl_s=30)
                                             for w in ws))
            granted = sorted((r["lease"] for r in replies if r["ok"]), key=lambda g: g["token"])
            assert granted, replies
            entry = msgspec.json.decode((await kv.get(f"acme.{task}")).value, type=Lease)
            best = granted[-1]
            ok = [await append(w, [ev(task)], best, best["secret"]) for w in ws]
            old = [await append(w, [ev(task)], g, g["secret"]) for g in granted[:-1] for w in ws]
            return ok, old, entry.token, best["token"]

        results = dict(zip(tasks, await asyncio.gather(*(trial(t) for t in tasks)), strict=True))
    assert {c for ok, *_ in results.values() for c in ok} == {"accepted"}
    assert {c for _, old, *_ in results.values() for c in old} <= {"stale_fencing_token"}
    last_grant: dict[str, int] = {}
    for seq, body in await stored(settings):
        if body["kind"] == "lease_granted":
            last_grant[body["task_id"]] = seq
    assert all(entry == best == last_grant[t] for t, (_, _, entry, best) in results.items())
    several = sum(1 for _, old, *_ in results.values() if old)
    print(f"{len(tasks)} trials; {several} with more than one grant answered")


# ---- racing for one task's lease through two and three writers -----------------------------------

TRIALS = 1000


@pytest.mark.parametrize("n", [2, 3])
async def test_writers_racing_for_one_tasks_lease_exactly_one_wins(settings: Settings, n: int) -> None:
    """1,000 trials per writer count, each on a fresh task whose previous holder's lease lapsed:
    n executors ask n different writers for the lease at the same moment. Exactly one gets it,
    the others hear lease_held; the previous holder's token and the winner's token without its
    secret are refused through every writer; the winner's appends are accepted through every
    writer, one after the other (each writer learning what the others appended). The ledger holds
    exactly the two grants of each task, and every fenced event of a task carries its winner's
    token and lies after that grant. A trial that meets a stalled ledger (a retryable
    `unavailable`: its outcome is unknown) is held to the ledger alone: at most one grant after
    the dead one, every fenced event that winner's; at most 5% of the trials may."""
    tasks = [f"r{i}" for i in range(TRIALS)]
    gate = asyncio.Semaphore(50)
    async with writers(settings, n) as ws:
        dead: dict[str, dict[str, Any]] = {}

        async def setup(i: int, task: str) -> None:
            async with gate:
                opened = created(task=task)
                # Retried as the same event (stored once) while the ledger is stalled.
                for _ in range(50):
                    outcome = await append(ws[i % n], [opened])
                    if outcome != "unavailable":
                        break
                    await asyncio.sleep(0.1)
                assert outcome == "accepted"
                got = await lease(ws[(i + 1) % n], "acquire", task, holder="dead", ttl_s=0.01)
                dead[task] = got["lease"]

        await asyncio.gather(*(setup(i, t) for i, t in enumerate(tasks)))
        await asyncio.sleep(0.05)  # every dead lease lapsed
        # Every writer has the dead lease in its copy, checked against the ledger, so none starts
        # the race a read behind the one that granted it.
        for w in ws:
            await assert_eventually(lambda w=w: all(f"acme.{t}" in table(w)._mirror for t in tasks))
            for t in tasks:
                await table(w).current("acme", t)

        # Tasks whose trial met a stalled ledger: a request answered the retryable
        # `unavailable` (JetStream did not answer within the writer's timeout; this machine's
        # disk sometimes stalls an fsync for seconds), so its outcome is unknown.
        stalled: set[str] = set()

        async def trial(i: int, task: str) -> tuple[int, list[str], list[str], list[str]] | None:
            order = random.Random(i).sample(range(n), n)  # who asks first varies by trial
            async with gate:
                asked = await asyncio.gather(*(lease(ws[j], "acquire", task, holder=f"x{j}",
                                                     ttl_s=30) for j in order))
                replies = [asked[order.index(j)] for j in range(n)]
                if any(not r["ok"] and r["error"]["code"] == "unavailable" for r in replies):
                    stalled.add(task)
                    return None
                won = [j for j, r in enumerate(replies) if r["ok"]]
                assert len(won) == 1, replies
                lost = [r["error"]["code"] for r in replies if not r["ok"]]
                win = replies[won[0]]["lease"]
                old = dead[task]
                refused = [await append(w, [ev(task)], old, old["secret"]) for w in ws]
                refused += [await append(ws[j], [ev(task)], win, "x" * 43)
                            for j in range(n) if j != won[0]]
                accepted = [await append(w, [ev(task)], win, win["secret"]) for w in ws]
                if "unavailable" in refused + accepted:
                    stalled.add(task)
                    return None
                return won[0], lost, refused, accepted

        started = time.monotonic()
        results = [r for r in await asyncio.gather(*(trial(i, t) for i, t in enumerate(tasks)))
                   if r is not None]
        elapsed = time.monotonic() - started

    by_writer = [sum(1 for r in results if r[0] == j) for j in range(n)]
    print(f"{n} writers, {TRIALS} trials in {elapsed:.1f} s: one winner every time; "
          f"wins by writer {by_writer}; {len(stalled)} met a stalled ledger")
    assert len(stalled) <= TRIALS // 20, f"{len(stalled)} of {TRIALS} trials met a stalled ledger"
    assert sum(by_writer) == TRIALS - len(stalled)
    assert {code for r in results for code in r[1]} == {"lease_held"}
    assert {code for r in results for code in r[2][:n]} == {"stale_fencing_token"}
    assert {code for r in results for code in r[2][n:]} == {"lease_secret_invalid"}
    assert {code for r in results for code in r[3]} == {"accepted"}
    per_task: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for seq, body in await stored(settings):
        per_task.setdefault(body["task_id"], []).append((seq, body))
    for task in tasks:
        messages = per_task[task]
        grants = [seq for seq, body in messages if body["kind"] == "lease_granted"]
        fenced = [(seq, body["fencing_token"]) for seq, body in messages if "fencing_token" in body]
        assert grants[0] == dead[task]["token"], (task, grants)
        if task in stalled:
            # Whatever of the unknown outcomes landed: at most one grant after the dead one,
            # and every fenced event is that one winner's, after its grant.
            assert len(grants) <= 2, (task, grants)
            assert all(seq > grants[-1] and token == grants[-1] for seq, token in fenced) \
                if len(grants) == 2 else not fenced, (task, fenced)
            continue
        assert len(grants) == 2, (task, grants)
        assert len(fenced) == n and all(seq > grants[1] and token == grants[1]
                                        for seq, token in fenced), (task, fenced)
