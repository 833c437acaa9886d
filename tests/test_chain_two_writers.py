"""Two ledger-writers appending to one fenced task at the same moment keep its chain whole.

Every message of a task carries ``Agentledger-Chain`` (``core.ledger_chain``): its per-task index
and the tag of the task's message before it. Each writer links a new message to the head it
believes the task has; if two writers could both link to the same head, the task's chain would
fork (an index twice, a link to a message that is not the one before it), and every reader
would refuse the task from there. What keeps it whole is that every chained append is committed
with an expectation on the task subject's last sequence, the one the head was read at: the
server refuses the second of two links to one head, and the writer re-reads the head and links
again with the same ids (``group_commit``, ``lease_fencing``).

The two writers run in this process on one stream (``test_writers_racing.writers``), each fed
requests directly as NATS would hand them to that instance, so the race is as tight as the
event loop makes it. The check reads the stream back: indexes 1..n in stream order, each link
naming the previous message's tag, each tag valid under the installation's keys.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from agentledger.config import Settings
from agentledger.core import ledger_chain
from agentledger.core.ledger_chain import CHAIN, GENESIS
from agentledger.security.integrity_keys import keys_of
from test_writer import created, event
from test_writers_racing import append, lease, writers
from writer_support import ledger_messages

_ids = itertools.count()
ROUNDS = 40  # per round, every appender sends one append through its writer at once
APPENDERS = 6  # per writer


def _events(task: str, n: int) -> list[dict[str, Any]]:
    return [event(f"e{next(_ids)}", task=task, payload={"name": f"v{next(_ids)}", "value": 1})
            for _ in range(n)]


async def _chain_of(settings: Settings, task: str) -> list[tuple[int, int, str | None, str]]:
    """(seq, index, previous tag, own tag) of every chained message in the stream (the test's
    stream holds only ``task``), in stream order, each tag checked against the keys
    (``own_head`` raises on a failed one)."""
    keys = keys_of(settings)
    out = []
    for seq, body, headers in await ledger_messages(settings, opened=False):  # the chain covers the bytes stored
        parsed = ledger_chain.parse(headers.get(CHAIN, ""))
        if parsed is None:
            continue
        head = ledger_chain.own_head(keys.mac_key_of, tenant="acme", task=task, seq=seq,
                                     body=body, headers=headers)
        assert head is not None, f"seq {seq} has a chain header but no head"
        out.append((seq, parsed[0], parsed[1], parsed[2]))
    return out


async def test_two_writers_appending_to_one_fenced_task_never_fork_its_chain(settings: Settings) -> None:
    """Writers A and B take appends for the same leased task, ``APPENDERS`` each at a time, with
    the lease's token: single events and three-event atomic appends mixed. Whatever each
    append is answered, the stored chain has every index once, in order, each link naming the
    message just before it; and both writers stored some of the task's events."""
    async with writers(settings, 2) as (a, b):
        assert await append(a, [created(task="f1")]) == "accepted"
        grant = (await lease(a, "acquire", "f1", holder="exec-a", ttl_s=120))["lease"]
        answers: list[str] = []
        by_writer = {"a": 0, "b": 0}

        async def appender(name: str, i: int) -> None:
            w = a if name == "a" else b
            for r in range(ROUNDS):
                n = 3 if (i + r) % 4 == 0 else 1
                answer = await append(w, _events("f1", n), grant, grant["secret"])
                answers.append(answer)
                if answer == "accepted":
                    by_writer[name] += n

        await asyncio.gather(*(appender(name, i) for name in ("a", "b") for i in range(APPENDERS)))

    # Under this race an append may be overtaken by the other writer more often than the writer
    # re-checks it: that one answers a retryable `unavailable` and stored nothing. No other answer.
    assert set(answers) <= {"accepted", "unavailable"}, sorted(set(answers))
    assert by_writer["a"] > 0 and by_writer["b"] > 0, by_writer
    chain = await _chain_of(settings, "f1")
    indexes = [index for _, index, _, _ in chain]
    assert indexes == list(range(1, len(chain) + 1)), [
        (seq, index) for (seq, index, _, _), want in zip(chain, itertools.count(1), strict=False)
        if index != want][:5]
    head = GENESIS
    for seq, index, prev, own in chain:
        assert prev == head.tag, f"seq {seq} (index {index}) links to {prev}, not to index {head.index}"
        head = ledger_chain.Head(index, own)
    # Every accepted event is in the chain (plus the task's creation and the lease grant).
    assert len(chain) >= 2 + by_writer["a"] + by_writer["b"]
