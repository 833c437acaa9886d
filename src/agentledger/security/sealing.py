"""Crypto-shredding: personal content sealed with a per-data-subject key.

Each data subject (a pseudonymous token chosen by the platform, never a name or
an e-mail) gets its own random 256-bit data key. Personal values are encrypted
with AES-256-GCM under that key before they enter the ledger; destroying the key
makes every copy in the log, the projections and any backup unreadable without
rewriting them, and replay keeps working because the ciphertext stays in place.

Data keys live in a JetStream key-value bucket, wrapped (AES-GCM) by a key-
encryption key that never leaves the host and never lives in the data folder it
protects (``Settings.kek_path``: ``AGENTLEDGER_KEK_FILE``, or a file named for the
data folder under ``$XDG_CONFIG_HOME/agentledger/keks``), so a copy of the data
folder, a backup of the JetStream store, cannot open what it holds. The associated data binds every ciphertext to its
tenant and task, so a sealed value copied into another task fails to open.

Destroying a key (``Keyring.destroy``) securely erases its KV message (the
JetStream message-delete API overwrites the record in the block file unless
``no_erase`` is asked for; a KV delete or purge alone leaves the bytes there
until compaction), then leaves a purge marker so the key reads as gone. A key
made for the subject afterwards gets a fresh key id, and ``unseal`` tells a
value sealed under an older, destroyed key (erased) from one that does not open
under the key it names (``seal_mismatch``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import nats.js.errors
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from nats.aio.client import Client
from nats.js import api
from nats.js.errors import (
    APIError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.validate import has_personal_content
from agentledger.erasure.erase import already_gone, delete_denied, erase_seqs, kv_removed, live_kv_keys, scan_subject
from agentledger.errors import AgentLedgerError, KeyDestroyedError, UnavailableError
from agentledger.security.kek_epochs import TASK_EPOCH, KekRing
from agentledger.security.private_files import write_private
from agentledger.shell.bounded import ByteLRU
from agentledger.stores.buckets import open_kv

# The first character of a task key's subject (``task_seal.SLOT_MARK``): no token has it.
TASK_SLOT = "="

_b64 = base64.b64encode
_unb64 = base64.b64decode
_encode_value = msgspec.json.Encoder().encode


class _WrappedKey(msgspec.Struct, frozen=True):
    key_id: str
    nonce: str
    wrapped: str
    # The key-encryption-key epoch it is wrapped under (``kek_epochs``; 0: before epochs).
    epoch: int = 0


class DestroyReceipt(msgspec.Struct, frozen=True):
    """What ``Keyring.destroy`` did for one data subject.

    ``key_ids``: the ids of the wrapped keys destroyed (empty when the subject
    had none); ``erased_seqs``: the KV stream's sequences securely erased (data
    messages and earlier markers); ``erased``: True when the bytes were
    overwritten, False on a bucket made before keyrings made their own (its
    stream denies message deletes, so the key was only purged and its bytes
    stay in the block file until compaction); ``evicted``: whether this
    keyring's cache held the key. Caches of other processes are not reached.
    """

    subject: str
    key_ids: list[str]
    erased_seqs: list[int]
    erased: bool
    evicted: bool


class RewrapReport(msgspec.Struct, frozen=True):
    """What ``Keyring.rewrap`` did: ``epoch`` the current epoch; ``rewrapped`` keys moved to it;
    ``kept`` keys already under it; ``unreadable`` keys under a retired epoch (gone);
    ``raced`` keys written by someone else meanwhile (a next pass takes them)."""

    epoch: int
    rewrapped: int
    kept: int
    unreadable: int
    raced: int


# JetStream's "wrong last sequence" errors (a concurrent write to the subject).
_WRONG_LAST_SEQ = (10071, 10164)
# Rounds of erase-then-mark before destroy gives up on a subject that keeps being rewritten.
_DESTROY_ROUNDS = 5


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


def kek_of(settings: Settings, *, create: bool = True) -> KekRing:
    """The key-encryption-key epochs of ``settings``; a key left inside the data folder by an
    older version is moved out first (a key that stayed there would open every copy of the folder)."""
    path, legacy = settings.kek_path, settings.legacy_kek_path
    if legacy.exists() and not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(legacy.read_bytes())
            f.flush()
            os.fsync(f.fileno())
        legacy.unlink()
    if create:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return KekRing.load(path, create=create)


# Marker keys by key-encryption-key path, derived once per process (the writer asks on every append).
_MARKER_KEYS: dict[Path, bytes] = {}


def marker_key_of(settings: Settings) -> bytes:
    """The key of the secret-redaction markers (``core.detect.marker``) and of personal values'
    digests: derived from the first key-encryption key, so it lives outside the data folder with
    it, survives restarts, is made on first start with it, and a copy of the data folder cannot
    confirm a guessed secret against a marker. Kept in a file of its own beside the key
    (``<kek_path>.marker``) from its first use on, so that retiring that key-encryption-key epoch
    (``kek_epochs``) changes no marker and no digest."""
    path = settings.kek_path
    key = _MARKER_KEYS.get(path)
    if key is None:
        stored = path.with_name(path.name + ".marker")
        if stored.exists():
            key = _unb64(stored.read_bytes().strip())
        else:
            # Imported here: the detectors' package is heavy, and this runs once per installation.
            # The package first (as a service's warm-up thread imports it), never a submodule
            # first, which takes the import locks in the other order.
            from agentledger.core import detect  # noqa: PLC0415

            kek_of(settings)  # made, or moved out of the data folder, as the writer would
            key = detect.secrets.derive_marker_key(load_kek(path))
            write_private(stored, _b64(key).decode())
        _MARKER_KEYS[path] = key
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

    def __init__(self, nc: Client, bucket: str, keks: KekRing, *, max_bytes: int = 0,
                 cache_bytes: int = KEY_CACHE_BYTES, replicas: int = 1) -> None:
        self._js = nc.jetstream()
        self._bucket = bucket
        self._max_bytes = max_bytes
        self._replicas = replicas
        self._keks = keks
        self._cache: ByteLRU[str, tuple[str, AESGCM]] = ByteLRU(cache_bytes)
        self._kv: Any = None

    @property
    def cache(self) -> ByteLRU[str, tuple[str, AESGCM]]:
        """The unwrapped keys held in memory (for operators' figures and tests)."""
        return self._cache

    async def _store(self) -> Any:
        if self._kv is None:
            self._kv = await open_kv(self._js, self._bucket, self._max_bytes, self._replicas)
        return self._kv

    def _unwrap(self, subject: str, raw: bytes) -> tuple[str, AESGCM]:
        w = msgspec.json.decode(raw, type=_WrappedKey)
        kek = self._keks.key_of(w.epoch)
        if kek is None:
            # A copy of the bucket from before a rotation (a restored backup), or a key the
            # rotation missed: its key-encryption key is destroyed, so the key is gone.
            raise KeyDestroyedError(f"the key of data subject {subject!r} is wrapped under retired "
                                    f"key-encryption-key epoch {w.epoch}")
        dek = kek.decrypt(_unb64(w.nonce), _unb64(w.wrapped), subject.encode())
        return w.key_id, AESGCM(dek)

    async def key_for(self, tenant: str, subject: str, *, create: bool) -> tuple[str, AESGCM]:
        """The tenant's data key of ``subject``; created (race-safely, by CAS) when ``create``.

        Keys are per (tenant, subject): two tenants naming the same pseudonymous token
        hold two keys, so one tenant's forget request never destroys another's data. A
        key stored before keys were per tenant (under the bare subject) is still read.
        """
        name = key_name(tenant, subject)
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        kv = await self._store()
        found: tuple[str, AESGCM] | None = None
        for stored in (name, subject):
            try:
                entry = await kv.get(stored)
            except KeyNotFoundError:
                continue
            if not entry.value:
                raise KeyDestroyedError(f"the key of data subject {subject!r} was destroyed")
            found = self._unwrap(stored, entry.value)
            break
        if found is None and not create:
            found = await self._leader_has(name)
        if found is None:
            if not create:
                raise KeyDestroyedError(f"no key for data subject {subject!r}")
            found = await self._create(kv, name)
        self._cache.put(name, found, len(name) + len(found[0]) + KEY_ENTRY_OVERHEAD)
        return found

    def evict(self, tenant: str, subject: str | None = None) -> int:
        """Drop cached keys of one subject of ``tenant``, or of all its subjects; how many."""
        if subject is not None:
            return int(self._cache.pop(key_name(tenant, subject)) is not None)
        mark = f"{tenant}."
        held = [k for k in self._cache.keys() if k.startswith(mark)]  # noqa: SIM118 - not a dict
        return sum(self._cache.pop(k) is not None for k in held)

    async def subjects(self, tenant: str, only: str | None = None) -> list[str]:
        """The data subjects of ``tenant`` that hold a key (for a tenant-wide forget), or of
        them just ``only``.

        A scan of the tenant's own keys, each one's last operation deciding, rather than the
        whole bucket's key list (every tenant's keys, through a watcher). A scan that cannot
        finish raises ``unavailable``: a forget's plan never takes a short list for the list.
        """
        await self._store()
        prefix = f"{tenant}."
        keys = await live_kv_keys(self._js, self._bucket, prefix + (only or ">"))
        return [key[len(prefix):] for key in keys if not key.startswith(prefix + TASK_SLOT)]

    async def task_keys(self, tenant: str) -> list[str]:
        """The tasks of ``tenant`` whose messages are sealed under a key that still exists
        (``security.task_seal``), for a tenant-wide forget."""
        await self._store()
        prefix = f"{tenant}.{TASK_SLOT}"  # a wildcard matches whole tokens only: filtered here
        return [key[len(prefix):] for key in await live_kv_keys(self._js, self._bucket, f"{tenant}.*")
                if key.startswith(prefix)]

    def cached(self, tenant: str, subject: str) -> tuple[str, AESGCM] | None:
        """The key of ``subject`` if this process holds it now (no I/O)."""
        return self._cache.get(key_name(tenant, subject))

    async def destroy_subject(self, tenant: str, subject: str) -> DestroyReceipt:
        """Destroy the tenant's key of ``subject`` and a key stored for it before keys were
        per tenant (such a key is shared by every tenant that used the token: destroying it
        errs on the side of forgetting)."""
        scoped = await self.destroy(key_name(tenant, subject))
        try:
            await (await self._store()).get(subject)
        except KeyNotFoundError:
            return msgspec.structs.replace(scoped, subject=subject)
        legacy = await self.destroy(subject)
        return DestroyReceipt(subject=subject, key_ids=scoped.key_ids + legacy.key_ids,
                              erased_seqs=scoped.erased_seqs + legacy.erased_seqs,
                              erased=scoped.erased and legacy.erased,
                              evicted=scoped.evicted or legacy.evicted)

    async def destroy(self, subject: str) -> DestroyReceipt:
        """Erase the wrapped key stored under ``subject`` (a ``key_name``), leaving nothing.

        Every message of the key's KV subject is deleted through the stream's
        message-delete API, which overwrites the bytes in the block file (secure
        erase, the API's default); then a purge marker is written expecting no
        message on the subject, so a key created meanwhile by another writer is
        erased in the next round instead of being rolled up (a roll-up removes
        without erasing); the marker, its proof done, is erased too. This
        keyring's cached copy is evicted.
        """
        await self._store()  # the bucket's stream must exist; it is then addressed directly
        stream = f"KV_{self._bucket}"
        kv_subject = f"$KV.{self._bucket}.{subject}"
        key_ids: list[str] = []
        erased: list[int] = []
        evicted = self._cache.pop(subject) is not None
        for _ in range(_DESTROY_ROUNDS):
            while True:
                try:
                    msg = await self._js.get_last_msg(stream, kv_subject)
                except NotFoundError:
                    break
                if msg.data and not kv_removed(msg.headers):
                    with contextlib.suppress(msgspec.DecodeError):
                        key_ids.append(msgspec.json.decode(msg.data, type=_WrappedKey).key_id)
                assert msg.seq is not None
                try:
                    await self._js.delete_msg(stream, msg.seq)  # secure erase: the API's default
                except NotFoundError:
                    pass  # erased by a concurrent destroy
                except APIError as exc:
                    if delete_denied(exc):
                        return await self._purge_only(subject, key_ids, evicted)
                    if not already_gone(exc):
                        raise
                erased.append(msg.seq)
            try:
                marker = await self._js.publish(kv_subject, b"", headers={
                    "KV-Operation": "PURGE", api.Header.ROLLUP: "sub",
                    api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})
            except APIError as exc:
                if exc.err_code in _WRONG_LAST_SEQ:
                    continue  # a key was written meanwhile: erase it too
                raise
            # The marker proved the subject empty at that instant; it goes too, so nothing of
            # the key (not even the subject's name in a marker) stays in the bucket.
            await erase_seqs(self._js, stream, [marker.seq])
            break
        else:
            raise AgentLedgerError(f"the key of data subject {subject!r} kept being rewritten "
                                   "while it was destroyed", code="conflict")
        # A key_for that was reading while the key was erased may have cached it again.
        evicted = self._cache.pop(subject) is not None or evicted
        return DestroyReceipt(subject=subject, key_ids=key_ids, erased_seqs=erased, erased=True,
                              evicted=evicted)

    async def _purge_only(self, subject: str, key_ids: list[str],
                          evicted: bool) -> DestroyReceipt:
        """A bucket whose stream denies message deletes: purge the key, and say it is not erased."""
        await (await self._store()).purge(subject)
        evicted = self._cache.pop(subject) is not None or evicted
        return DestroyReceipt(subject=subject, key_ids=key_ids, erased_seqs=[], erased=False,
                              evicted=evicted)

    def _wrap(self, subject: str, key_id: str, dek: bytes) -> _WrappedKey:
        # A task's key is wrapped under a key no rotation retires (``KekRing.task_wrap``).
        epoch, kek = self._keks.task_wrap() if f".{TASK_SLOT}" in subject else self._keks.current()
        nonce = secrets.token_bytes(12)
        return _WrappedKey(key_id=key_id, nonce=_b64(nonce).decode(), epoch=epoch,
                           wrapped=_b64(kek.encrypt(nonce, dek, subject.encode())).decode())

    async def _wrapped(self) -> dict[str, tuple[int, bytes]] | None:
        """Every live data key of the bucket: its revision and wrapped bytes; None: no bucket."""
        prefix = f"$KV.{self._bucket}."
        last: dict[str, tuple[int, bytes]] = {}
        try:
            async for msg in scan_subject(self._js, f"KV_{self._bucket}", prefix + ">"):
                if kv_removed(msg.headers) or not msg.data:
                    last.pop(msg.subject[len(prefix):], None)
                else:
                    last[msg.subject[len(prefix):]] = (msg.metadata.sequence.stream, msg.data)
        except nats.js.errors.NotFoundError:
            return None
        return last

    async def wrapped_epochs(self) -> list[int]:
        """The key-encryption-key epochs the bucket's live data keys are wrapped under (what a
        backup of it needs to open, ``agentledger backup``'s manifest)."""
        last = await self._wrapped() or {}
        epochs = {msgspec.json.decode(raw, type=_WrappedKey).epoch for _, raw in last.values()}
        return sorted(epochs - {TASK_EPOCH})  # task keys' wrap is no epoch of the ring

    async def rewrap(self) -> RewrapReport:
        """Wrap every key of the bucket (every tenant's) that an older epoch wraps under the
        current one (``kek_epochs``): after it, retiring the older epochs loses no live key.

        Each key is updated against the revision it was read at, so a key destroyed or made
        meanwhile is never overwritten (it is counted and left to the next pass). A key whose
        epoch is already retired cannot be opened any more and is counted ``unreadable``.
        """
        kv = await self._store()
        current = self._keks.current_epoch
        last = await self._wrapped()
        if last is None:
            return RewrapReport(epoch=current, rewrapped=0, kept=0, unreadable=0, raced=0)
        rewrapped = kept = unreadable = raced = 0
        for name, (revision, raw) in sorted(last.items()):
            w = msgspec.json.decode(raw, type=_WrappedKey)
            if w.epoch in (current, TASK_EPOCH):
                kept += 1
                continue
            kek = self._keks.key_of(w.epoch)
            if kek is None:
                unreadable += 1
                continue
            dek = kek.decrypt(_unb64(w.nonce), _unb64(w.wrapped), name.encode())
            try:
                await kv.update(name, msgspec.json.encode(self._wrap(name, w.key_id, dek)), last=revision)
            except KeyWrongLastSequenceError:
                raced += 1
                continue
            rewrapped += 1
        return RewrapReport(epoch=current, rewrapped=rewrapped, kept=kept, unreadable=unreadable, raced=raced)

    async def _leader_has(self, subject: str) -> tuple[str, AESGCM] | None:
        """The key stored under ``subject`` as the bucket's stream leader holds it.

        A bucket get is a direct get, which any replica may answer: on a cluster a follower
        that is behind (just back from a pause) does not yet hold a key made a moment ago. A
        reader takes "no key" for "destroyed" (the message is skipped as erased), so a miss is
        asked again of the leader, which holds every acknowledged write, before it counts.
        """
        try:
            msg = await self._js.get_msg(f"KV_{self._bucket}", subject=f"$KV.{self._bucket}.{subject}")
        except NotFoundError:
            return None
        if not msg.data or kv_removed(msg.headers):
            raise KeyDestroyedError(f"the key of data subject {subject!r} was destroyed")
        return self._unwrap(subject, msg.data)

    async def _create(self, kv: Any, subject: str) -> tuple[str, AESGCM]:
        dek = AESGCM.generate_key(bit_length=256)
        body = self._wrap(subject, secrets.token_hex(8), dek)
        try:
            await kv.create(subject, msgspec.json.encode(body))
        except KeyWrongLastSequenceError:
            # Another writer created it first: use theirs, so there is one key per subject
            # (asked of the leader: a follower that answered "none" a moment ago may still).
            found = await self._leader_has(subject)
            if found is None:
                raise UnavailableError("a task or subject key was made and removed at once; "
                                       "try again") from None
            return found
        return body.key_id, AESGCM(dek)


def key_name(tenant: str, subject: str) -> str:
    """The KV key of a tenant's data subject (both are tokens: no dots inside)."""
    return f"{tenant}.{subject}"


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
    key = await keyring.key_for(event.tenant, subject, create=True)
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


async def unseal(sealed: ev.Sealed, tenant: str, task_id: str, keyring: Keyring) -> bytes | None:
    """Plaintext of a sealed value, or None when the key it was sealed under is gone.

    Gone: the subject has no key, or its key has another id (the one the value
    names was destroyed, and a new key made since). A value that does not open
    under the very key it names raises ``seal_mismatch``.
    """
    aad = aad_for(tenant, task_id)
    try:
        key_id, aes = await keyring.key_for(tenant, sealed.subject, create=False)
        if key_id != sealed.key_id:
            # The cached key may be older than the value (another process destroyed and
            # recreated it): ask the bucket once before calling the value erased.
            keyring.evict(tenant, sealed.subject)
            key_id, aes = await keyring.key_for(tenant, sealed.subject, create=False)
    except KeyDestroyedError:
        return None
    if key_id != sealed.key_id:
        return None
    try:
        return aes.decrypt(_unb64(sealed.nonce), _unb64(sealed.ciphertext), aad)
    except InvalidTag as exc:
        raise AgentLedgerError("sealed value does not open with its subject key",
                               code="seal_mismatch") from exc


async def reveal(view: dict[str, Any], keyring: Keyring,
                 may_open: Callable[[str], bool] | None = None) -> dict[str, Any]:
    """Open the sealed values of a Working Memory view, in place.

    A value whose subject key was destroyed stays empty and is marked
    ``erased``: the data is gone, and the reader is told so rather than shown
    a gap. With ``may_open``, a value whose data subject it refuses stays sealed
    and is marked ``withheld``: personal data is opened only for whom the reader
    acts (an agent bound to that user).
    """
    tenant, task_id = view["tenant"], view["task_id"]

    async def open_one(item: dict[str, Any], field: str, decode_json: bool) -> None:
        sealed = item.get("sealed")
        if not sealed:
            return
        if may_open is not None and not may_open(sealed.get("subject", "")):
            item["withheld"] = True
            return
        plain = await unseal(msgspec.convert(sealed, ev.Sealed), tenant, task_id, keyring)
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
