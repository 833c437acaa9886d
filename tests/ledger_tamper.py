"""An attacker's edits of the ledger while no service runs, for the chain tests.

The attacker can write the JetStream store but cannot run code in the services (so holds no
integrity key). ``rewrite`` stands for editing the stopped server's store: it takes every
message of the stream (subject, body and the headers as stored), lets ``edit`` change the list
(bodies, headers, order, what is there) and puts the result back as the stream's whole
content, with NATS's own framing and record hashes made by the server itself: exactly what
replacing the store's files with an edited copy gives, which is all such an attacker needs.
``append_raw`` adds one message at the end, as a forged record appended to the last block.

A task's bodies are sealed under its task key (``security.task_seal``). Without that key the
attacker could only corrupt their bytes; to test the chain against meaningful edits, these
helpers give the attacker the task key too (but never the integrity key): ``event`` opens a
body and ``with_event`` seals the edited event again, on the message's own task and dedupe id.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import msgspec
import nats.js.errors

from agentledger.config import Settings
from agentledger.security import auth
from agentledger.security.sealing import Keyring, kek_of
from agentledger.security.task_seal import SEALED, TaskKey, open_body, seal_body, slot
from agentledger.stores.ledger import ensure_stream


@dataclass(frozen=True)
class Stored:
    subject: str
    body: bytes
    headers: dict[str, str]
    # The task key the body is sealed under, as the attacker was given it (None: not sealed).
    key: TaskKey | None = None

    def _names(self) -> tuple[str, str]:
        tenant, task = self.subject.split(".")[-2:]
        return tenant, task

    def event(self) -> dict[str, object]:
        body = open_body(self.key, *self._names(), self.headers, self.body) if self.key else self.body
        assert body is not None
        return msgspec.json.decode(body)

    def with_event(self, event: dict[str, object]) -> Stored:
        body = msgspec.json.encode(event)
        if self.key is not None:
            body = seal_body(self.key, *self._names(), self.headers.get("Nats-Msg-Id", ""), body)
        return replace(self, body=body)


async def messages(settings: Settings) -> list[Stored]:
    """Every message of the ledger stream, in order, with the headers as stored."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        keyring = Keyring(nc, settings.keys_bucket, kek_of(settings, create=False))
        js = nc.jetstream()
        info = await js.stream_info(settings.stream)
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1) if info.state.messages else []:
            try:
                msg = await js.get_msg(settings.stream, seq)
            except nats.js.errors.NotFoundError:
                continue  # a deleted sequence (a gap the stream keeps)
            headers = {k: v for k, v in (msg.headers or {}).items() if not k.startswith("Nats-") or k == "Nats-Msg-Id"}
            key = None
            if SEALED in headers:
                tenant, task = (msg.subject or "").split(".")[-2:]
                key = await keyring.key_for(tenant, slot(task), create=False)
            out.append(Stored(msg.subject or "", msg.data or b"", headers, key))
        return out
    finally:
        await nc.close()


async def rewrite(settings: Settings, edit: object) -> None:
    """Replace the stream's content by ``edit(messages)`` (a callable on the list)."""
    assert callable(edit)
    edited = edit(await messages(settings))
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        await nc.jetstream().delete_stream(settings.stream)
    finally:
        await nc.close()
    await ensure_stream(settings)
    for m in edited:
        await append_raw(settings, m)


async def append_raw(settings: Settings, m: Stored) -> int:
    """Store one message as it is (the writer's NATS user: the only one that may publish)."""
    nc = await auth.connect(settings, auth.WRITER)
    try:
        ack = await nc.jetstream().publish(m.subject, m.body, headers=m.headers or None)
        return int(ack.seq)
    finally:
        await nc.close()
