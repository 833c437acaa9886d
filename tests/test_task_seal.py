"""Per-task crypto-shredding (``security/task_seal.py``): an ordinary task's messages are stored
sealed under the task's own key, so a task forget destroys one key and purges the subject
instead of overwriting every message.

The pure half: a body opens only on its own tenant, task and message, a destroyed or replaced key
reads as erased, and no data subject's key can take a task key's name. The stack half, through a
real JetStream and PostgreSQL: the stream's block files never hold the task's text, the projector
still reads it, and a forget leaves neither a readable message nor the key's wrapped bytes.
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from pathlib import Path

import msgspec
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.errors import AgentLedgerError
from agentledger.security import auth
from agentledger.security.kek_epochs import KekRing, marker_path
from agentledger.security.sealing import Keyring, kek_of, key_name
from agentledger.security.task_seal import SEALED, open_body, seal_body, sealable, slot
from agentledger.stores.ledger import ledger_subject
from ckpt_support import TENANT, created, event, running, variable

KEY = ("k1", AESGCM(AESGCM.generate_key(bit_length=256)))
HEADERS = {SEALED: "k1", "Nats-Msg-Id": "acme:t1:e1"}


def test_a_sealed_body_opens_only_on_its_own_tenant_task_and_message() -> None:
    body = b'{"kind":"turn_appended","content":"the meeting moved to Thursday"}'
    sealed = seal_body(KEY, "acme", "t1", "acme:t1:e1", body)
    assert b"Thursday" not in sealed
    assert open_body(KEY, "acme", "t1", HEADERS, sealed) == body
    for tenant, task, headers in (("other", "t1", HEADERS), ("acme", "t2", HEADERS),
                                  ("acme", "t1", {**HEADERS, "Nats-Msg-Id": "acme:t1:e2"})):
        with pytest.raises(AgentLedgerError) as info:
            open_body(KEY, tenant, task, headers, sealed)
        assert info.value.code == "seal_mismatch"
    with pytest.raises(AgentLedgerError):
        open_body(KEY, "acme", "t1", HEADERS, sealed[:-1] + bytes([sealed[-1] ^ 1]))
    with pytest.raises(AgentLedgerError):
        open_body(KEY, "acme", "t1", HEADERS, sealed[:5])


def test_a_destroyed_or_replaced_key_reads_as_erased_and_an_unsealed_body_as_it_is() -> None:
    sealed = seal_body(KEY, "acme", "t1", "acme:t1:e1", b"{}")
    assert open_body(None, "acme", "t1", HEADERS, sealed) is None
    newer = ("k2", AESGCM(AESGCM.generate_key(bit_length=256)))
    assert open_body(newer, "acme", "t1", HEADERS, sealed) is None
    assert open_body(None, "acme", "t1", {"Nats-Msg-Id": "x"}, b'{"plain":1}') == b'{"plain":1}'


def test_task_keys_never_share_a_name_with_a_data_subject_key() -> None:
    token = re.compile(ev.Token.__metadata__[0].pattern)  # type: ignore[attr-defined]
    assert token.match("s-alice") and not token.match(slot("t1"))
    assert key_name("acme", slot("t1")) == "acme.=t1"
    assert not sealable(ev.MEMORY_TASK) and not sealable(ev.DOCUMENTS_TASK) and not sealable(ev.FORGET_TASK)
    assert sealable("chat-1")


def test_the_task_wrap_outlives_every_rotation_and_retirement(tmp_path: Path) -> None:
    """Task keys are wrapped under a key derived from the marker key, not an epoch: retiring the
    epoch of an old backup leaves its task content replayable (docs/deletion.md)."""
    kek = tmp_path / "keks" / "kek"
    ring = KekRing.load(kek)
    with pytest.raises(AgentLedgerError) as info:
        ring.task_wrap()
    assert info.value.code == "invalid_config"
    marker_path(kek).write_bytes(base64.b64encode(os.urandom(32)))
    epoch, wrap = ring.task_wrap()
    nonce = os.urandom(12)
    wrapped = wrap.encrypt(nonce, b"a task's data key", b"acme.=t1")
    ring.rotate()
    ring.retire(0)
    later = KekRing.load(kek, create=False)
    assert later.key_of(0) is None and epoch not in later.live_epochs() and later.live_epochs() == [1]
    opener = later.key_of(epoch)
    assert opener is not None and opener.decrypt(nonce, wrapped, b"acme.=t1") == b"a task's data key"


def _stream_dirs(root: Path, name: str) -> list[Path]:
    return [p for p in root.glob(f"**/streams/{name}") if p.is_dir()]


def _files_hold(dirs: list[Path], needle: bytes) -> bool:
    return any(needle in f.read_bytes() for d in dirs for f in d.rglob("*") if f.is_file())


async def test_a_task_is_ciphertext_at_rest_readable_through_the_projector_and_shredded_by_a_forget(
        settings: Settings, server_root: Path) -> None:
    canary = f"canary{uuid.uuid4().hex}"
    task = f"t{uuid.uuid4().hex[:8]}"
    turns = [event("turn_appended", {"role": "user", "ordinal": i, "content": f"note {i}: {canary}"}, task)
             | {"data_subject": "s-chat"} for i in range(1, 41)]
    async with running(settings, tombstone=True) as stack:
        await stack.append([created(task), *turns, variable(task, "where", f"{canary} street")])
        await stack.projected()
        view = (await stack.c.working_memory(TENANT, task, reveal_personal=True)).state
        assert [t["content"] for t in view["transcript"]] == [f"note {i}: {canary}" for i in range(1, 41)]
        assert view["variables"]["where"]["value"] == f"{canary} street"

        nc = await auth.connect(settings, auth.WRITER)
        try:
            js = nc.jetstream()
            stored = await js.get_last_msg(settings.stream, ledger_subject(settings.prefix, TENANT, task))
            assert stored.headers is not None and SEALED in stored.headers
            keyring = Keyring(nc, settings.keys_bucket, kek_of(settings, create=False))
            assert await keyring.task_keys(TENANT) == [task]
            assert task not in await keyring.subjects(TENANT)  # not a data subject
            wrapped = (await js.get_last_msg(f"KV_{settings.keys_bucket}",
                                             f"$KV.{settings.keys_bucket}.{key_name(TENANT, slot(task))}")).data
            wrapped_key = msgspec.json.decode(wrapped)["wrapped"].encode()
        finally:
            await nc.close()
        ledger_dirs = _stream_dirs(server_root, settings.stream)
        key_dirs = _stream_dirs(server_root, f"KV_{settings.keys_bucket}")
        if ledger_dirs:  # the embedded server of the suite (not a server named by the environment)
            assert _files_hold(ledger_dirs, task.encode())  # the scan reads the right files: ids are plain
            assert not _files_hold(ledger_dirs, canary.encode())  # the text never is
            assert _files_hold(key_dirs, wrapped_key)

        reply = await stack.c.forget(TENANT, {"kind": "task", "task_id": task})
        done = await stack.c.forget_wait(TENANT, reply.request_id, timeout_s=120)
        assert done.receipt is not None
        ledger_step = next(s for s in done.receipt.indexes if s.index == "ledger")
        assert ledger_step.counts == {"messages": 42, "shredded": 42}, ledger_step

        nc = await auth.connect(settings, auth.WRITER)
        try:
            js = nc.jetstream()
            info = await js.stream_info(settings.stream,
                                        subjects_filter=ledger_subject(settings.prefix, TENANT, task))
            assert not (info.state.subjects or {}), "the task's messages are purged"
            keyring = Keyring(nc, settings.keys_bucket, kek_of(settings, create=False))
            assert await keyring.task_keys(TENANT) == []
        finally:
            await nc.close()
        if ledger_dirs:
            assert not _files_hold(key_dirs, wrapped_key)  # the key's record is overwritten, not dropped

        # The id is not reserved: the task starts again, under a new key, and reads back.
        await stack.append([created(task), variable(task, "again", "fresh start")])
        await stack.projected()
        view = (await stack.c.working_memory(TENANT, task)).state
        assert view["variables"]["again"]["value"] == "fresh start" and view["transcript"] == []
