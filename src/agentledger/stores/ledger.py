"""The ledger stream: its subjects, its configuration, and how a message is framed.

One JetStream stream holds every task's events on ``<prefix>.ledger.<tenant>.<task>``,
so a task's per-subject sequence doubles as its optimistic-concurrency version.
Message body: the stored event as JSON (personal values sealed). ``Nats-Msg-Id``
is ``tenant/task/event_id``: event ids are chosen by clients, so the dedupe key is
scoped to the task and two tenants can never collide. ``Agentledger-Digest`` is
the blake3 of the event's canonical encoding before sealing (sealing draws a
random nonce, so the stored bytes of a retry differ): a re-sent event id is a
duplicate only if its digest is the stored one. ``Agentledger-Chain`` links the
message to its task's previous one under the integrity key (``core.ledger_chain``);
``chain_key_of`` and ``chain_head_at`` are how readers check it.
"""

from __future__ import annotations

from collections.abc import Callable

import blake3
import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from agentledger.config import Settings
from agentledger.contracts.events import EventBase
from agentledger.core import ledger_chain
from agentledger.core.ledger_chain import GENESIS, RESYNC, Head, KeyOf
from agentledger.errors import IntegrityViolationError, RuntimeStateError, UnavailableError
from agentledger.security import auth
from agentledger.security.integrity_keys import keys_of
from agentledger.stores.numbering import read_mark

MSG_ID = "Nats-Msg-Id"
DIGEST = "Agentledger-Digest"

_canonical = msgspec.json.Encoder(order="sorted")


def ledger_subject(prefix: str, tenant: str, task_id: str) -> str:
    return f"{prefix}.ledger.{tenant}.{task_id}"


def ledger_wildcard(prefix: str) -> str:
    return f"{prefix}.ledger.>"


async def task_last_seq(nc: Client, settings: Settings, tenant: str, task_id: str) -> int:
    """Sequence of the task's last ledger message (0: none), by a direct get of its subject."""
    try:
        msg = await nc.jetstream().get_msg(settings.stream, subject=ledger_subject(settings.prefix, tenant, task_id),
                                           direct=True)
    except nats.js.errors.NotFoundError:
        return 0
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
        raise UnavailableError("JetStream did not answer") from exc
    return int(msg.seq or 0)


def chain_key_of(settings: Settings) -> KeyOf | None:
    """The MAC key lookup a reader checks ledger chains with; None with ``integrity`` off."""
    return keys_of(settings).mac_key_of if settings.integrity else None


async def chain_head_at(nc: Client, settings: Settings, key_of: KeyOf, *, tenant: str, task_id: str,
                        seq: int) -> Head:
    """The chain head a task's message at ``seq`` makes (its own tag checked; ``GENESIS`` for
    an unchained one), for a reader that folds the task on from there (a checkpoint's cursor,
    a state's watermark). One direct get (``get_message``). A message that is not there, or not
    this task's, is ``IntegrityViolationError``: what was folded up to it is no longer what the
    ledger holds; unless the whole ledger now starts after it (``RESYNC``: a ledger gap, see
    ``core.ledger_chain``)."""
    headers, body = await get_message(nc, settings, seq=seq)
    if headers.get("Nats-Subject") != ledger_subject(settings.prefix, tenant, task_id):
        if not headers.get("Nats-Subject"):
            info = await nc.jetstream().stream_info(settings.stream)
            if int(info.state.first_seq) > seq:
                return RESYNC  # gone with the ledger's start: a ledger gap, reported as such
        raise IntegrityViolationError(
            f"ledger event seq {seq} of tenant {tenant!r} task {task_id!r}, the last one folded, is "
            "no longer in the ledger (or is another task's): the ledger was cut back or edited "
            "outside the services", where="ledger")
    head = ledger_chain.own_head(key_of, tenant=tenant, task=task_id, seq=seq, body=body,
                                 headers=headers)
    return head if head is not None else GENESIS


def _found(headers: dict[str, str], body: bytes) -> bool:
    return bool(headers.get("Nats-Subject"))


