"""Where the ledger's numbering stands, kept where deleting the ledger stream cannot take it.

JetStream numbers a new stream from 1. A ledger stream deleted and created again
would hand out sequences that acks, watermarks and fencing tokens already hold, so
the ledger-writer keeps a high-water mark in a KV bucket of its own
(``<PREFIX>_NUMBERING``, key ``reserved``): a sequence at or above every sequence the
ledger has assigned. Whoever creates the ledger stream starts it after the mark
(``ledger.ensure_stream``).

The mark is reserved ahead, in chunks of ``RESERVE``: the writer raises it to
``last_seq + RESERVE`` when it starts, before it answers, and ``Numbering`` raises it
again whenever the stream's last sequence is past half of the chunk, looking every
``POLL_S``. No append waits for it; the mark could fall behind only if the ledger
assigned more than ``RESERVE / 2`` sequences within one look. A recreated stream so
skips up to ``RESERVE`` numbers, which is harmless: sequences are only compared.

Only the writer (and the operator) may write KV; every service may read the mark.
"""

from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, KeyWrongLastSequenceError

from agentledger.config import Settings, stream_name
from agentledger.shell.tasks import stop_task
from agentledger.stores.buckets import open_kv

log = structlog.get_logger()

KEY = "reserved"
# Sequences reserved ahead of the ledger's last one.
RESERVE = 1 << 20
# How often the writer looks at the ledger's last sequence.
POLL_S = 1.0


def bucket(settings: Settings) -> str:
    """The mark's bucket, one per prefix like the ledger stream."""
    return stream_name(settings.prefix, "NUMBERING")


async def read_mark(nc: Client, settings: Settings) -> int:
    """The high-water mark (0: none kept yet, a ledger that never numbered anything)."""
    try:
        kv = await nc.jetstream().key_value(bucket(settings))
        entry = await kv.get(KEY)
    except (BucketNotFoundError, KeyNotFoundError):
        return 0
    return int(entry.value or b"0")


async def raise_mark(nc: Client, settings: Settings, upto: int) -> int:
    """Make the mark at least ``upto``; the mark now. Compare-and-set, so two writers
    racing (``up --instances``) never lower it."""
    kv = await open_kv(nc.jetstream(), bucket(settings), replicas=settings.stream_replicas)
    while True:
        try:
            entry = await kv.get(KEY)
        except KeyNotFoundError:
            try:
                await kv.create(KEY, str(upto).encode())
            except KeyWrongLastSequenceError:
                continue
            return upto
        mark = int(entry.value or b"0")
        if mark >= upto:
            return mark
        try:
            await kv.update(KEY, str(upto).encode(), last=entry.revision)
        except KeyWrongLastSequenceError:
            continue
        return upto


async def ledger_last_seq(nc: Client, settings: Settings) -> int:
    """The last sequence the ledger stream assigned (an empty stream created after a mark:
    its first sequence minus one)."""
    state = (await nc.jetstream().stream_info(settings.stream)).state
    return max(int(state.last_seq or 0), int(state.first_seq or 1) - 1)


class Numbering:
    """The writer's part that keeps the mark ahead of the ledger (see the module docstring).

    ``start`` reserves a chunk past the stream's last sequence before the writer
    answers; then a loop reserves the next chunk whenever half of this one is used. The
    writer is not alive without the loop (a mark that stopped moving would fall behind).
    """

    def __init__(self, nc: Client, settings: Settings) -> None:
        self._nc, self._settings = nc, settings
        self._task: asyncio.Task[None] | None = None
        self.mark = 0

    async def start(self) -> None:
        self.mark = await raise_mark(self._nc, self._settings,
                                     await ledger_last_seq(self._nc, self._settings) + RESERVE)
        self._task = asyncio.create_task(self._keep_ahead(), name="writer-numbering")

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None

    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _keep_ahead(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            try:
                last = await ledger_last_seq(self._nc, self._settings)
                if last > self.mark - RESERVE // 2:
                    self.mark = await raise_mark(self._nc, self._settings, last + RESERVE)
                    log.debug("writer.numbering_reserved", mark=self.mark, last_seq=last)
            except (nats.errors.Error, nats.js.errors.Error, OSError) as exc:
                # The stream is missing (the writer recreates it after the mark) or JetStream is
                # away: the next look tries again.
                log.debug("writer.numbering_unchanged", error=type(exc).__name__)
