"""The ledger side of replaying a projection of a reserved per-tenant subject.

The memory projection (``services/memory_policy/replay.py``) and the document
index (``services/context_builder/docs_replay.py``) are rebuilt and verified
the same way: connect as the operator, find the tenants that have the
subject, read one tenant's subject at a time with an ordered consumer up to a
sequence, wait for the live projection to reach the stream's end, and report
differences as ``<tenant>: <what> <key> missing|extra|different``. Those
steps are here; each replay keeps its own fold and comparison. A replay
passes over what the live projection passed over: what ``unfoldable`` refuses
and the sequences the projection recorded (``passed_over``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

import asyncpg
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.errors import UnavailableError
from agentledger.projection.live import WatermarkStore, unfoldable
from agentledger.security import auth
from agentledger.stores import db
from agentledger.stores.ledger import ledger_subject

IDLE_TIMEOUT_S = 30.0
# Embeddings equal within this (they are stored as float4).
VECTOR_TOLERANCE = 1e-5

# (prefix, subject, data, seq) → the event, or None when the message is not one (logged by it).
Decode = Callable[[str, str, bytes, int], ev.EventBase | None]


async def connect(settings: Settings) -> tuple[Client, asyncpg.Connection]:
    """NATS as the operator and one PostgreSQL connection; neither left open if the other fails."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        conn = await db.connect(settings.database_url)
    except BaseException:
        await nc.close()
        raise
    return nc, conn


async def subject_tenants(nc: Client, settings: Settings, filter_subject: str) -> list[str]:
    """Tenants with at least one message on the subject ``<prefix>.ledger.*.<task>`` filters."""
    info = await nc.jetstream().stream_info(settings.stream, subjects_filter=filter_subject)
    head = f"{settings.prefix}.ledger."
    return sorted({s[len(head):].split(".", 1)[0] for s in (info.state.subjects or {})})


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


async def read_subject(nc: Client, settings: Settings, tenant: str, task: str, upto: int, *, decode: Decode,
                       noun: str, skip: frozenset[int] = frozenset()) -> list[tuple[int, ev.EventBase]]:
    """The events ``decode`` accepts on ``tenant``'s ``task`` subject with sequence at most ``upto``,
    in ledger order, leaving out the sequences in ``skip`` and what ``unfoldable`` refuses
    (``noun`` names them in the timeout error)."""
    subject = ledger_subject(settings.prefix, tenant, task)
    out: list[tuple[int, ev.EventBase]] = []
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_msg(msg: Any) -> None:
        if done.done():
            return
        md = msg.metadata
        seq, pending = int(md.sequence.stream), int(md.num_pending)
        if seq <= upto and seq not in skip and unfoldable(msg.data) is None:
            event = decode(settings.prefix, msg.subject, msg.data, seq)
            if event is not None:
                out.append((seq, event))
        if seq >= upto or pending == 0:
            done.set_result(None)

    sub = await nc.jetstream().subscribe(subject, stream=settings.stream, cb=on_msg, ordered_consumer=True,
                                         config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
                                         pending_msgs_limit=0, pending_bytes_limit=0)
    try:
        await asyncio.wait_for(done, IDLE_TIMEOUT_S)
    except TimeoutError as exc:
        raise UnavailableError(f"no {noun} message of tenant {tenant!r} for {IDLE_TIMEOUT_S}s") from exc
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return out


async def wait_live(conn: asyncpg.Connection, store: WatermarkStore, target: int, wait_s: float, *, noun: str,
                    runner: str) -> None:
    """Return once the live projection's watermark is at ``target``; ``UnavailableError`` naming
    ``runner`` (the service that runs it) after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while (await store.watermark(conn) or 0) < target:
        if time.monotonic() > deadline:
            raise UnavailableError(f"the {noun} projection did not reach seq {target} within {wait_s}s; "
                                   f"is {runner} running?", code="projection_behind")
        await asyncio.sleep(0.1)


def diff(tenant: str, what: str, want: dict[Any, Any], got: dict[Any, Any]) -> list[str]:
    out = [f"{tenant}: {what} {k} missing" for k in sorted(want.keys() - got.keys(), key=str)]
    out += [f"{tenant}: {what} {k} extra" for k in sorted(got.keys() - want.keys(), key=str)]
    out += [f"{tenant}: {what} {k} different" for k in sorted(want.keys() & got.keys(), key=str)
            if want[k] != got[k]]
    return out


def same_vector(want: list[float] | None, got: list[float] | None) -> bool:
    if want is None or got is None:
        return want is got
    return len(want) == len(got) and all(math.isclose(a, b, abs_tol=VECTOR_TOLERANCE)
                                         for a, b in zip(want, got, strict=True))
