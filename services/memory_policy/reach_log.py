"""The put-back reference (``record_reach``) kept outside PostgreSQL: for each memory record,
the ledger sequence of the newest version the projection committed, one JetStream message per
record on ``<prefix>.reach.rec.<projection>.<tenant>.<record id>`` in the ``<PREFIX>_REACH``
stream, which keeps the last message of each subject.

Why a stream: a process that starts (a restart, a standby while another instance folds) needs
the reference for the records it has not folded itself. A fold of the ``_memory`` ledger at
start gives it, but its cost grows with the ledger (100k messages took ~13 s of a core). This
stream's size is one entry per record, whatever the history, and is read at start with one
ordered consumer that delivers the last entry of each subject.

- **Written** by the leading instance after each committed batch (``publish``), one entry per
  record the batch left, by a rebuild for the projection it switched in, and once, when the
  leader creates the stream, for the records committed before it (``reach_backfill``: from a
  fold of the ledger, never from the rows). Core NATS
  publishes and one flush: the stream stores them, and every instance subscribed to the
  subjects (``listen``) notes them as they pass, so a standby follows the leader's commits.
- **Read** at start (``read``) for the live projection (the id of its watermark table, so a
  rebuilt or restored projection never takes another one's entries).
- **Trusted** only where its tag holds: each entry carries a keyed MAC (the integrity key, which
  the stores never hold) over (projection, tenant, record id, sequence). An entry changed or
  forged in the stream's files fails its tag and is dropped (logged). An entry put back to an
  older one, or lost, names an older version: the read path then refuses fewer rows put back
  (the audit still names them), never a current row.

A batch whose process dies between its commit and its publish leaves those records' entries
one version behind until their next commit: the same "fewer refusals, never a false one".
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Iterable

import msgspec
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import DeliverPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from agentledger.config import Settings
from agentledger.core import integrity
from agentledger.projection.stream import seq_pending, until_done
from agentledger.security.integrity_keys import IntegrityKeys

log = structlog.get_logger()

# Without one for this long while entries are still due, the start-up read gives up (the
# service runs on without the reference; it is read again at the next start).
IDLE_TIMEOUT_S = 30.0
# A rebuild's entries are written only where the subject holds none yet: an entry the live
# leader wrote since is newer.
_FIRST = {"Nats-Expected-Last-Subject-Sequence": "0"}
# Tenants and record ids are subject tokens here.
_TOKEN = re.compile(r"[A-Za-z0-9_=-]+\Z")

Key = tuple[str, str]  # (tenant, record id)


class _Entry(msgspec.Struct, frozen=True, array_like=True):
    projection: int
    tenant: str
    record_id: str
    seq: int
    tag: str


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(_Entry).decode


def _root(prefix: str) -> str:
    return f"{prefix}.reach.rec"


def entry_subject(prefix: str, projection: int, tenant: str, record_id: str) -> str:
    return f"{_root(prefix)}.{projection}.{tenant}.{record_id}"


def projection_subjects(prefix: str, projection: int) -> str:
    return f"{_root(prefix)}.{projection}.>"


def tenant_subjects(prefix: str, tenant: str) -> str:
    """Every projection's entries of ``tenant`` (a whole-tenant forget purges them)."""
    return f"{_root(prefix)}.*.{tenant}.>"


def stream_config(settings: Settings) -> StreamConfig:
    return StreamConfig(
        name=settings.reach_stream, subjects=[f"{_root(settings.prefix)}.>"], allow_direct=True,
        deny_delete=False, deny_purge=False, max_msgs_per_subject=1, max_bytes=-1, max_msgs=-1,
        num_replicas=settings.stream_replicas, storage=StorageType.FILE,
        description="agentledger memory put-back reference: each record's newest committed ledger sequence")


async def ensure_stream(nc: Client, settings: Settings) -> bool:
    """Create the stream unless it exists; whether it was created (the leader then writes the
    entries of the records committed before, ``reach_backfill``)."""
    js = nc.jetstream()
    try:
        await js.stream_info(settings.reach_stream)
    except NotFoundError:
        await js.add_stream(stream_config(settings))
        return True
    return False


def _tag(keys: IntegrityKeys, projection: int, tenant: str, record_id: str, seq: int) -> str:
    return integrity.tag(keys.current, keys.mac_key, integrity.MEMORY_REACH, (projection, tenant, record_id, seq))


