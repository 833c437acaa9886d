"""The ledger side of every projection: positions, consumers, and reading the stream in order.

A live projection reads through a durable pull consumer (``bind_consumer``:
AckAll, one replica in memory, always started from PostgreSQL's watermark + 1,
since that watermark and not the consumer's position is the truth), and checks
that no message of its subject was left out between its watermark and a batch
(``first_undelivered``). A rebuild or a verify reads with an ordered push
consumer (``read_ordered``: ephemeral, flow-controlled, gap-checked by nats-py),
one callback per message in ledger order.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.errors import UnavailableError
from agentledger.projection.poison import unfoldable
from agentledger.projection.puller import Puller
from agentledger.security import auth
from agentledger.stores import db
from agentledger.stores.ledger import ledger_subject, ledger_wildcard

# The consumers of live projections: redelivery after this long without an ack, and how many
# delivered-but-unacked messages the server lets one hold.
ACK_WAIT = 60.0
MAX_ACK_PENDING = 100_000
# How long a consumer create, info or delete waits for JetStream's answer. nats-py's default
# (5 s) was waited out once per call while the meta group elected a leader after a node kill
# (4 to 9 s without one): the three calls of a re-creation stalled Working Memory ~18 s. A call
# that times out is an outage the projection loop retries 0.1 s later (every call here is
# idempotent), so the consumer is back within about a second of the new meta leader.
CONSUMER_API_TIMEOUT_S = 1.0
# A rebuild that sees no message for this long while it expects more gives up.
IDLE_TIMEOUT_S = 30.0

Progress = Callable[[int, int], None]
# (message, its stream sequence) -> None, or an awaitable the reader waits for.
Handler = Callable[[Any, int], "Awaitable[None] | None"]
# (prefix, subject, data, seq) -> the event, or None when the message is not one (logged by it).
Decode = Callable[[str, str, bytes, int], "ev.EventBase | None"]


def subject_filter(prefix: str, task: str) -> str:
    """The ledger subjects of one reserved task of every tenant: ``<prefix>.ledger.*.<task>``."""
    return f"{prefix}.ledger.*.{task}"


def seq_pending(msg: Any) -> tuple[int, int]:
    """Stream sequence and pending count of a JetStream message, from its ack reply subject."""
    tokens = msg.reply.split(".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>
        return int(tokens[5]), int(tokens[8])
    md = msg.metadata
    return int(md.sequence.stream), int(md.num_pending)


def stream_seq(msg: Any) -> int:
    """Stream sequence of a JetStream message, from its ack reply subject."""
    return seq_pending(msg)[0]


async def stream_last_seq(nc: Client, settings: Settings) -> int:
    """The ledger stream's last sequence (0 when empty)."""
    info = await nc.jetstream().stream_info(settings.stream)
    return int(info.state.last_seq) if info.state.messages else 0


async def subject_last_seq(nc: Client, settings: Settings, filter_subject: str) -> int:
    """The sequence of the newest message on the subjects ``filter_subject`` matches (0: none).

    What a projection of those subjects has to reach to be current: its consumer sees only
    them, so its watermark stops at their last message, not at the stream's.
    """
    js = nc.jetstream()
    info = await js.stream_info(settings.stream, subjects_filter=filter_subject)
    last = 0
    for subject in info.state.subjects or {}:
        msg = await js.get_last_msg(settings.stream, subject)
        last = max(last, int(msg.seq or 0))
    return last


async def next_seq(nc: Client, settings: Settings, subject: str, start: int) -> int | None:
    """The sequence of the first message at or after ``start`` on ``subject`` (a filter), or None."""
    try:
        msg = await nc.jetstream().get_msg(settings.stream, seq=max(start, 1), subject=subject, next=True)
    except nats.js.errors.NotFoundError:
        return None
    return None if msg.seq is None else int(msg.seq)


async def first_undelivered(nc: Client, settings: Settings, subject: str, wm: int,
                            seqs: list[int]) -> int | None:
    """A message of ``subject`` stored between ``wm`` and the batch ``seqs`` (sorted) that the
    consumer did not deliver, or None. Only a gap in the sequence costs a request."""
    expected = wm + 1
    for seq in seqs:
        if seq != expected:
            found = await next_seq(nc, settings, subject, expected)
            if found is not None and found < seq:
                return found
        expected = seq + 1
    return None


def consumer_config(durable: str, filter_subject: str, start_seq: int, description: str) -> ConsumerConfig:
    """A live projection's durable consumer, delivering from ``start_seq``.

    One replica in memory: its position is derived from PostgreSQL, so there is nothing to
    replicate (its acks cost no raft round, and when the node holding it dies it is recreated
    on another at once instead of waiting for an election).
    """
    return ConsumerConfig(
        name=durable, durable_name=durable, filter_subject=filter_subject, ack_policy=AckPolicy.ALL,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start_seq, ack_wait=ACK_WAIT,
        max_ack_pending=MAX_ACK_PENDING, max_waiting=16, num_replicas=1, mem_storage=True,
        description=description)


def consumer_agrees(info: ConsumerInfo, filter_subject: str, wm: int, max_skip: int) -> bool:
    """Whether an existing consumer may be kept for a projection at ``wm``: configured as
    ``consumer_config`` makes it, nothing delivered beyond ``wm`` (it would be skipped), and no
    more than ``max_skip`` applied messages to deliver again."""
    cfg = info.config
    if (cfg.filter_subject != filter_subject or cfg.ack_policy != AckPolicy.ALL
            or cfg.deliver_subject or cfg.num_replicas != 1 or not cfg.mem_storage):
        return False
    floor = info.ack_floor.stream_seq if info.ack_floor else 0
    delivered = info.delivered.stream_seq if info.delivered else 0
    return floor <= wm and delivered <= wm and wm - floor <= max_skip


