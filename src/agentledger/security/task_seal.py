"""Per-task crypto-shredding: every message of an ordinary task is stored sealed under the task's key.

A task forget used to securely erase each of the task's messages, and the server applies a
stream's message deletes one at a time, each an overwrite and an fsync: a 10,000-event task
took 60-80 s (docs/deletion.md). Now the writer seals the whole stored body of every event of
an ordinary task with AES-256-GCM under a data key of that task, kept in the keys bucket beside
the data-subject keys (``Keyring``, wrapped by the key-encryption key, under the name
``<tenant>.=<task>``: ``=`` is no token character, so no data subject's key shares it). A task
forget destroys that one key (its KV record securely erased) and then purges the subject in one
call: what the purge leaves in the block files until compaction is ciphertext nobody can open.

The sealed body is ``nonce (12 bytes) || ciphertext``; the ``Agentledger-Sealed`` header names
the key id it was sealed under. The associated data binds it to its tenant, task and dedupe id,
so a body copied to another message does not open. Bodies of the tenant's service ledgers
(``_memory``, ``_documents``, ``_forget``) are not sealed: their messages are forgotten one by
one (a memory record's), and their readers are the services themselves. A message written
before sealing existed carries no header and is read as it is; the forget erases such a message
the old way.

Reading: ``TaskKeys.load`` fetches (async) the keys a batch of messages names; ``TaskKeys.open``
(pure, no I/O) then returns each body's plaintext, ``None`` when the key is gone (the task is
being forgotten: the message is skipped as erased), or raises ``seal_mismatch`` for a body that
does not open under the key it names (a forged or damaged message).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nats.aio.client import Client
from nats.aio.msg import Msg

from agentledger.config import Settings
from agentledger.contracts.events import RESERVED_TASK_PREFIX
from agentledger.errors import AgentLedgerError, KeyDestroyedError
from agentledger.security.sealing import TASK_SLOT, Keyring, kek_of
from agentledger.stores.ledger import MSG_ID, subject_key

SEALED = "Agentledger-Sealed"
_NONCE = 12
# Keys a ``TaskKeys`` holds before a ``load`` starts over (a replay of many tasks).
HELD_MAX = 4096
_MISSING = object()

TaskKey = tuple[str, AESGCM]


def sealable(task_id: str) -> bool:
    """Whether the task's messages are sealed: every task but the tenant's service ledgers."""
    return not task_id.startswith(RESERVED_TASK_PREFIX)


def slot(task_id: str) -> str:
    """The keyring's subject slot of a task's key."""
    return TASK_SLOT + task_id


def _aad(tenant: str, task_id: str, dedupe_id: str) -> bytes:
    return f"task/{tenant}/{task_id}/{dedupe_id}".encode()


def seal_body(key: TaskKey, tenant: str, task_id: str, dedupe_id: str, body: bytes) -> bytes:
    """The stored form of one event body of the task."""
    nonce = secrets.token_bytes(_NONCE)
    return nonce + key[1].encrypt(nonce, body, _aad(tenant, task_id, dedupe_id))


def _seal_mismatch(why: str) -> AgentLedgerError:
    return AgentLedgerError(f"a sealed ledger message does not open: {why}", code="seal_mismatch")


def open_body(key: TaskKey | None, tenant: str, task_id: str, headers: Mapping[str, str] | None,
              data: bytes) -> bytes | None:
    """The plaintext body of a stored message: ``data`` itself when it is not sealed, None
    when the key it was sealed under is gone; ``seal_mismatch`` when it does not open."""
    key_id = (headers or {}).get(SEALED)
    if key_id is None:
        return data
    if key is None or key[0] != key_id:
        return None
    if len(data) <= _NONCE:
        raise _seal_mismatch("the body is shorter than its nonce")
    try:
        return key[1].decrypt(data[:_NONCE], data[_NONCE:],
                              _aad(tenant, task_id, (headers or {}).get(MSG_ID, "")))
    except InvalidTag:
        raise _seal_mismatch("the body fails its authentication tag") from None


class TaskKeys:
    """The task keys a reader needs for one batch of messages, fetched before it decodes them.

    Made for a batch and dropped with it: the keyring's own bounded cache is what lasts.
    """

    def __init__(self, keyring: Keyring | Callable[[], Keyring]) -> None:
        # A factory is called at the first sealed message: a reader of a ledger that holds
        # none never needs the key-encryption key.
        self._keyring = keyring
        self._held: dict[tuple[str, str], TaskKey | None] = {}

    @property
    def keyring(self) -> Keyring:
        if not isinstance(self._keyring, Keyring):
            self._keyring = self._keyring()
        return self._keyring

    def evict(self, tenant: str, task_id: str | None) -> int:
        """Drop the keys held of one task, or of every task of ``tenant`` (a forget's eviction)."""
        for k in [k for k in self._held if k[0] == tenant and task_id in (None, k[1])]:
            del self._held[k]
        if not isinstance(self._keyring, Keyring):
            return 0  # no keyring made yet: nothing cached
        return self._keyring.evict(tenant, None if task_id is None else slot(task_id))

    def holds(self, tenant: str, task_id: str, headers: Mapping[str, str] | None) -> bool:
        """Whether the message can be opened without a ``load`` (not sealed, or its key held)."""
        key_id = (headers or {}).get(SEALED)
        if key_id is None:
            return True
        held = self._held.get((tenant, task_id))
        return held is not None and held[0] == key_id

    async def load(self, wanted: Iterable[tuple[str, str, Mapping[str, str] | None]]) -> None:
        """Fetch the key of every (tenant, task) whose message (its headers) is sealed."""
        if len(self._held) > HELD_MAX:
            self._held.clear()  # a long replay: what the next messages need is fetched again
        for tenant, task_id, headers in wanted:
            key_id = (headers or {}).get(SEALED)
            if key_id is None:
                continue
            held = self._held.get((tenant, task_id))
            if held is not None and held[0] == key_id:
                continue
            self._held[(tenant, task_id)] = await self._fetch(tenant, task_id, key_id)

    async def _fetch(self, tenant: str, task_id: str, key_id: str) -> TaskKey | None:
        try:
            key = await self.keyring.key_for(tenant, slot(task_id), create=False)
            if key[0] != key_id:
                # The cached key may be older than the message (destroyed and made again by
                # another process): ask the bucket once before calling the message erased.
                self.keyring.evict(tenant, slot(task_id))
                key = await self.keyring.key_for(tenant, slot(task_id), create=False)
        except KeyDestroyedError:
            return None
        return key

    def open(self, tenant: str, task_id: str, headers: Mapping[str, str] | None,
             data: bytes) -> bytes | None:
        """``open_body`` with the key ``load`` fetched (pure)."""
        held = self._held.get((tenant, task_id), _MISSING)
        if held is _MISSING and SEALED in (headers or {}):
            raise RuntimeError("a sealed message was opened before its task key was loaded")
        return open_body(None if held is _MISSING else held, tenant, task_id,  # type: ignore[arg-type]
                         headers, data)

    async def open_one(self, tenant: str, task_id: str, headers: Mapping[str, str] | None,
                       data: bytes) -> bytes | None:
        """Load and open one message."""
        await self.load([(tenant, task_id, headers)])
        return self.open(tenant, task_id, headers, data)


def task_keys_of(nc: Client, settings: Settings) -> TaskKeys:
    """Task keys for a reader that has no keyring of its own (a replay, an audit)."""
    return TaskKeys(lambda: Keyring(nc, settings.keys_bucket, kek_of(settings, create=False),
                                    cache_bytes=settings.key_cache_bytes))


async def bodies(messages: AsyncIterable[Msg], keys: TaskKeys,
                 prefix: str) -> AsyncIterator[tuple[Msg, bytes]]:
    """Each ledger message of ``messages`` with its body opened (a scan that reads content:
    a forget's plan). One whose task key is gone, or that does not open, is passed by."""
    async for msg in messages:
        key = subject_key(prefix, msg.subject)
        if key is None or not msg.data:
            continue
        try:
            body = await keys.open_one(key[0], key[1], msg.headers, msg.data)
        except AgentLedgerError:
            continue
        if body is not None:
            yield msg, body
