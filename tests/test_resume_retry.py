"""A resume retried while the checkpointer is frozen is answered once (issue 20, the chaos finding).

The chaos run's case, with real processes: a resume reaches a checkpointer that is SIGSTOPped,
the caller times out and sends it again, and both requests are answered when the process runs
again. Before ``request_id`` each took a lease, the second superseding the first, and one
answer was one event behind Working Memory. Now both answers are the same answer, agree with
Working Memory at their watermark, and the task's ledger holds one grant.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import msgspec
import nats.js.errors
import pytest
from nats.aio.client import Client as NATS

from agentledger.chaos.history import differing_keys
from agentledger.config import Settings
from agentledger.contracts.codec import encode_request
from agentledger.contracts.resume import ResumeReply, ResumeRequest
from agentledger.errors import ContractError
from agentledger.stores.ledger import ledger_subject
from ckpt_support import TENANT, chain, created, plan, processes, running, started

_reply = msgspec.json.Decoder(ResumeReply)


async def grants(nc: NATS, settings: Settings, task: str) -> list[int]:
    """The sequences of the task's ``lease_granted`` events, read from the ledger."""
    js = nc.jetstream()
    subject = ledger_subject(settings.prefix, TENANT, task)
    seqs, seq = [], 1
    while True:
        try:
            msg = await js.get_msg(settings.stream, seq=seq, subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return seqs
        if b'"kind":"lease_granted"' in (msg.data or b""):
            seqs.append(int(msg.seq or 0))
        seq = int(msg.seq or 0) + 1


@pytest.mark.timeout(180)
async def test_a_retry_to_a_frozen_checkpointer_gets_the_first_answer_and_one_lease(settings: Settings) -> None:
    task = "frozen-retry"
    async with running(settings, checkpointer=False) as stack, \
            processes(settings, "checkpointer") as (proc,):
        c = stack.c
        await c.append_batch([created(task), plan(task, chain(3))])
        request_id = uuid.uuid4().hex
        body = ResumeRequest(tenant=TENANT, task_id=task, executor="resumer", lease_ttl_s=60.0,
                             schema_version=3, request_id=request_id)
        inbox = c.nc.new_inbox()
        first = await c.nc.subscribe(inbox, max_msgs=1)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            # The first attempt, whose caller gives up waiting: its answer still comes to the inbox.
            await c.nc.publish(f"{settings.prefix}.resume", encode_request(msgspec.to_builtins(body)),
                               reply=inbox)
            # The retry, through the client, with the same id.
            retry = asyncio.create_task(c.resume(TENANT, task, "resumer", request_id=request_id))
            await asyncio.sleep(0.2)
            await c.nc.flush()
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        answers = [_reply.decode((await first.next_msg(timeout=60)).data), await retry]
        for answer in answers:
            assert answer.status == "resumable", answer.reasons
            assert answer.lease is not None
        a, b = answers
        assert (a.lease, a.watermark, a.state) == (b.lease, b.watermark, b.state)
        assert await grants(c.nc, settings, task) == [a.lease.token]
        for answer in answers:
            wm = await c.working_memory(TENANT, task, min_seq=answer.watermark)
            assert differing_keys(answer.state, wm.state) == []
        # The one lease works.
        await c.append(started(task, "S1"), lease=a.lease)


async def test_a_request_id_names_one_request(settings: Settings) -> None:
    """The same id with another request is refused, naming the field; a v2 request cannot carry one."""
    task = "id-reused"
    async with running(settings) as stack:
        c = stack.c
        await c.append_batch([created(task), plan(task, chain(2))])
        first = await c.resume(TENANT, task, "resumer", request_id="same")
        assert first.status == "resumable"
        again = await c.resume(TENANT, task, "resumer", request_id="same")
        assert again.lease == first.lease
        with pytest.raises(ContractError) as exc:
            await c.resume(TENANT, task, "resumer", request_id="same", lease_ttl_s=30.0)
        assert (exc.value.code, exc.value.path) == ("request_id_reused", "$.request_id")
        bad = ResumeRequest(tenant=TENANT, task_id=task, executor="resumer", schema_version=2,
                            request_id="x")
        raw = await c.nc.request(f"{settings.prefix}.resume", encode_request(msgspec.to_builtins(bad)),
                                 timeout=30)
        reply = _reply.decode(raw.data)
        assert reply.error is not None
        assert (reply.error.code, reply.error.path) == ("unknown_field", "$.request_id")