async def get_message(nc: Client, settings: Settings, *, seq: int | None = None, last_of: str | None = None,
                      wait_s: float = 5.0,
                      settled: Callable[[dict[str, str], bytes], bool] = _found) -> tuple[dict[str, str], bytes]:
    """The ledger message at ``seq``, or the last one on subject ``last_of``: (headers with
    ``Nats-Subject`` and ``Nats-Sequence``, body), or ``({}, b"")`` when there is none.

    A direct get first, which any replica answers: one that lags (a node just back from a
    pause) does not yet hold a message acknowledged a moment ago, so an answer that is not
    ``settled`` (by default: no message) is asked again of the stream's leader, which holds
    every acknowledged write, before it counts. ``UnavailableError`` when neither answers
    (the direct get within ``wait_s``).
    """
    query = {"seq": seq} if seq is not None else {"last_by_subj": last_of}
    try:
        reply = await nc.request(f"$JS.API.DIRECT.GET.{settings.stream}", msgspec.json.encode(query),
                                 timeout=wait_s)
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
        raise UnavailableError("JetStream did not answer a direct get") from exc
    headers, body = dict(reply.headers or {}), reply.data
    if settled(headers, body):
        return headers, body
    try:
        msg = await nc.jetstream().get_msg(settings.stream, seq=seq, subject=last_of)
    except nats.js.errors.NotFoundError:
        return {}, b""
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError,
            nats.js.errors.ServiceUnavailableError) as exc:
        raise UnavailableError("the ledger's leader did not answer a get") from exc
    return ({**(msg.headers or {}), "Nats-Subject": msg.subject or "", "Nats-Sequence": str(msg.seq or "")},
            msg.data or b"")


def msg_id(tenant: str, task_id: str, event_id: str) -> str:
    return f"{tenant}/{task_id}/{event_id}"


def subject_key(prefix: str, subject: str) -> tuple[str, str] | None:
    """``<prefix>.ledger.<tenant>.<task>`` -> (tenant, task); None for any other shape
    (a token too many or too few, an empty token, anything not ASCII: ids never are, and a
    subject that was not UTF-8 arrives with surrogate escapes)."""
    head = f"{prefix}.ledger."
    if not subject.startswith(head) or not subject.isascii():
        return None
    parts = subject[len(head):].split(".")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return parts[0], parts[1]


def partition_of(tenant: str, task_id: str, partitions: int) -> int:
    """The projector partition (0 to ``partitions - 1``) that folds a task's events.

    blake3 of ``tenant/task`` (ids never hold ``/``), its first 8 bytes big-endian, modulo
    the count: the same in every process and language, spread evenly, and a task never
    moves while the count stays.
    """
    if partitions == 1:
        return 0
    digest = blake3.blake3(f"{tenant}/{task_id}".encode()).digest(8)
    return int.from_bytes(digest, "big") % partitions


def event_digest(event: EventBase) -> str:
    """blake3 of the event's canonical (sorted-keys) JSON, taken before sealing."""
    return blake3.blake3(_canonical.encode(event)).hexdigest()


def stream_max_bytes(settings: Settings) -> int:
    """The stream's own size limit: the configured ledger size plus the erasure reserve
    (-1: none). The writer refuses ordinary appends at ``max_ledger_bytes`` itself
    (services/ledger_writer/quotas.py), so only erasures ever reach into the reserve and a
    forget request still succeeds on a full ledger."""
    if not settings.max_ledger_bytes:
        return -1
    return settings.max_ledger_bytes + settings.ledger_reserve_bytes


def stream_config(settings: Settings) -> StreamConfig:
    """File storage, atomic batches for group commit, direct get for lookups."""
    return StreamConfig(
        name=settings.stream,
        subjects=[ledger_wildcard(settings.prefix)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        # A full ledger refuses new events; it never drops old ones (it is the record).
        discard=DiscardPolicy.NEW,
        max_bytes=stream_max_bytes(settings),
        duplicate_window=settings.dedupe_window_s,
        # Headroom over the event limit for the envelope the writer adds when sealing.
        max_msg_size=settings.max_event_bytes * 2 + 4096,
        allow_direct=True,
        allow_atomic=True,
        num_replicas=settings.stream_replicas,
    )


async def ensure_stream(settings: Settings, nc: Client | None = None, *,
                        first_seq: int | None = None) -> None:
    """Create the ledger stream, or bring an existing one to this configuration.

    A stream created now starts numbering after the high-water mark kept outside it
    (``numbering``) and after ``first_seq - 1`` (a caller's own knowledge: the sequence
    its writer acked last, a projection's watermark), so a ledger recreated after it was
    deleted never hands out a sequence an ack, a watermark or a fencing token holds.
    """
    own = nc is None
    conn = nc or await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        js = conn.jetstream()
        config = stream_config(settings)
        try:
            info = await js.stream_info(settings.stream)
        except nats.js.errors.NotFoundError:
            start = max(first_seq or 1, await read_mark(conn, settings) + 1)
            if start > 1:
                config.first_seq = start
            await js.add_stream(config)
            return
        if list(info.config.subjects or []) != list(config.subjects or []):
            # Never rewrite a live stream's subjects: it would stop holding its own ledger.
            raise RuntimeStateError(
                f"stream {settings.stream} exists with subjects {info.config.subjects}, not "
                f"{config.subjects}; it belongs to another deployment or prefix")
        await js.update_stream(config)
    finally:
        if own:
            await conn.close()
