"""Buckets a forget erases from allow message deletes, and old ones are rebuilt to allow them.

Against the session's real NATS. A bucket made by nats-py's ``create_key_value`` denies
message deletes (JetStream cannot lift that), so a forget could only purge it and say
``purged_not_erased``; ``up`` rebuilds such buckets (``bucket_migration``), crash-safely.
"""

from __future__ import annotations

import asyncio
import time

import nats.js.errors
import pytest
from nats.js.client import JetStreamContext

from agentledger.config import Settings
from agentledger.erasure.erase import kv_removed, live_kv_keys
from agentledger.runtime import commands
from agentledger.security import auth
from agentledger.security.bindings import bindings_bucket
from agentledger.security.kek_epochs import KekRing
from agentledger.security.sealing import Keyring
from agentledger.stores import bucket_migration
from agentledger.stores.bucket_migration import make_erasable, side_stream
from agentledger.stores.buckets import kv_stream_config, open_kv
from agentledger.stores.leases import LeaseTable


async def old_bucket(js: JetStreamContext, bucket: str) -> None:
    """A bucket as an older version made it: two live entries (one with a per-key TTL), one
    deleted and one purged key."""
    kv = await js.create_key_value(bucket=bucket, history=1, max_bytes=1 << 20)
    await kv.put("acme.plain", b"plain value")
    await js.publish(f"$KV.{bucket}.acme.lease", b"lease value", msg_ttl=3600)
    await kv.put("acme.deleted", b"deleted value")
    await kv.delete("acme.deleted")
    await kv.put("acme.purged", b"purged value")
    await kv.purge("acme.purged")
    assert (await js.stream_info(f"KV_{bucket}")).config.deny_delete


async def assert_moved(js: JetStreamContext, bucket: str) -> None:
    info = await js.stream_info(f"KV_{bucket}")
    assert info.config.deny_delete is False and info.config.max_bytes == 1 << 20
    kv = await js.key_value(bucket)
    assert (await kv.get("acme.plain")).value == b"plain value"
    lease = await js.get_msg(f"KV_{bucket}", subject=f"$KV.{bucket}.acme.lease")
    assert lease.data == b"lease value" and (lease.headers or {}).get("Nats-TTL") == "3600"
    for gone in ("acme.deleted", "acme.purged"):
        with pytest.raises(nats.js.errors.KeyNotFoundError):
            await kv.get(gone)
    assert info.state.messages == 2
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.stream_info(side_stream(bucket))
    # What the migration is for: an entry's message can be erased.
    await js.delete_msg(f"KV_{bucket}", lease.seq)
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.get_msg(f"KV_{bucket}", subject=f"$KV.{bucket}.acme.lease")


async def test_an_old_bucket_is_rebuilt_to_allow_erasing_and_keeps_its_live_entries(
        settings: Settings) -> None:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        js = nc.jetstream()
        bucket = f"{settings.prefix}_old"
        await old_bucket(js, bucket)
        assert await make_erasable(js, bucket) == 2
        await assert_moved(js, bucket)
        assert await make_erasable(js, bucket) is None  # done once, then nothing to do
        assert await make_erasable(js, f"{settings.prefix}_absent") is None
    finally:
        await nc.close()


@pytest.mark.parametrize("crash_after", ["copy_started", "copy_done", "stream_deleted", "half_back"])
async def test_a_rebuild_cut_short_by_a_crash_loses_nothing(settings: Settings,
                                                            crash_after: str) -> None:
    """The state a crash leaves after each step of a rebuild, then ``make_erasable`` again:
    every live entry is there, once."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        js = nc.jetstream()
        bucket = f"{settings.prefix}_cut"
        await old_bucket(js, bucket)
        config = (await js.stream_info(f"KV_{bucket}")).config
        await bucket_migration._copy_out(js, bucket, config)
        if crash_after == "copy_started":  # the copy never wrote its `done`
            done = await js.get_msg(side_stream(bucket), subject=f"$KVMOVE.{bucket}.done")
            await js.delete_msg(side_stream(bucket), done.seq)
        if crash_after in ("stream_deleted", "half_back"):
            await js.delete_stream(f"KV_{bucket}")
        if crash_after == "half_back":
            await open_kv(js, bucket)
            await js.publish(f"$KV.{bucket}.acme.plain", b"plain value")
        assert await make_erasable(js, bucket) == 2
        await assert_moved(js, bucket)
    finally:
        await nc.close()


async def test_buckets_made_now_allow_erasing_and_up_rebuilds_old_ones(settings: Settings) -> None:
    """A fresh stack's keys, leases and bindings buckets allow message deletes (so a forget's
    receipt never has to say ``purged_not_erased``); ``up``'s preparation rebuilds old ones."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        js = nc.jetstream()
        await Keyring(nc, settings.keys_bucket, KekRing.load(settings.kek_path)).key_for(
            "acme", "subj-1", create=True)
        table = LeaseTable(nc, settings.leases_bucket, commands._NO_GRANTS)
        await table.start()
        await table.stop()
        for bucket in (settings.keys_bucket, settings.leases_bucket):
            assert (await js.stream_info(f"KV_{bucket}")).config.deny_delete is False, bucket
        await js.create_key_value(bucket=bindings_bucket(settings.prefix), history=1)
        await (await js.key_value(bindings_bucket(settings.prefix))).put("acme.agent-1", b"{}")
        await commands.ensure_erasable_buckets(settings)
        info = await js.stream_info(f"KV_{bindings_bucket(settings.prefix)}")
        assert info.config.deny_delete is False and info.state.messages == 1
    finally:
        await nc.close()


async def test_a_ttl_removal_marker_is_not_a_live_key(settings: Settings) -> None:
    """Protects forget plans and key listings of KV buckets: a key whose TTL ended leaves the
    server's removal marker (``Nats-Marker-Reason``, no ``KV-Operation``), and it holds no
    value; a deleted key neither. Before ``live_kv_keys`` the leases plan listed such a key."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        js = nc.jetstream()
        bucket = f"{settings.prefix}_ttl"
        await js.add_stream(kv_stream_config(bucket, marker_ttl_s=600))
        await js.publish(f"$KV.{bucket}.acme.kept", b"kept")
        await js.publish(f"$KV.{bucket}.acme.expiring", b"short", msg_ttl=1)
        await js.publish(f"$KV.{bucket}.acme.deleted", b"gone")
        await js.publish(f"$KV.{bucket}.acme.deleted", b"", headers={"KV-Operation": "DEL"})
        await js.publish(f"$KV.{bucket}.globex.other", b"other tenant")
        # The marker replaces the value once the server's TTL sweep has run (its own pace).
        deadline = time.monotonic() + 120
        while True:
            last = await js.get_last_msg(f"KV_{bucket}", f"$KV.{bucket}.acme.expiring")
            if "Nats-Marker-Reason" in (last.headers or {}):
                break
            assert time.monotonic() < deadline, "the server never wrote the TTL marker"
            await asyncio.sleep(0.2)
        assert kv_removed(last.headers)
        assert await live_kv_keys(js, bucket, "acme.>") == ["acme.kept"]
        assert await live_kv_keys(js, bucket, ">") == ["acme.kept", "globex.other"]
        assert await live_kv_keys(js, f"{settings.prefix}_absent", ">") == []
    finally:
        await nc.close()
