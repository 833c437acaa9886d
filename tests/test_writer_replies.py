"""``Replies``: the request/reply path the client's appends and the writer's JetStream acks share.

It replaces nats-py's ``request`` on the append path, so it must keep what that
gave: each reply reaches the request it answers (also when replies come back in
another order), a request nobody answers times out with nats-py's timeout, and a
subject without responders fails at once with nats-py's no-responders error, which
the client turns into a typed ``unavailable``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from agentledger.client import Client, Replies, connect
from agentledger.config import Settings
from agentledger.errors import UnavailableError
from test_writer import event


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    c = await connect(settings, timeout=2, retries=1)
    yield c
    await c.close()


async def test_replies_reach_their_requests_in_any_order(client: Client) -> None:
    """The responder answers the second request first; each caller still gets its own reply."""
    held: list[Msg] = []

    async def answer_in_reverse(msg: Msg) -> None:
        held.append(msg)
        if len(held) == 2:
            for m in reversed(held):
                await m.respond(b"re:" + m.data)

    sub = await client.nc.subscribe("replies.test.reverse", cb=answer_in_reverse)
    await client.nc.flush()
    replies = Replies(client.nc)
    first = await replies.send("replies.test.reverse", b"one", 5)
    second = await replies.send("replies.test.reverse", b"two", 5)
    assert (await replies.wait(second)).data == b"re:two"
    assert (await replies.wait(first)).data == b"re:one"
    await sub.unsubscribe()


async def test_an_unanswered_request_times_out_and_no_responders_fails_at_once(client: Client) -> None:
    async def never(msg: Msg) -> None:
        pass

    sub = await client.nc.subscribe("replies.test.silent", cb=never)
    await client.nc.flush()
    replies = Replies(client.nc)
    with pytest.raises(NatsTimeout):
        await replies.request("replies.test.silent", b"", 0.2)
    with pytest.raises(NoRespondersError):
        await asyncio.wait_for(replies.request("replies.test.nobody", b"", 30), 10)
    await sub.unsubscribe()


async def test_an_append_without_a_writer_is_unavailable(client: Client) -> None:
    """No writer serves the subject: the append is a typed, retryable ``unavailable``."""
    with pytest.raises(UnavailableError):
        await client.append(event("e1"))
