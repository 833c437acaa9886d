"""Crypto-shredding: personal content sealed with a per-data-subject key.

Each data subject (a pseudonymous token chosen by the platform, never a name or
an e-mail) gets its own random 256-bit data key. Personal values are encrypted
with AES-256-GCM under that key before they enter the ledger; destroying the key
makes every copy in the log, the projections and any backup unreadable without
rewriting them, and replay keeps working because the ciphertext stays in place.

Data keys live in a JetStream key-value bucket, wrapped (AES-GCM) by a key-
encryption key that never leaves the host: ``data_dir/keyring.key``, or
``AGENTLEDGER_KEK_FILE``. The associated data binds every ciphertext to its
tenant and task, so a sealed value copied into another task fails to open.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path
from typing import Any

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from agentledger.bounded import ByteLRU
from agentledger.buckets import open_kv
from agentledger.contracts import events as ev
from agentledger.core.validate import has_personal_content
from agentledger.errors import AgentLedgerError, KeyDestroyedError

_b64 = base64.b64encode
_unb64 = base64.b64decode
_encode_value = msgspec.json.Encoder().encode


class _WrappedKey(msgspec.Struct, frozen=True):
    key_id: str
    nonce: str
    wrapped: str


def load_kek(path: Path, *, create: bool = True) -> bytes:
    """Read the key-encryption key, creating it (mode 0600) on first use if ``create``."""
    if not path.exists():
        if not create:
            raise AgentLedgerError(f"no key-encryption key at {path}; personal values cannot be "
                                   "opened here", code="invalid_config")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_b64(AESGCM.generate_key(bit_length=256)))
    key = _unb64(path.read_bytes().strip())
    if len(key) != 32:
        raise AgentLedgerError(f"{path} does not hold a 256-bit key", code="invalid_config")
    return key


# Default budget of a keyring's in-process cache of unwrapped keys (AGENTLEDGER_KEY_CACHE_BYTES).
KEY_CACHE_BYTES = 16 << 20
# What one cached key costs besides its subject and key id: the AES-GCM context, the tuple and
# the dict slot (measured with tracemalloc at about 450 bytes for a 16-character subject).
KEY_ENTRY_OVERHEAD = 512


class Keyring:
    """Per-subject data keys in a KV bucket; one in-process cache per service.

    The cache is bounded by bytes (``cache_bytes``), least recently used first
    out: the writer sees a new data subject with every new person, so a cache
    that was never pruned grew with every subject ever sealed. An evicted key is
    read back from the bucket (and unwrapped) when it is needed again.
    """

    def __init__(self, nc: Client, bucket: str, kek: bytes, *, max_bytes: int = 0,
                 cache_bytes: int = KEY_CACHE_BYTES) -> None:
        self._js = nc.jetstream()
        self._bucket = bucket
        self._max_bytes = max_bytes
        self._kek = AESGCM(kek)
        self._cache: ByteLRU[str, tuple[str, AESGCM]] = ByteLRU(cache_bytes)
        self._kv: Any = None

    @property
    def cache(self) -> ByteLRU[str, tuple[str, AESGCM]]:
        """The unwrapped keys held in memory (for operators' figures and tests)."""
        return self._cache

    async def _store(self) -> Any:
        if self._kv is None:
            self._kv = await open_kv(self._js, self._bucket, self._max_bytes)
        return self._kv

    def _unwrap(self, subject: str, raw: bytes) -> tuple[str, AESGCM]:
        w = msgspec.json.decode(raw, type=_WrappedKey)
        dek = self._kek.decrypt(_unb64(w.nonce), _unb64(w.wrapped), subject.encode())
        return w.key_id, AESGCM(dek)

    async def key_for(self, subject: str, *, create: bool) -> tuple[str, AESGCM]:
        """The subject's data key; created (race-safely, by CAS) when ``create``."""
        cached = self._cache.get(subject)
        if cached is not None:
            return cached
        kv = await self._store()
        try:
            entry = await kv.get(subject)
            if not entry.value:
                raise KeyDestroyedError(f"the key of data subject {subject!r} was destroyed")
            found = self._unwrap(subject, entry.value)
        except KeyNotFoundError:
            if not create:
                raise KeyDestroyedError(f"no key for data subject {subject!r}") from None
            found = await self._create(kv, subject)
        self._cache.put(subject, found, len(subject) + len(found[0]) + KEY_ENTRY_OVERHEAD)
        return found

    async def _create(self, kv: Any, subject: str) -> tuple[str, AESGCM]:
        dek = AESGCM.generate_key(bit_length=256)
        nonce = secrets.token_bytes(12)
        body = _WrappedKey(key_id=secrets.token_hex(8), nonce=_b64(nonce).decode(),
                           wrapped=_b64(self._kek.encrypt(nonce, dek, subject.encode())).decode())
        try:
            await kv.create(subject, msgspec.json.encode(body))
        except KeyWrongLastSequenceError:
            # Another writer created it first: use theirs, so there is one key per subject.
            return self._unwrap(subject, (await kv.get(subject)).value)
        return body.key_id, AESGCM(dek)


def aad_for(tenant: str, task_id: str) -> bytes:
    """Associated data of every sealed value of one task: it opens only there."""
    return f"{tenant}/{task_id}".encode()


def _seal(key: tuple[str, AESGCM], subject: str, plaintext: bytes, aad: bytes) -> ev.Sealed:
    key_id, aes = key
    nonce = secrets.token_bytes(12)
    return ev.Sealed(subject=subject, key_id=key_id, nonce=_b64(nonce).decode(),
                     ciphertext=_b64(aes.encrypt(nonce, plaintext, aad)).decode())


async def seal_event(event: ev.EventBase, keyring: Keyring) -> ev.EventBase:
    """Return the event with every personal value replaced by its sealed form."""
    if not has_personal_content(event):
        return event
    subject = event.data_subject
    assert subject is not None  # guaranteed by core.validate.check_event
    key = await keyring.key_for(subject, create=True)
    aad = aad_for(event.tenant, event.task_id)
    p = ev.payload_of(event)
    if isinstance(p, ev.TurnAppended):
        assert p.content is not None
        sealed = _seal(key, subject, p.content.encode(), aad)
        p = msgspec.structs.replace(p, content=None, sealed=sealed)
    elif isinstance(p, ev.VariableSet):
        sealed = _seal(key, subject, _encode_value(p.value), aad)
        p = msgspec.structs.replace(p, value=None, sealed=sealed)
    elif isinstance(p, ev.StepSucceeded):
        outputs = [
            msgspec.structs.replace(o, value=None, sealed=_seal(
                key, subject, _encode_value(o.value), aad))
            if o.personal else o
            for o in p.outputs
        ]
        p = msgspec.structs.replace(p, outputs=outputs)
    elif isinstance(p, ev.MemoryProposed):
        sealed = _seal(key, subject, _encode_value(p.value), aad)
        p = msgspec.structs.replace(p, value=None, sealed=sealed)
    elif isinstance(p, ev.MemoryDecided) and p.record is not None:
        sealed = _seal(key, subject, _encode_value(p.record.value), aad)
        p = msgspec.structs.replace(p, record=msgspec.structs.replace(p.record, value=None,
                                                                      sealed=sealed))
    return msgspec.structs.replace(event, payload=p)


async def unseal(sealed: ev.Sealed, aad: bytes, keyring: Keyring) -> bytes | None:
    """Plaintext of a sealed value, or None when its subject's key is gone."""
    try:
        _, aes = await keyring.key_for(sealed.subject, create=False)
    except KeyDestroyedError:
        return None
    try:
        return aes.decrypt(_unb64(sealed.nonce), _unb64(sealed.ciphertext), aad)
    except InvalidTag as exc:
        raise AgentLedgerError("sealed value does not open with its subject key",
                               code="seal_mismatch") from exc


async def reveal(view: dict[str, Any], keyring: Keyring) -> dict[str, Any]:
    """Open the sealed values of a Working Memory view, in place.

    A value whose subject key was destroyed stays empty and is marked
    ``erased``: the data is gone, and the reader is told so rather than shown
    a gap.
    """
    aad = aad_for(view["tenant"], view["task_id"])

    async def open_one(item: dict[str, Any], field: str, decode_json: bool) -> None:
        sealed = item.get("sealed")
        if not sealed:
            return
        plain = await unseal(msgspec.convert(sealed, ev.Sealed), aad, keyring)
        if plain is None:
            item["erased"] = True
        else:
            item[field] = msgspec.json.decode(plain) if decode_json else plain.decode()
        item["sealed"] = None

    for turn in view["transcript"]:
        await open_one(turn, "content", decode_json=False)
    for variable in view["variables"].values():
        await open_one(variable, "value", decode_json=True)
    return view