def decode(keys: IntegrityKeys, subject: str, data: bytes) -> tuple[int, Key, int] | None:
    """(projection, (tenant, record id), sequence) of an entry whose tag holds and whose subject
    names it; None (logged, sizes only) for anything else."""
    try:
        entry = _decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        log.warning("memory.reach_entry_undecodable", size=len(data))
        return None
    parts = (entry.projection, entry.tenant, entry.record_id, entry.seq)
    named = subject.rsplit(".", 3)[1:] == [str(entry.projection), entry.tenant, entry.record_id]
    if not named or not integrity.matches(entry.tag, keys.mac_key_of, integrity.MEMORY_REACH, parts):
        log.warning("memory.reach_entry_refused", projection=entry.projection, tenant=entry.tenant,
                    record=entry.record_id, reason="its tag or subject does not hold")
        return None
    return entry.projection, (entry.tenant, entry.record_id), entry.seq


def is_token(name: str) -> bool:
    """Whether ``name`` (a tenant, a record id) can stand as one subject token here."""
    return _TOKEN.match(name) is not None


async def publish(nc: Client, settings: Settings, keys: IntegrityKeys, projection: int,
                  rows: Iterable[tuple[Key, int]], *, first: bool = False) -> int:
    """One entry per ``(record, sequence)`` of ``rows`` (one each: a batch's newest), flushed;
    with ``first``, only where its subject holds none yet. How many were sent (a tenant or id
    that is not a subject token is skipped: the writer lets none through)."""
    headers = _FIRST if first else None
    sent = 0
    for (tenant, rid), seq in rows:
        if not (is_token(tenant) and is_token(rid)):
            log.warning("memory.reach_entry_skipped", reason="tenant or record id is not a subject token")
            continue
        data = _encode(_Entry(projection, tenant, rid, seq, _tag(keys, projection, tenant, rid, seq)))
        await nc.publish(entry_subject(settings.prefix, projection, tenant, rid), data, headers=headers)
        sent += 1
    if sent:
        await nc.flush()
    return sent


async def listen(nc: Client, prefix: str, keys: IntegrityKeys,
                 on_entry: Callable[[int, Key, int], Awaitable[None]]) -> Subscription:
    """Every instance's: ``on_entry(projection, key, seq)`` for each entry published from now."""

    async def on_msg(msg: Msg) -> None:
        entry = decode(keys, msg.subject, msg.data)
        if entry is not None:
            await on_entry(*entry)

    return await nc.subscribe(f"{_root(prefix)}.>", cb=on_msg)


async def read(nc: Client, settings: Settings, keys: IntegrityKeys, projection: int, *,
               idle_timeout: float = IDLE_TIMEOUT_S) -> list[tuple[Key, int]]:
    """The stored entries of ``projection`` (the last of each record); none when the stream
    does not exist yet. ``UnavailableError`` when they stop arriving for ``idle_timeout``."""
    rows: list[tuple[Key, int]] = []
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    count = [0]

    async def on_msg(msg: Msg) -> None:
        count[0] += 1
        entry = decode(keys, msg.subject, msg.data)
        if entry is not None:
            rows.append((entry[1], entry[2]))
        if seq_pending(msg)[1] == 0 and not done.done():
            done.set_result(None)

    try:
        # Unlimited pending: a slow-consumer drop would lose entries silently.
        sub = await nc.jetstream().subscribe(
            projection_subjects(settings.prefix, projection), stream=settings.reach_stream, cb=on_msg,
            ordered_consumer=True, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
            pending_msgs_limit=0, pending_bytes_limit=0)
    except NotFoundError:
        return rows
    try:
        info = await sub.consumer_info()
        if info.num_pending or sub.delivered:
            await until_done(done, count, idle_timeout,
                             lambda: f"no memory reach entry for {idle_timeout}s after {count[0]}")
        return rows
    finally:
        with contextlib.suppress(Exception):  # best effort: the consumer is ephemeral
            await sub.unsubscribe()


async def purge(nc: Client, settings: Settings, subject: str) -> None:
    """Drop the entries on ``subject`` (a filter); nothing when the stream does not exist."""
    with contextlib.suppress(NotFoundError):
        await nc.jetstream().purge_stream(settings.reach_stream, subject=subject)
