"""The ledger stream: its subjects, its configuration, and how a message is framed.

One JetStream stream holds every task's events on ``<prefix>.ledger.<tenant>.<task>``,
so a task's per-subject sequence doubles as its optimistic-concurrency version.
Message body: the stored event as JSON (personal values sealed). ``Nats-Msg-Id``
is ``tenant/task/event_id``: event ids are chosen by clients, so the dedupe key is
scoped to the task and two tenants can never collide.
"""

from __future__ import annotations

import nats
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from agentledger.config import Settings

MSG_ID = "Nats-Msg-Id"


def ledger_subject(prefix: str, tenant: str, task_id: str) -> str:
    return f"{prefix}.ledger.{tenant}.{task_id}"


def ledger_wildcard(prefix: str) -> str:
    return f"{prefix}.ledger.>"


def msg_id(tenant: str, task_id: str, event_id: str) -> str:
    return f"{tenant}/{task_id}/{event_id}"


def split_subject(subject: str) -> tuple[str, str]:
    """``<prefix>.ledger.<tenant>.<task>`` -> (tenant, task)."""
    parts = subject.rsplit(".", 2)
    return parts[1], parts[2]


def stream_config(settings: Settings) -> StreamConfig:
    """File storage, atomic batches for group commit, direct get for lookups."""
    return StreamConfig(
        name=settings.stream,
        subjects=[ledger_wildcard(settings.prefix)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        duplicate_window=settings.dedupe_window_s,
        # Headroom over the event limit for the envelope the writer adds when sealing.
        max_msg_size=settings.max_event_bytes * 2 + 4096,
        allow_direct=True,
        allow_atomic=True,
        num_replicas=settings.stream_replicas,
    )


async def ensure_stream(settings: Settings, nc: Client | None = None) -> None:
    """Create the ledger stream, or bring an existing one to this configuration."""
    own = nc is None
    conn = nc or await nats.connect(settings.nats_url)
    try:
        js = conn.jetstream()
        config = stream_config(settings)
        try:
            await js.stream_info(settings.stream)
        except nats.js.errors.NotFoundError:
            await js.add_stream(config)
        else:
            await js.update_stream(config)
    finally:
        if own:
            await conn.close()
