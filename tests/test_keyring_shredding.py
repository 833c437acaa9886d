"""Crypto-shredding that shreds: a destroyed key is erased from storage, and reads as erased.

Against real NATS: the session's server for what a keyring answers, a private
embedded server for the raw scan of the JetStream store (the session's store
folder is not reachable from a test).
"""

from __future__ import annotations

import base64
from pathlib import Path

import msgspec
import nats
import pytest
from nats.js.errors import KeyNotFoundError

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.errors import AgentLedgerError
from agentledger.runtime.embedded import EmbeddedNats
from agentledger.security import auth
from agentledger.security.kek_epochs import KekRing
from agentledger.security.sealing import Keyring, _seal, aad_for, kek_of, load_kek, unseal

AAD = aad_for("acme", "t1")


async def seal(keyring: Keyring, subject: str, text: str) -> ev.Sealed:
    key = await keyring.key_for("acme", subject, create=True)
    return _seal(key, subject, text.encode(), AAD)


async def test_destroyed_subject_reads_erased_and_a_new_key_does_not_break_old_values(
        settings: Settings) -> None:
    """Destroy one subject: its values read erased, the other's open; a recreated key has a new id,
    opens its own values, and the old ones still read erased rather than seal_mismatch."""
    nc = await auth.connect(settings, auth.WRITER)
    try:
        keyring = Keyring(nc, settings.keys_bucket, KekRing.load(settings.kek_path))
        gone = [await seal(keyring, "subj-gone", f"gone {i}") for i in range(3)]
        kept = [await seal(keyring, "subj-kept", f"kept {i}") for i in range(3)]
        old_id = gone[0].key_id

        receipt = await keyring.destroy_subject("acme", "subj-gone")
        assert receipt.subject == "subj-gone" and receipt.key_ids == [old_id]
        assert receipt.erased and receipt.erased_seqs and receipt.evicted
        assert "acme.subj-gone" not in keyring.cache
        kv = await nc.jetstream().key_value(settings.keys_bucket)
        with pytest.raises(KeyNotFoundError):
            await kv.get("acme.subj-gone")

        assert [await unseal(s, "acme", "t1", keyring) for s in gone] == [None] * 3
        assert [await unseal(s, "acme", "t1", keyring) for s in kept] == [f"kept {i}".encode()
                                                                 for i in range(3)]
        # A fresh keyring (another process, nothing cached) reads the same.
        other = Keyring(nc, settings.keys_bucket, KekRing.load(settings.kek_path))
        assert await unseal(gone[0], "acme", "t1", other) is None

        fresh = await seal(keyring, "subj-gone", "after")
        assert fresh.key_id != old_id
        assert await unseal(fresh, "acme", "t1", keyring) == b"after"
        assert [await unseal(s, "acme", "t1", keyring) for s in gone] == [None] * 3
        assert await unseal(gone[0], "acme", "t1", other) is None

        # Under the key it names, a value that does not open is still a mismatch.
        with pytest.raises(AgentLedgerError) as info:
            await unseal(fresh, "acme", "other-task", keyring)
        assert info.value.code == "seal_mismatch"

        # Destroying again, or a subject that never had a key, erases nothing more.
        again = await keyring.destroy_subject("acme", "subj-gone")
        assert again.key_ids == [fresh.key_id]
        nothing = await keyring.destroy_subject("acme", "subj-never")
        assert nothing.key_ids == [] and not nothing.evicted
        assert await unseal(fresh, "acme", "t1", keyring) is None
    finally:
        await nc.close()


async def test_a_stale_cache_rereads_the_bucket_for_a_newer_key(settings: Settings) -> None:
    """A keyring that cached the old key opens values sealed under the key made after a destroy
    elsewhere: a key id it does not hold sends it back to the bucket before it says erased."""
    nc = await auth.connect(settings, auth.WRITER)
    try:
        kek = KekRing.load(settings.kek_path)
        writer, reader = Keyring(nc, settings.keys_bucket, kek), Keyring(nc, settings.keys_bucket, kek)
        first = await seal(writer, "subj-1", "first")
        assert await unseal(first, "acme", "t1", reader) == b"first"  # the reader caches the first key
        await writer.destroy_subject("acme", "subj-1")
        second = await seal(writer, "subj-1", "second")
        assert await unseal(second, "acme", "t1", reader) == b"second"
        assert await unseal(first, "acme", "t1", reader) is None
    finally:
        await nc.close()