async def bind_consumer(nc: Client, settings: Settings, config: ConsumerConfig, *,
                        keep: Callable[[ConsumerInfo], bool] | None = None) -> Puller:
    """Make the durable consumer ``config`` describes exist and attach a started ``Puller``.

    An existing consumer is kept only if ``keep`` says so; otherwise it is recreated (its
    open pull requests die with it), so it delivers from ``config.opt_start_seq``.
    A call unanswered within ``CONSUMER_API_TIMEOUT_S`` raises nats-py's ``TimeoutError``.
    """
    js = nc.jetstream(timeout=CONSUMER_API_TIMEOUT_S)
    durable = config.durable_name
    assert durable is not None
    info: ConsumerInfo | None = None
    with contextlib.suppress(nats.js.errors.NotFoundError):
        info = await js.consumer_info(settings.stream, durable)
    if info is not None and (keep is None or not keep(info)):
        await js.delete_consumer(settings.stream, durable)
        info = None
    if info is None:
        await js.add_consumer(settings.stream, config)
    puller = Puller(nc, settings.stream, durable)
    await puller.start()
    return puller


async def connect(settings: Settings) -> tuple[Client, asyncpg.Connection]:
    """NATS as the operator and one PostgreSQL connection; neither left open if the other fails."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        conn = await db.connect(settings.database_url)
    except BaseException:
        await nc.close()
        raise
    return nc, conn


async def until_done(done: asyncio.Future[None], count: list[int], idle_timeout: float,
                     stalled: Callable[[], str]) -> None:
    """Wait for a read to finish while messages keep arriving (``count[0]``: how many so far);
    ``UnavailableError`` saying ``stalled()`` when none arrived for ``idle_timeout``."""
    seen = -1
    while True:
        try:
            await asyncio.wait_for(asyncio.shield(done), timeout=idle_timeout)
        except TimeoutError:
            if count[0] == seen:
                raise UnavailableError(stalled()) from None
            seen = count[0]
        else:
            return


async def read_ordered(nc: Client, settings: Settings, handle: Handler, *, subject: str | None = None,
                       start_seq: int = 1, upto: int | None = None, progress: Progress | None = None,
                       idle_timeout: float = IDLE_TIMEOUT_S) -> tuple[int, int]:
    """Hand every message on ``subject`` (default: the whole ledger) with sequence from
    ``start_seq`` up to ``upto`` (default: the last one now) to ``handle``, in ledger order;
    (how many, the last sequence handed over; 0 when none).

    The reader does the least work it can per message (the sequence comes from the
    reply subject). Raises ``UnavailableError`` if no message arrives for ``idle_timeout``
    seconds while one is expected.
    """
    subject = subject or ledger_wildcard(settings.prefix)
    last = await stream_last_seq(nc, settings)
    upto = last if upto is None else min(upto, last)
    first = await next_seq(nc, settings, subject, start_seq) if upto >= max(start_seq, 1) else None
    if first is None or first > upto:
        return 0, 0
    total = upto - start_seq + 1
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    count = [0, 0]  # messages handed over, last sequence handed over
    every = 10_000

    async def on_msg(msg: Any) -> None:
        if done.done():
            return
        try:
            seq, pending = seq_pending(msg)
            if seq > upto:
                done.set_result(None)
                return
            outcome = handle(msg, seq)
            if inspect.isawaitable(outcome):
                await outcome
            n = count[0] = count[0] + 1
            count[1] = seq
            if progress is not None and n % every == 0:
                progress(n, total)
            if seq >= upto or pending == 0:
                done.set_result(None)
        except BaseException as exc:  # noqa: BLE001 - a callback error would otherwise be lost
            if not done.done():
                done.set_exception(exc)

    config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=first)
    # Unlimited pending: a slow-consumer drop would silently lose a message.
    sub = await nc.jetstream().subscribe(subject, stream=settings.stream, cb=on_msg, ordered_consumer=True,
                                         config=config, pending_msgs_limit=0, pending_bytes_limit=0)
    try:
        await until_done(done, count, idle_timeout, lambda: f"no ledger message for {idle_timeout}s while "
                         f"replaying at seq {count[1]} of {upto}")
    finally:
        with contextlib.suppress(Exception):  # best effort: the consumer is ephemeral
            await sub.unsubscribe()
    if progress is not None:
        progress(count[0], total)
    return count[0], count[1]


async def read_subject(nc: Client, settings: Settings, tenant: str, task: str, upto: int, *, decode: Decode,
                       skip: frozenset[int] = frozenset()) -> list[tuple[int, ev.EventBase]]:
    """The events ``decode`` accepts on ``tenant``'s ``task`` subject with sequence at most ``upto``,
    in ledger order, leaving out the sequences in ``skip`` and what ``unfoldable`` refuses."""
    out: list[tuple[int, ev.EventBase]] = []

    def handle(msg: Any, seq: int) -> None:
        if seq not in skip and unfoldable(msg.data) is None:
            event = decode(settings.prefix, msg.subject, msg.data, seq)
            if event is not None:
                out.append((seq, event))

    await read_ordered(nc, settings, handle, subject=ledger_subject(settings.prefix, tenant, task), upto=upto)
    return out
