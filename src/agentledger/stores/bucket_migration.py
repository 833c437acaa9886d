"""Rebuilding a KV bucket whose stream denies message deletes into one that allows them.

A bucket made by nats-py's ``create_key_value`` (every bucket of older versions but the keys
bucket) denies message deletes, and JetStream cannot lift that on the stream. A forget could
then only purge the bucket's entries (their bytes stay in the block file) and its receipt said
``purged_not_erased``. ``up`` rebuilds such a bucket before any service opens it:

1. every live entry (its key, value and TTL) is copied into a side stream ``KVMOVE_<bucket>``,
   and the copy ends with a ``done`` message naming how many entries it holds;
2. the bucket's stream is deleted (its files go with it, purged entries' bytes included) and
   made again with deletes allowed, keeping its byte limit, replicas and removal-marker TTL;
3. the copies are published back, each with its TTL; then the side stream is deleted.

A crash anywhere loses nothing: a side stream without its ``done`` is dropped and the copy
starts again (the bucket is not touched before ``done``); one with it resumes at step 2.
Entries get new revisions; nothing holds a revision across ``up`` (the services start after).
"""

from __future__ import annotations

import nats.js.errors
import structlog
from nats.js.api import StorageType, StreamConfig
from nats.js.client import JetStreamContext

from agentledger.erasure.erase import kv_removed, scan_subject
from agentledger.stores.buckets import kv_stream_config

log = structlog.get_logger()

# Carries an entry's TTL in the side stream (which has no per-message TTLs of its own).
TTL_HEADER = "Agentledger-Entry-TTL"
# Headers of a stored entry that are not copied: publish expectations and ids.
_NOT_COPIED = ("Nats-Expected-", "Nats-Msg-Id", "Nats-TTL")


def side_stream(bucket: str) -> str:
    return f"KVMOVE_{bucket}"


async def make_erasable(js: JetStreamContext, bucket: str) -> int | None:
    """Rebuild ``bucket`` with message deletes allowed if it denies them (or finish a rebuild a
    crash interrupted); how many entries were moved, None when there was nothing to do."""
    side = await _stream(js, side_stream(bucket))
    if side is not None and not await _copy_done(js, bucket):
        await js.delete_stream(side_stream(bucket))  # an unfinished copy: the bucket is intact
        side = None
    if side is None:
        info = await _stream(js, f"KV_{bucket}")
        if info is None or not info.config.deny_delete:
            return None
        await _copy_out(js, bucket, info.config)
    moved = await _rebuild(js, bucket)
    await js.delete_stream(side_stream(bucket))
    log.info("bucket_made_erasable", bucket=bucket, entries=moved)
    return moved


async def _stream(js: JetStreamContext, name: str) -> object | None:
    try:
        return await js.stream_info(name)
    except nats.js.errors.NotFoundError:
        return None


async def _copy_out(js: JetStreamContext, bucket: str, config: StreamConfig) -> None:
    """Step 1: the live entries into the side stream, the old stream's settings in ``done``."""
    await js.add_stream(StreamConfig(
        name=side_stream(bucket), subjects=[f"$KVMOVE.{bucket}.>"], storage=StorageType.FILE,
        num_replicas=config.num_replicas or 1))
    copied = 0
    async for msg in scan_subject(js, f"KV_{bucket}", f"$KV.{bucket}.>"):
        headers = msg.headers or {}
        if kv_removed(headers):
            continue  # a delete, purge or TTL-removal marker: no entry to keep
        kept = {k: v for k, v in headers.items() if not k.startswith(_NOT_COPIED)}
        if "Nats-TTL" in headers:
            kept[TTL_HEADER] = headers["Nats-TTL"]
        key = msg.subject[len(f"$KV.{bucket}."):]
        await js.publish(f"$KVMOVE.{bucket}.k.{key}", msg.data, headers=kept or None)
        copied += 1
    await js.publish(f"$KVMOVE.{bucket}.done", str(copied).encode(), headers={
        "Max-Bytes": str(config.max_bytes or -1),
        "Marker-TTL": str(config.subject_delete_marker_ttl or 0)})


async def _copy_done(js: JetStreamContext, bucket: str) -> bool:
    try:
        await js.get_msg(side_stream(bucket), subject=f"$KVMOVE.{bucket}.done")
    except nats.js.errors.NotFoundError:
        return False
    return True


async def _rebuild(js: JetStreamContext, bucket: str) -> int:
    """Steps 2 and 3: the bucket's stream made again with deletes allowed, the copies back."""
    done = await js.get_msg(side_stream(bucket), subject=f"$KVMOVE.{bucket}.done")
    side = await js.stream_info(side_stream(bucket))
    with_ttl = float((done.headers or {}).get("Marker-TTL", "0")) or None
    if await _stream(js, f"KV_{bucket}") is not None:
        await js.delete_stream(f"KV_{bucket}")  # the old one, or a rebuild a crash cut short
    await js.add_stream(kv_stream_config(
        bucket, max_bytes=max(0, int((done.headers or {}).get("Max-Bytes", "-1"))),
        replicas=side.config.num_replicas or 1, marker_ttl_s=with_ttl))
    moved = 0
    prefix = f"$KVMOVE.{bucket}.k."
    async for msg in scan_subject(js, side_stream(bucket), prefix + ">"):
        headers = dict(msg.headers or {})
        ttl = headers.pop(TTL_HEADER, None)
        if ttl is not None:
            headers["Nats-TTL"] = ttl
        await js.publish(f"$KV.{bucket}.{msg.subject[len(prefix):]}", msg.data,
                         headers=headers or None)
        moved += 1
    return moved