def store_contains(store: Path, needle: bytes) -> list[Path]:
    return [p for p in store.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def test_destroy_erases_the_wrapped_key_bytes_from_the_jetstream_store(
        tmp_path: Path, server_root: Path) -> None:
    """The raw scan: the destroyed wrapped key's bytes are in the store before, absent after;
    the other subject's wrapped key stays."""
    kek = KekRing.load(tmp_path / "keyring.key")
    with EmbeddedNats(tmp_path / "nats", server_root=server_root) as server:
        store = server.dir / "jetstream"
        nc = await nats.connect(server.url)
        try:
            keyring = Keyring(nc, "SHRED_KEYS", kek)
            gone = await seal(keyring, "subj-gone", "gone")
            kept = await seal(keyring, "subj-kept", "kept")
            kv = await nc.jetstream().key_value("SHRED_KEYS")

            def wrapped_of(raw: bytes) -> bytes:
                return msgspec.json.decode(raw)["wrapped"].encode()

            gone_wrapped = wrapped_of((await kv.get("acme.subj-gone")).value)
            kept_wrapped = wrapped_of((await kv.get("acme.subj-kept")).value)
            assert base64.b64decode(gone_wrapped)  # the base64 text the store holds
            assert store_contains(store, gone_wrapped) and store_contains(store, kept_wrapped)

            await keyring.destroy_subject("acme", "subj-gone")
            assert store_contains(store, gone_wrapped) == []
            assert store_contains(store, kept_wrapped)
            assert await unseal(gone, "acme", "t1", keyring) is None
            assert await unseal(kept, "acme", "t1", keyring) == b"kept"
        finally:
            await nc.close()
    # Stopped: what is on disk now is all there is, and the key is still not there.
    assert store_contains(store, gone_wrapped) == []
    assert store_contains(store, kept_wrapped)


async def test_a_bucket_that_denies_deletes_is_purged_and_the_receipt_says_not_erased(
        settings: Settings) -> None:
    """A keys bucket made before keyrings made their own denies message deletes: destroy still
    makes the key read as gone, and its receipt does not claim the bytes were erased."""
    nc = await auth.connect(settings, auth.WRITER)
    try:
        # The old way (nats-py's create_key_value): deny_delete, as a bucket an older version made.
        await nc.jetstream().create_key_value(bucket=settings.keys_bucket, history=1)
        keyring = Keyring(nc, settings.keys_bucket, KekRing.load(settings.kek_path))
        sealed = await seal(keyring, "subj-old", "old")
        receipt = await keyring.destroy_subject("acme", "subj-old")
        assert receipt.erased is False and receipt.key_ids == [sealed.key_id]
        assert await unseal(sealed, "acme", "t1", keyring) is None
        fresh = await seal(keyring, "subj-old", "new")
        assert fresh.key_id != sealed.key_id and await unseal(fresh, "acme", "t1", keyring) == b"new"
    finally:
        await nc.close()


def test_the_key_encryption_key_lives_outside_the_data_folder_and_an_old_one_is_moved_out(
        tmp_path: Path) -> None:
    """A copy of the data folder must not carry the key that opens it: the default KEK path is
    outside it, and a KEK an older version left inside is moved out (and gone from the folder)."""
    data = tmp_path / "data"
    data.mkdir()
    settings = Settings(data_dir=data, kek_dir=tmp_path / "keks")
    assert not settings.kek_path.resolve().is_relative_to(data.resolve())
    legacy = settings.legacy_kek_path
    legacy.write_bytes(base64.b64encode(b"k" * 32))
    assert kek_of(settings).live_epochs() == [0]
    assert load_kek(settings.kek_path) == b"k" * 32
    assert not legacy.exists() and settings.kek_path.exists()
    assert oct(settings.kek_path.stat().st_mode & 0o777) == "0o600"
    assert store_contains(data, base64.b64encode(b"k" * 32)) == []
    kek_of(settings)
    assert load_kek(settings.kek_path) == b"k" * 32  # moved once, read after
    other = Settings(data_dir=tmp_path / "elsewhere", kek_dir=tmp_path / "keks")
    assert other.kek_path != settings.kek_path
