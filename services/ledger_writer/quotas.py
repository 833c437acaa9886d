"""Per-tenant quotas of the ledger-writer, and the ledger's erasure reserve.

One tenant must not take what the others need: its append rate, its share of the ledger and of
the artifact store are bounded, and a full ledger still takes erasures. What this module keeps,
all in memory, all checked with a dict lookup and some arithmetic per request (the writer's
append path is benchmarked):

- **Append rate** (``admit`` before a request is decoded, ``charge`` once it is) and **artifact
  request rate** (``admit_artifact``, before a request takes one of the artifact endpoints'
  slots or its content is hashed): two token buckets per tenant and door (``Door``), events or
  requests and bytes per second, holding ``tenant_append_burst_s`` seconds' worth. A request
  is let in while both buckets hold something and then charged in full, so a bucket may go
  into debt by one request; while it is in debt the tenant's requests
  are refused ``rate_limited`` (retryable; the message names the limit and when to retry)
  before anything is decoded, so a flood costs the writer as little as possible. The refusal
  is answered only after that wait (``hold``: at least ``MIN_HOLD_S``, at most ``MAX_HOLD_S``),
  and while a tenant has many refusals waiting, each waits its share of ``REFUSALS_PER_S``
  (``refusal_delay``): however many closed loops a tenant runs, the writer sends it about that
  many refusals a second, so a flood costs the writer what the tenant's rate lets in plus a
  bounded trickle of refusals. At most ``MAX_HELD`` refusals of a tenant wait at a time
  (beyond, they are answered at once). Only tenant
  callers are limited: the services' own appends come from requests already limited at their
  own door. Per writer instance: N instances give a tenant N times the rate.
- **Ledger bytes per tenant** (``admit`` / ``stored``, called by the group committer for every
  unit, lease grants included): the bytes of the messages stored for the tenant, counted as
  JetStream counts a stored message (``message_bytes``, headers included) when its ack comes
  back (duplicates are not stored, so not counted). Refused ``ledger_quota_exceeded`` when a
  unit would take the tenant past ``tenant_max_ledger_bytes`` (``estimated_bytes``).
- **Ledger size** (``admit``): the stream's byte count is read with a stream info every
  ``POLL_S``, plus what this writer stored since; at ``max_ledger_bytes`` every unit but an
  erasure is refused ``ledger_full``. The stream itself is created ``ledger_reserve_bytes``
  larger (``ledger.stream_max_bytes``), so only erasures reach into that reserve.
- **Artifact bytes per tenant** (``artifact_endpoints``): counted like ledger bytes, per
  artifact actually stored (a put of content the tenant already stored is not).

Why counters rather than asking JetStream: the server keeps per-subject message counts, not
bytes, so a tenant's bytes could only be re-derived by reading its whole history; the writer
sees every byte it stores anyway. The counters are kept in the KV bucket ``<PREFIX>_USAGE``
(``ledger.<tenant>``, ``artifacts.<tenant>``), loaded at start and added to every ``POLL_S``
with a compare-and-set, so they survive restarts and several writer instances add up to one
total. What that costs in exactness: a crash loses at most ``POLL_S`` of one writer's counts
(bounded by the tenant's rate), each instance sees the others' counts at most ``POLL_S`` late,
content erased by a forget request stays counted (the quota is of what was written), and what
the ledger held before the bucket existed is not counted.

Erasures (``is_erasure``): ``forget_requested`` / ``forget_completed`` on a tenant's ``_forget``
task and ``memory_forgotten`` on its ``_memory`` task. Only the services may append them
(``core.validate.check_reserved``), so a tenant cannot spend the reserve. Lease releases write
only the lease bucket, never the ledger, and so need no reserve.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import structlog
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NoKeysError
from nats.js.kv import KeyValue

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.errors import QuotaExceededError, RateLimitedError, StorageFullError
from agentledger.security.identity import Caller
from agentledger.shell import metrics
from agentledger.shell.tasks import stop_task
from agentledger.stores.buckets import open_kv
from agentledger.stores.outages import dependency

if TYPE_CHECKING:
    from agentledger.services.ledger_writer.group_commit import Unit

log = structlog.get_logger()

# How often the counters are written to the usage bucket and the stream's size is read.
POLL_S = 1.0
# How long a `rate_limited` refusal is held before it is sent, and how many per tenant at most.
MIN_HOLD_S = 0.1
MAX_HOLD_S = 2.0
MAX_HELD = 1000
# How many refusals a second a tenant's waiting refusals are let go at, however many wait.
REFUSALS_PER_S = 50.0
ERASURE_KINDS = frozenset({"forget_requested", "forget_completed", "memory_forgotten"})
ERASURE_TASKS = frozenset({ev.FORGET_TASK, ev.MEMORY_TASK})
# What JetStream's file store counts per message besides its subject, header block and body: a
# 22-byte record header, 4 bytes of header length and an 8-byte checksum.
_RECORD_BYTES = 22 + 4 + 8
# A header block's frame ("NATS/1.0\r\n" ... "\r\n"), and each header's ": " and "\r\n".
_FRAME_BYTES = 12
_PER_HEADER = 4
# The headers every ledger message carries, without their values: its id and its digest.
_BASE_HEADERS = _FRAME_BYTES + len("Nats-Msg-Id") + len("Agentledger-Digest") + 64 + 2 * _PER_HEADER


def refusal_delay(retry_after_s: float, waiting: int) -> float:
    """How long a refusal waits before it is sent, ``waiting`` of its tenant's waiting already:
    its own retry time, or its share of ``REFUSALS_PER_S`` when more wait, at most ``MAX_HOLD_S``
    (well inside a client's request timeout)."""
    return min(max(retry_after_s, waiting / REFUSALS_PER_S), MAX_HOLD_S)


def is_erasure(events: Sequence[ev.EventBase]) -> bool:
    """Whether the events are erasures, which the ledger's reserve is kept for."""
    return events[0].task_id in ERASURE_TASKS and all(ev.kind_of(e) in ERASURE_KINDS for e in events)


def estimated_bytes(subject: str, msg_ids: Sequence[str], bodies: Sequence[bytes]) -> int:
    """What the messages will take in the ledger stream, before the headers of how they are sent
    (an expectation, a fence, an atomic batch's) are known: what admission checks."""
    return (len(bodies) * (len(subject) + _RECORD_BYTES + _BASE_HEADERS) + sum(map(len, msg_ids))
            + sum(map(len, bodies)))


def message_bytes(subject: str, body: bytes, headers: dict[str, str]) -> int:
    """What one message takes in the ledger stream once stored, exactly as JetStream counts it
    (every header is stored, an atomic batch's own included)."""
    return (len(subject) + len(body) + _RECORD_BYTES + _FRAME_BYTES
            + sum(len(k) + len(v) + _PER_HEADER for k, v in headers.items()))


class _Rate:
    """A tenant's two token buckets at one door: requests (or events) and bytes."""

    __slots__ = ("at", "bytes", "count")

    def __init__(self, count: float, nbytes: float, at: float) -> None:
        self.count = count
        self.bytes = nbytes
        self.at = at


class Door:
    """Per-tenant rates at one door of the writer (appends; artifact requests): two token
    buckets per tenant, a count (events, requests) and bytes per second, holding ``burst_s``
    seconds' worth. A request is let in while both hold something and is then charged in
    full, so a bucket may go into debt by one request; while in debt the tenant is refused
    ``rate_limited``, naming the settings and when to retry."""

    def __init__(self, what: str, count_rate: float, byte_rate: float, burst_s: float, *,
                 count_setting: str, byte_setting: str) -> None:
        self.what = what
        self._count_rate, self._byte_rate, self._burst_s = count_rate, byte_rate, burst_s
        self._settings = (count_setting, byte_setting)
        self._rates: dict[str, _Rate] = {}

    def admit(self, tenant: str, nbytes: int, count: int = 0) -> None:
        """Refuse a tenant whose buckets are in debt; charge ``nbytes`` (and ``count``)."""
        if not (self._count_rate or self._byte_rate):
            return
        now = time.monotonic()
        rate = self._rates.get(tenant)
        if rate is None:
            rate = self._rates[tenant] = _Rate(self._count_rate * self._burst_s,
                                               self._byte_rate * self._burst_s, now)
        else:
            elapsed = now - rate.at
            rate.at = now
            rate.count = min(rate.count + elapsed * self._count_rate, self._count_rate * self._burst_s)
            rate.bytes = min(rate.bytes + elapsed * self._byte_rate, self._byte_rate * self._burst_s)
        if (self._count_rate and rate.count <= 0) or (self._byte_rate and rate.bytes <= 0):
            wait = max(-rate.count / self._count_rate if self._count_rate else 0.0,
                       -rate.bytes / self._byte_rate if self._byte_rate else 0.0)
            wait = min(max(wait, MIN_HOLD_S), MAX_HOLD_S)
            metrics.QUOTA_REFUSALS.inc(quota=f"{self.what}_rate", tenant=tenant)
            raise RateLimitedError(
                f"tenant {tenant!r} is over its {self.what} rate of {self._count_rate:g}/s "
                f"({self._settings[0]}) and {self._byte_rate:g} bytes/s ({self._settings[1]}); "
                f"retry in {math.ceil(wait * 1000)} ms", retry_after_s=wait)
        rate.bytes -= nbytes
        rate.count -= count

    def charge(self, tenant: str, count: int) -> None:
        """Charge ``count`` more to a tenant let in (known only once its request is decoded)."""
        if (rate := self._rates.get(tenant)) is not None:
            rate.count -= count


class Usage:
    """Bytes per tenant of one kind (``ledger`` or ``artifacts``), shared through the usage bucket.

    ``used`` is what the bucket held at this writer's last look plus what it added since.
    """

    def __init__(self, kind: str, limit: int, setting: str) -> None:
        self.kind = kind
        self.limit = limit
        self.setting = setting
        self._used: dict[str, int] = {}
        self._shared: dict[str, tuple[int, int]] = {}  # tenant -> (value, revision) in the bucket
        self._unflushed: dict[str, int] = {}

    def used(self, tenant: str) -> int:
        return self._used.get(tenant, 0)

    def check(self, tenant: str, size: int, code: str) -> None:
        """Refuse ``size`` more bytes of ``tenant`` beyond its quota."""
        if self.limit and self._used.get(tenant, 0) + size > self.limit:
            metrics.QUOTA_REFUSALS.inc(quota=f"{self.kind}_bytes", tenant=tenant)
            raise QuotaExceededError(
                f"tenant {tenant!r} has {self._used.get(tenant, 0)} bytes in the {self.kind} "
                f"store; {size} more would pass its quota of {self.limit} ({self.setting}). "
                "Nothing was stored", code=code)

    def add(self, tenant: str, size: int) -> None:
        self._used[tenant] = self._used.get(tenant, 0) + size
        self._unflushed[tenant] = self._unflushed.get(tenant, 0) + size

    async def load(self, kv: KeyValue, keys: Sequence[str]) -> None:
        """Every tenant's count of this kind from the bucket, whose keys are ``keys`` (at start)."""
        for key in keys:
            kind, _, tenant = key.partition(".")
            if kind != self.kind:
                continue
            with contextlib.suppress(KeyNotFoundError):
                entry = await kv.get(key)
                self._adopt(tenant, int(entry.value or b"0"), entry.revision or 0)

    def _adopt(self, tenant: str, value: int, revision: int) -> None:
        self._shared[tenant] = (value, revision)
        self._used[tenant] = value + self._unflushed.get(tenant, 0)

    async def flush(self, kv: KeyValue) -> None:
        """Add what this writer counted since its last flush to the bucket (compare-and-set);
        a tenant another writer updated meanwhile is read again and added next time."""
        for tenant, delta in list(self._unflushed.items()):
            if not delta:
                continue
            value, revision = self._shared.get(tenant, (0, 0))
            key = f"{self.kind}.{tenant}"
            try:
                revision = await kv.update(key, str(value + delta).encode(), last=revision)
            except KeyWrongLastSequenceError:
                entry = await kv.get(key)
                self._adopt(tenant, int(entry.value or b"0"), entry.revision or 0)
                continue
            self._unflushed[tenant] -= delta
            self._adopt(tenant, value + delta, revision)


class Quotas:
    """The writer's quotas and the ledger's reserve; see the module docstring."""

    def __init__(self, settings: Settings) -> None:
        s = settings
        self._settings = s
        self.appends = Door("append", s.tenant_append_events_per_s, s.tenant_append_bytes_per_s,
                            s.tenant_append_burst_s, count_setting="AGENTLEDGER_TENANT_APPEND_EVENTS_PER_S",
                            byte_setting="AGENTLEDGER_TENANT_APPEND_BYTES_PER_S")
        self.artifact_requests = Door(
            "artifact request", s.tenant_artifact_requests_per_s, s.tenant_artifact_bytes_per_s,
            s.tenant_append_burst_s, count_setting="AGENTLEDGER_TENANT_ARTIFACT_REQUESTS_PER_S",
            byte_setting="AGENTLEDGER_TENANT_ARTIFACT_BYTES_PER_S")
        # Refusals held per tenant, and the tasks sending them once their time came.
        self._held: dict[str, int] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self.ledger = Usage("ledger", s.tenant_max_ledger_bytes, "AGENTLEDGER_TENANT_MAX_LEDGER_BYTES")
        self.artifacts = Usage("artifacts", s.tenant_max_artifact_bytes,
                               "AGENTLEDGER_TENANT_MAX_ARTIFACT_BYTES")
        # The stream's size at the last poll, and what this writer stored since.
        self._stream_bytes = 0
        self._since_poll = 0
        self._full: StorageFullError | None = None
        self._nc: Client | None = None
        self._kv: KeyValue | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, nc: Client) -> None:
        """Load the counters and the stream's size, then keep both current every ``POLL_S``."""
        self._nc = nc
        s = self._settings
        self._kv = await open_kv(nc.jetstream(), s.usage_bucket, replicas=s.stream_replicas)
        try:
            keys = await self._kv.keys()
        except NoKeysError:
            keys = []
        await self.ledger.load(self._kv, keys)
        await self.artifacts.load(self._kv, keys)
        await self._poll()
        self._task = asyncio.create_task(self._run(), name="writer-quotas")

    async def stop(self) -> None:
        """Stop polling and write the last counts to the bucket."""
        await stop_task(self._task)
        with contextlib.suppress(Exception):  # JetStream away: at most POLL_S of counts lost
            await self._flush()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            try:
                await self._flush()
                await self._poll()
            except Exception as exc:  # JetStream away: keep the last known figures
                if (what := dependency(exc)) is not None:  # expected while it lasts: no traceback
                    log.warning("quotas.poll_failed", error=type(exc).__name__, dependency=what,
                                detail=str(exc)[:300])
                else:
                    log.error("quotas.poll_failed", error=type(exc).__name__, exc_info=exc)

    async def _flush(self) -> None:
        assert self._kv is not None
        await self.ledger.flush(self._kv)
        await self.artifacts.flush(self._kv)

    async def _poll(self) -> None:
        """The stream's size, when the ledger has a size of its own."""
        s = self._settings
        if not s.max_ledger_bytes:
            return
        assert self._nc is not None
        info = await self._nc.jetstream().stream_info(s.stream)
        self._stream_bytes, self._since_poll = info.state.bytes, 0
        self._check_full()

    def _check_full(self) -> None:
        limit = self._settings.max_ledger_bytes
        held = self._stream_bytes + self._since_poll
        if held < limit:
            self._full = None
        elif self._full is None:
            log.warning("quotas.ledger_full", bytes=held, max_ledger_bytes=limit)
            self._full = StorageFullError(
                f"the ledger holds {held} bytes, its size is {limit} (AGENTLEDGER_MAX_LEDGER_BYTES); "
                "nothing was stored. Only erasures are taken now (they use "
                "AGENTLEDGER_LEDGER_RESERVE_BYTES)", code="ledger_full")

    # ---- the append rate (the writer's request handler) ---------------------------------------

    def admit(self, caller: Caller, nbytes: int) -> None:
        """Before an append is decoded: refuse a tenant over its rate; charge the request's bytes."""
        if caller.tenant is not None:
            self.appends.admit(caller.tenant, nbytes)

    def admit_artifact(self, caller: Caller, nbytes: int) -> None:
        """Before an artifact request takes a slot or is hashed: refuse a tenant over its rate;
        charge the request and its bytes."""
        if caller.tenant is not None:
            self.artifact_requests.admit(caller.tenant, nbytes, 1)

    def hold(self, caller: Caller, refusal: RateLimitedError,
             send: Callable[[], Awaitable[None]]) -> bool:
        """Send a ``rate_limited`` refusal once its wait is over; False when the tenant has
        ``MAX_HELD`` waiting already (the caller then answers at once)."""
        tenant = caller.tenant
        assert tenant is not None
        held = self._held.get(tenant, 0)
        if held >= MAX_HELD:
            return False
        self._held[tenant] = held + 1
        # Spread over half the wait again: refusals let go together come back together, and a
        # burst of them queues every other tenant's requests behind it.
        delay = refusal_delay(refusal.retry_after_s, held) * (1.0 + 0.5 * random.random())  # noqa: S311
        asyncio.get_running_loop().call_later(delay, self._release, tenant, send)
        return True

    def _release(self, tenant: str, send: Callable[[], Awaitable[None]]) -> None:
        self._held[tenant] -= 1
        task = asyncio.create_task(send())
        self._sending.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task[None]) -> None:
        self._sending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("quotas.refusal_not_sent")  # the caller went away meanwhile

    def charge(self, caller: Caller, events: int) -> None:
        """Once decoded: charge the request's events to its tenant's bucket."""
        if caller.tenant is not None:
            self.appends.charge(caller.tenant, events)

    # ---- the ledger (the group committer's ``Admission``) -------------------------------------

    def admit_unit(self, unit: Unit) -> None:
        """Refuse a unit the ledger's size or its tenant's quota has no room for (erasures pass)."""
        if unit.erasure:
            return
        if self._full is not None:
            raise self._full
        self.ledger.check(unit.tenant, unit.size, "ledger_quota_exceeded")

    def stored(self, unit: Unit) -> None:
        self.ledger.add(unit.tenant, unit.sent_bytes)
        if self._settings.max_ledger_bytes:
            self._since_poll += unit.sent_bytes
            if self._full is None:
                self._check_full()
