"""JetStream key-value buckets the services keep their small shared state in."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Generic, TypeVar

import msgspec
from nats.aio.client import Client
from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyNotFoundError
from nats.js.kv import KeyValue

from agentledger.shell.tasks import stop_task

T = TypeVar("T")
# As nats-py's create_key_value (its default: two minutes).
KV_DUPLICATE_WINDOW_S = 120.0


async def open_kv(js: JetStreamContext, bucket: str, max_bytes: int = 0, replicas: int = 1) -> KeyValue:
    """The bucket, created on first use with one revision per key (history is not kept),
    at most ``max_bytes`` (0: no limit of its own) and ``replicas`` (settings.stream_replicas)."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        await js.add_stream(kv_stream_config(bucket, max_bytes=max_bytes, replicas=replicas))
        return await js.key_value(bucket)


def kv_stream_config(bucket: str, *, max_bytes: int = 0, replicas: int = 1,
                     marker_ttl_s: float | None = None) -> StreamConfig:
    """The stream of a KV bucket as nats-py's ``create_key_value`` makes it, but for one thing:
    message deletes are allowed, so a forget can erase an entry's bytes (a purge or a KV delete
    leaves them in the block file), and a stream's ``deny_delete`` cannot be lifted later
    (``bucket_migration`` rebuilds a bucket made with it). ``marker_ttl_s``: how long the
    removal marker of an entry whose TTL ended stays (per-key TTLs are always allowed)."""
    return StreamConfig(
        name=f"KV_{bucket}", subjects=[f"$KV.{bucket}.>"], allow_direct=True,
        allow_rollup_hdrs=True, allow_msg_ttl=True, deny_delete=False, deny_purge=False,
        discard=DiscardPolicy.NEW, duplicate_window=KV_DUPLICATE_WINDOW_S,
        max_bytes=max_bytes or -1, max_consumers=-1, max_msgs=-1, max_msgs_per_subject=1,
        num_replicas=replicas, storage=StorageType.FILE,
        subject_delete_marker_ttl=marker_ttl_s or None)


class KVMirror(Generic[T]):
    """An in-memory copy of a bucket, kept current by a watch: a lookup costs a dict access.

    Values decode as ``T``; one that does not decode counts as absent (its reader gets
    nothing, never a guess). A miss asks the bucket once, since the watch may lag a write.
    """

    def __init__(self, nc: Client, bucket: str, value_type: type[T], name: str,
                 replicas: int = 1) -> None:
        self._js = nc.jetstream()
        self._bucket = bucket
        # Replicas of the bucket if this mirror is the first to open it (settings.stream_replicas).
        self._replicas = replicas
        self._decoder = msgspec.json.Decoder(value_type)
        self._name = name
        self._kv: Any = None
        self._entries: dict[str, T] = {}
        self._watcher: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Load the bucket and keep following it; returns once loaded."""
        self._kv = await open_kv(self._js, self._bucket, replicas=self._replicas)
        self._watcher = await self._kv.watchall()
        loaded = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._follow(loaded), name=self._name)
        await loaded

    async def stop(self) -> None:
        await stop_task(self._task)
        self._task = None
        if self._watcher is not None:
            with contextlib.suppress(Exception):
                await self._watcher.stop()
            self._watcher = None

    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _follow(self, loaded: asyncio.Future[None]) -> None:
        async for entry in self._watcher:
            if entry is None:
                if not loaded.done():
                    loaded.set_result(None)
                continue
            self._apply(entry.key, entry.value)

    def _apply(self, key: str, value: bytes | None) -> None:
        if not value:
            self._entries.pop(key, None)
            return
        try:
            self._entries[key] = self._decoder.decode(value)
        except msgspec.DecodeError:
            self._entries.pop(key, None)

    def mirrored(self, key: str) -> T | None:
        """The entry as mirrored now, without asking the bucket (None: not mirrored)."""
        return self._entries.get(key)

    async def lookup(self, key: str) -> T | None:
        found = self._entries.get(key)
        if found is not None or self._kv is None:
            return found
        try:
            entry = await self._kv.get(key)
        except (KeyNotFoundError, ValueError):
            return None
        self._apply(key, entry.value)
        return self._entries.get(key)
