"""A pull consumer reader with one pull request open at a time.

nats-py's ``fetch`` costs about as much as projecting the batch it returns.
This reader keeps exactly one pull request outstanding: ``no_wait`` requests
while the consumer has a backlog (an empty answer means drained), a long poll
once it is drained, so a busy projector never waits and an idle one costs one
request per poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec
from nats.aio.client import Client


class ConsumerLostError(Exception):
    """The server says the consumer is gone (deleted, or no one answers its pull requests)."""


class Puller:
    """Fetches batches from a durable pull consumer with one callback per message.

    nats-py's ``fetch`` waits for every message through its own timed future,
    which costs as much as projecting the message. This keeps at most one pull
    request open on a private inbox and buffers what arrives: a ``no_wait``
    request while there is a backlog (a full batch at once), and once the
    consumer is drained, a long poll that hands over messages as they arrive.
    """

    # How long a request may stay unanswered before it is presumed lost.
    NO_WAIT_GRACE = 5.0
    POLL_GRACE = 1.0
    # How often a wait looks whether the connection was re-established meanwhile: a request
    # sent before a reconnect died with the old connection (a restarted server knows nothing
    # of it), so it is sent again at once instead of after its grace ran out (that wait was
    # most of Working Memory's recovery after a nats-server kill).
    RECONNECT_CHECK_S = 0.1

    def __init__(self, nc: Client, stream: str, consumer: str) -> None:
        self._nc = nc
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = nc.new_inbox()
        self._sub: Any = None
        self._buf: list[Any] = []
        self._wake = asyncio.Event()
        self._mode: str | None = None  # the open request: "no_wait", "poll" or None
        self._remaining = 0  # messages the open request may still deliver
        self._stale_at = 0.0
        self._drained = False  # the last no_wait request found nothing
        self._first_at = 0.0  # when the oldest buffered message arrived
        self._lost: str | None = None  # why the consumer is gone, once the server said so
        self._reconnects = self._connections()  # the connection the open request was sent on

    async def start(self) -> None:
        self._sub = await self._nc.subscribe(self._inbox, cb=self._on_msg, pending_msgs_limit=0,
                                             pending_bytes_limit=0)

    async def close(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):  # the subscription is being replaced anyway
                await self._sub.unsubscribe()
            self._sub = None

    async def _on_msg(self, msg: Any) -> None:
        headers = msg.headers
        status = headers.get("Status") if headers else None
        if status:
            if status == "100":  # heartbeat
                return
            # 404 no messages, 408 request expired, 409 conflict: the request is over.
            if self._mode == "no_wait" and status == "404":
                self._drained = True
            description = (headers.get("Description") or "") if headers else ""
            # 503: no responders, the consumer does not exist; 409 "Consumer Deleted".
            if status == "503" or (status == "409" and "deleted" in description.lower()):
                self._lost = f"{status} {description}".strip()
            self._mode = None
            self._wake.set()
            return
        if not self._buf:
            self._first_at = asyncio.get_running_loop().time()
        self._buf.append(msg)
        self._remaining -= 1
        if self._remaining <= 0:
            self._mode = None
        if self._mode != "no_wait":  # a no_wait batch is handed over whole, when it is complete
            self._wake.set()

    async def fetch(self, batch: int, wait_s: float, linger_s: float = 0.0) -> list[Any]:
        """Up to ``batch`` messages; raise ``TimeoutError`` if none arrive within ``wait_s``.

        ``linger_s``: once drained, messages trickle in one by one through the long poll;
        the first is then held up to ``linger_s`` for more to join it (or the batch to
        fill), so a slow stream is folded a few messages per transaction, not one.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            if self._lost is not None and not self._buf:
                raise ConsumerLostError(self._lost)
            # While a no_wait request is filling a batch, wait for it; otherwise hand over what is here.
            if self._buf and (self._mode != "no_wait" or len(self._buf) >= batch):
                held = self._first_at + linger_s - loop.time()
                if self._mode == "poll" and len(self._buf) < batch and held > 0:
                    # One sleep, not a wake-up per message: what arrives meanwhile is buffered.
                    await asyncio.sleep(held)
                    continue
                out, self._buf = self._buf[:batch], self._buf[batch:]
                if self._buf:
                    self._first_at = loop.time()
                return out
            now = loop.time()
            if self._mode is not None and (now > self._stale_at
                                           or self._reconnects != self._connections()):
                self._mode = None  # the server's end-of-request status was lost, or its connection
            self._wake.clear()
            if self._mode is None:
                await self._request(batch, deadline - now)
            left = deadline - loop.time()
            if left <= 0:
                if self._buf:
                    continue
                raise TimeoutError
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(left, self.RECONNECT_CHECK_S))

    def _connections(self) -> int:
        """How many times the connection was re-established (nats-py counts them in ``stats``)."""
        return int(self._nc.stats["reconnects"])

    async def _request(self, batch: int, wait: float) -> None:
        """A no_wait request while there is a backlog, else a long poll of ``wait`` seconds."""
        now = asyncio.get_running_loop().time()
        self._remaining = batch
        self._reconnects = self._connections()
        if not self._drained:
            self._mode = "no_wait"
            self._stale_at = now + self.NO_WAIT_GRACE
            body: dict[str, Any] = {"batch": batch, "no_wait": True}
        else:
            self._drained = False
            wait = max(wait, 0.05)
            self._mode = "poll"
            self._stale_at = now + wait + self.POLL_GRACE
            body = {"batch": batch, "expires": int(wait * 1e9)}
        await self._nc.publish(self._next, msgspec.json.encode(body), reply=self._inbox)
