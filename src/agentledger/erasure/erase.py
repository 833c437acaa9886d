"""Secure erase of JetStream messages: the bytes are overwritten, not just marked deleted.

The stream message-delete API overwrites a message's record in the block file
unless ``no_erase`` is asked for (see ``../shared/FACTS.md``); a purge, a KV
delete or an Object Store delete only drop the index entry and leave the bytes
on disk until the block is compacted. So everything the tombstone-fanout
forgets from JetStream goes through here, one message at a time, with a bounded
number of deletes in flight. A message already gone counts as done: erasing is
idempotent, and a saga step that is run again erases nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable

import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from agentledger.errors import UnavailableError

# JetStream's "message delete failed" (nats-server 2.15): its description says why, either
# "message delete not permitted" (a stream made with deny_delete) or the message is not there
# ("no message found", "stream store EOF"). 10037 / 10043: no message / sequence not found.
_DELETE_FAILED = 10057
_NOT_THERE = frozenset({10037, 10043})


def delete_denied(exc: nats.js.errors.APIError) -> bool:
    """Whether a message delete failed because the stream denies deletes."""
    return exc.err_code == _DELETE_FAILED and "not permitted" in (exc.description or "")


def already_gone(exc: nats.js.errors.APIError) -> bool:
    """Whether a message delete failed because the message is not there (erased before)."""
    return exc.err_code in _NOT_THERE or (exc.err_code == _DELETE_FAILED and not delete_denied(exc))

# Deletes in flight at once (each is one JetStream API round trip).
IN_FLIGHT = 64
# Rounds of erase_subject: a subject still being written to after this many is left to the
# caller (which says so), rather than chased forever.
ROUNDS = 5
# Messages one fetch of a scan asks for.
SCAN_BATCH = 1000
# A scan's fetch waits this long; after this many empty fetches in a row with messages still
# pending it gives up (``unavailable``) rather than stop short.
SCAN_FETCH_S = 5.0
SCAN_STALLS = 3


async def erase_seqs(js: JetStreamContext, stream: str, seqs: Iterable[int]) -> int:
    """Securely erase the messages ``seqs`` of ``stream``; how many were still there."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(seq: int) -> int:
        async with gate:
            try:
                await js.delete_msg(stream, seq)  # secure erase: the API's default
            except nats.js.errors.NotFoundError:
                return 0
            except nats.js.errors.APIError as exc:
                if already_gone(exc):
                    return 0
                raise
            return 1

    return sum(await asyncio.gather(*(one(s) for s in sorted(set(seqs)))))


async def scan_subject(js: JetStreamContext, stream: str, subject: str, *, after: int = 0,
                       headers_only: bool = False) -> AsyncIterator[Msg]:
    """Every message of ``stream`` on ``subject`` (wildcards allowed) after ``after``, in order.

    An ephemeral pull consumer (no acks) delivers them in batches: one round trip per
    batch rather than one per message. It stops at the last message stored when the
    scan began, so a subject being written to still ends.
    """
    config = ConsumerConfig(filter_subject=subject, ack_policy=AckPolicy.NONE,
                            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1,
                            headers_only=headers_only, inactive_threshold=30.0, mem_storage=True)
    sub = await js.pull_subscribe(subject, stream=stream, config=config)
    try:
        pending = (await sub.consumer_info()).num_pending or 0
        stalls = 0
        while pending > 0:
            try:
                batch = await sub.fetch(min(pending, SCAN_BATCH), timeout=SCAN_FETCH_S)
            except TimeoutError:
                # Messages counted as pending and erased since never come; the consumer's own
                # count says whether any are still there. A scan that would stop short of
                # stored messages (a slow server) raises: a plan that missed them would
                # make a receipt say done while they remain.
                pending = (await sub.consumer_info()).num_pending or 0
                stalls += 1
                if pending and stalls >= SCAN_STALLS:
                    raise UnavailableError(f"a scan of {subject!r} stalled with {pending} messages "
                                           "left; retry") from None
                continue
            stalls = 0
            for msg in batch:
                pending = msg.metadata.num_pending
                yield msg
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


def kv_removed(headers: dict[str, str] | None) -> bool:
    """Whether a KV message says its key holds no value: a delete, a purge, or the server's
    marker of a TTL removal (``Nats-Marker-Reason``, which carries no ``KV-Operation``)."""
    return bool(headers) and (bool(headers.get("KV-Operation")) or "Nats-Marker-Reason" in headers)


async def live_kv_keys(js: JetStreamContext, bucket: str, keys_filter: str) -> list[str]:
    """The keys of KV ``bucket`` matching ``keys_filter`` that hold a value now, sorted.

    Each key's last message decides (a bucket may keep history), read in one scan of the
    bucket's stream; a bucket that does not exist holds none.
    """
    prefix = f"$KV.{bucket}."
    live: dict[str, bool] = {}
    try:
        async for msg in scan_subject(js, f"KV_{bucket}", prefix + keys_filter, headers_only=True):
            live[msg.subject[len(prefix):]] = not kv_removed(msg.headers)
    except nats.js.errors.NotFoundError:
        return []
    return sorted(key for key, held in live.items() if held)


async def subject_seqs(js: JetStreamContext, stream: str, subject: str, *, after: int = 0,
                       keep: Callable[[str], bool] | None = None) -> list[int]:
    """Sequences of the messages of ``stream`` on ``subject`` (wildcards allowed) after ``after``;
    those whose subject ``keep`` accepts are left out."""
    return [msg.metadata.sequence.stream async for msg in scan_subject(js, stream, subject, after=after,
                                                                        headers_only=True)
            if keep is None or not keep(msg.subject)]


async def erase_subject(js: JetStreamContext, stream: str, subject: str, *,
                        keep: Callable[[str], bool] | None = None) -> int:
    """Securely erase every message of ``stream`` on ``subject`` (but those ``keep`` accepts)."""
    total = 0
    for _ in range(ROUNDS):  # messages appended while erasing are erased in the next round
        seqs = await subject_seqs(js, stream, subject, keep=keep)
        if not seqs:
            break
        total += await erase_seqs(js, stream, seqs)
    return total


async def erase_few(js: JetStreamContext, stream: str, subject: str) -> int:
    """Securely erase the (few) messages of ``stream`` on ``subject``, one lookup each.

    For a subject known to hold a handful of messages (an object's chunks and metadata):
    a direct lookup per message costs less than the consumer ``scan_subject`` creates.
    """
    erased = 0
    seq = 1
    while True:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return erased
        assert msg.seq is not None
        erased += await erase_seqs(js, stream, [msg.seq])
        seq = msg.seq + 1
