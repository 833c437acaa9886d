"""JetStream key-value buckets the services keep their small shared state in."""

from __future__ import annotations

from nats.js.client import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue


async def open_kv(js: JetStreamContext, bucket: str, max_bytes: int = 0) -> KeyValue:
    """The bucket, created on first use with one revision per key (history is not kept)
    and at most ``max_bytes`` (0: no limit of its own)."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        return await js.create_key_value(bucket=bucket, history=1, max_bytes=max_bytes or -1)
