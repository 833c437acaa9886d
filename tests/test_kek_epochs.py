"""Key-encryption-key epochs: after a forget and a rotation with retirement, a copy of the keys
bucket taken before the forget (a backup) opens nothing, while the live stack opens every value
of the subjects not forgotten. Against the session's real NATS."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from agentledger.cli.keys import retire, rotate
from agentledger.config import Settings
from agentledger.core.detect.secrets import derive_marker_key
from agentledger.erasure.erase import scan_subject
from agentledger.errors import AgentLedgerError
from agentledger.security import auth, sealing
from agentledger.security.kek_epochs import KekRing, ring_files, stone_path
from agentledger.security.sealing import Keyring, _seal, aad_for, kek_of, marker_key_of, unseal

AAD = aad_for("acme", "t1")


def test_a_ring_rotates_retires_and_never_makes_a_retired_epoch_again(tmp_path: Path) -> None:
    path = tmp_path / "keks" / "x.key"
    ring = KekRing.load(path)
    assert ring.live_epochs() == [0] and ring.current()[0] == 0
    assert ring.rotate() == 1 and ring.current_epoch == 1
    with pytest.raises(AgentLedgerError, match="current key-encryption key"):
        ring.retire(1)
    old = path.read_bytes()
    ring.retire(0)
    assert not path.exists() and ring.key_of(0) is None and ring.is_retired(0)
    assert stone_path(path, 0).exists()
    # A later start must not make a fresh epoch 0 where the retired one was.
    again = KekRing.load(path)
    assert not path.exists() and again.live_epochs() == [1]
    assert all(old.strip() not in f.read_bytes() for f in tmp_path.rglob("*") if f.is_file())
    # Another process's ring follows a rotation without a restart.
    assert ring.rotate() == 2 and again.current()[0] == 2


async def _backup(nc, bucket: str) -> list[tuple[str, bytes]]:  # type: ignore[no-untyped-def]
    """A copy of every message of the keys bucket's stream, as a backup of the store holds."""
    return [(m.subject, bytes(m.data)) async for m in scan_subject(nc.jetstream(), f"KV_{bucket}",
                                                                  f"$KV.{bucket}.>")]


async def _restore(nc, bucket: str, copy: list[tuple[str, bytes]], settings: Settings) -> Keyring:  # type: ignore[no-untyped-def]
    """The copy put back into a bucket of its own (a restore of the old backup)."""
    keyring = Keyring(nc, bucket, kek_of(settings, create=False))
    kv = await keyring._store()
    for subject, data in copy:
        await kv.put(subject.split(".", 2)[2], data)
    return keyring


async def test_a_backup_taken_before_a_forget_opens_nothing_once_its_epoch_is_retired(
        settings: Settings) -> None:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        keyring = Keyring(nc, settings.keys_bucket, kek_of(settings))
        kept = [_seal(await keyring.key_for("acme", "s-kept", create=True), "s-kept", b"kept", AAD)]
        gone = [_seal(await keyring.key_for("acme", "s-gone", create=True), "s-gone", b"gone", AAD)]
        marker = marker_key_of(settings)
        retired = settings.kek_path.read_bytes().strip()
        backup = await _backup(nc, settings.keys_bucket)
        await keyring.destroy_subject("acme", "s-gone")
        assert await unseal(gone[0], "acme", "t1", keyring) is None

        # Before the rotation the backup still opens the forgotten subject: the hole this closes.
        early = await _restore(nc, "EARLY_KEYS", backup, settings)
        assert await unseal(gone[0], "acme", "t1", early) == b"gone"

        done = await rotate(settings, retire_after=True, grace_s=0)
        assert done["retired"] == [0] and "refused" not in done
        assert done["rewrap"] == {"epoch": 1, "rewrapped": 1, "kept": 0, "unreadable": 0, "raced": 0}

        # The live stack, in a fresh process (nothing cached), opens what was not forgotten.
        sealing._MARKER_KEYS.clear()
        live = Keyring(nc, settings.keys_bucket, kek_of(settings, create=False))
        assert await unseal(kept[0], "acme", "t1", live) == b"kept"
        assert await unseal(gone[0], "acme", "t1", live) is None
        assert marker_key_of(settings) == marker  # markers and digests do not change
        # A key made now is wrapped under the new epoch.
        fresh = _seal(await live.key_for("acme", "s-new", create=True), "s-new", b"new", AAD)
        assert await unseal(fresh, "acme", "t1", Keyring(nc, settings.keys_bucket,
                                                         kek_of(settings, create=False))) == b"new"

        # The old backup, restored now, opens neither subject: its epoch's key is destroyed.
        late = await _restore(nc, "LATE_KEYS", backup, settings)
        for value in (gone[0], kept[0]):
            assert await unseal(value, "acme", "t1", late) is None
        with pytest.raises(AgentLedgerError, match="retired key-encryption-key epoch 0"):
            await late.key_for("acme", "s-kept", create=False)
        # No file beside the keys holds the retired key's bytes any more.
        assert not settings.kek_path.exists()
        name = settings.kek_path.name
        assert ring_files(settings.kek_path) == {f"{name}.e0.retired": (0, True), f"{name}.e1": (1, False)}
        assert all(retired not in f.read_bytes() and base64.b64decode(retired) not in f.read_bytes()
                   for f in settings.kek_path.parent.rglob("*") if f.is_file())
    finally:
        await nc.close()



async def test_retiring_epoch_0_of_a_folder_whose_services_never_ran_keeps_the_marker_key(
        settings: Settings) -> None:
    # Epoch 0 made, then rotated, by the operator alone: no service ever derived the marker key.
    sealing._MARKER_KEYS.clear()
    ring = kek_of(settings)
    expected = derive_marker_key(sealing.load_kek(settings.kek_path, create=False))
    marker_file = settings.kek_path.with_name(settings.kek_path.name + ".marker")
    assert not marker_file.exists()
    ring.rotate()
    done = await retire(settings)
    assert done["retired"] == [0] and not settings.kek_path.exists()
    # Kept beside the ring before epoch 0 was shredded; a fresh process reads the same key.
    assert marker_file.exists()
    sealing._MARKER_KEYS.clear()
    assert marker_key_of(settings) == expected
