"""Content-addressed artifact store on a JetStream Object Store bucket.

Events never carry large content: they carry an ``ArtifactRef`` pointing here.
An artifact is named by the blake3 of its bytes, so putting the same content
twice stores it once and always yields the same URI,
``artifact://<bucket>/<blake3 hex>``. The bucket is ``<PREFIX>_ARTIFACTS``
(derived like the other per-prefix names in ``config``).

The Object Store checks its own SHA-256 digest; the blake3, schema, producer
and version of an artifact travel in the object's ``headers`` (stored in the
meta message's JSON body, Go-compatible ``{name: [value]}`` form), so ``stat``
answers from metadata alone. ``get`` re-hashes the content and compares it with
the name, the metadata and the caller's expected hash, which catches an object
replaced under the same name. ``check_refs`` lets the ledger-writer refuse an
event that cites an artifact which is not durably stored (or not the one cited),
so an artifact is always in the store before the event that points at it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import msgspec
import nats.errors
from blake3 import blake3
from nats.aio.client import Client
from nats.js.api import ObjectInfo, ObjectMeta, StorageType
from nats.js.errors import (
    BadObjectMetaError,
    BadRequestError,
    BucketNotFoundError,
    DigestMismatchError,
    ObjectNotFoundError,
)
from nats.js.errors import (
    NotFoundError as NatsNotFoundError,
)
from nats.js.object_store import ObjectStore

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.codec import contract_error
from agentledger.errors import AgentLedgerError, ContractError, NotFoundError, UnavailableError

URI_SCHEME = "artifact://"
_URI = re.compile(r"^artifact://([A-Za-z0-9_-]+)/([0-9a-f]{64})$")

# Object headers written by ``put`` (canonical MIME case, as Go's nats.Header expects).
H_BLAKE3 = "Agentledger-Blake3"
H_SCHEMA = "Agentledger-Schema"
H_PRODUCER = "Agentledger-Producer"
H_VERSION = "Agentledger-Version"

# Above this size hashing runs in a thread (blake3 releases the GIL) to keep the loop free.
_THREAD_HASH_BYTES = 1 << 20
# Bounded concurrency of the metadata lookups of ``check_refs``.
_STAT_CONCURRENCY = 32

_NATS_UNAVAILABLE = (nats.errors.TimeoutError, nats.errors.NoRespondersError,
                     nats.errors.ConnectionClosedError)


def artifacts_bucket(settings: Settings) -> str:
    """Object Store bucket of the artifacts: ``<PREFIX>_ARTIFACTS``."""
    return f"{settings.prefix.upper().replace('-', '_')}_ARTIFACTS"


def artifact_uri(bucket: str, blake3_hex: str) -> str:
    return f"{URI_SCHEME}{bucket}/{blake3_hex}"


def parse_uri(uri: str) -> tuple[str, str]:
    """Split ``artifact://<bucket>/<64 hex>`` into (bucket, object name)."""
    match = _URI.match(uri) if isinstance(uri, str) else None
    if match is None:
        raise ContractError(f"{uri!r} is not artifact://<bucket>/<64 lowercase hex blake3>",
                            code="invalid_artifact_uri")
    return match.group(1), match.group(2)


def _hash_now(data: bytes) -> str:
    return blake3(data).hexdigest()


async def _hash(data: bytes) -> str:
    if len(data) >= _THREAD_HASH_BYTES:
        return await asyncio.to_thread(_hash_now, data)
    return _hash_now(data)


def _header(headers: dict[str, Any] | None, name: str) -> str | None:
    """One header value; accepts the Go form ``[value]`` and a bare string."""
    if not headers:
        return None
    value = headers.get(name)
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, str) else None


def _mismatch(uri: str, message: str) -> AgentLedgerError:
    return AgentLedgerError(f"artifact {uri}: {message}", code="artifact_hash_mismatch")


def _missing(uri: str) -> NotFoundError:
    return NotFoundError(f"artifact {uri} is not in the store", code="artifact_missing")


class ArtifactStore:
    """Put, stat, read and verify content-addressed artifacts in one Object Store bucket."""

    def __init__(self, nc: Client, bucket: str, *, replicas: int = 1,
                 read_timeout: float = 30.0) -> None:
        self._js = nc.jetstream()
        self.bucket = bucket
        self._replicas = replicas
        self._read_timeout = read_timeout
        self._obs: ObjectStore | None = None
        self._lock = asyncio.Lock()

    async def _store(self, *, create: bool) -> ObjectStore:
        """The bound Object Store; created (file storage) when missing and ``create``."""
        if self._obs is not None:
            return self._obs
        async with self._lock:
            if self._obs is None:
                try:
                    self._obs = await self._js.object_store(self.bucket)
                except BucketNotFoundError:
                    if not create:
                        raise NotFoundError(f"artifact bucket {self.bucket} does not exist",
                                            code="artifact_missing") from None
                    try:
                        self._obs = await self._js.create_object_store(
                            self.bucket, storage=StorageType.FILE, replicas=self._replicas,
                            description="agentledger artifacts, named by blake3")
                    except BadRequestError:
                        # Created concurrently by another process: bind to theirs.
                        self._obs = await self._js.object_store(self.bucket)
                except _NATS_UNAVAILABLE as exc:
                    raise UnavailableError(f"artifact bucket {self.bucket}: {exc!r}") from exc
        return self._obs

    def _name(self, uri: str) -> str:
        bucket, name = parse_uri(uri)
        if bucket != self.bucket:
            raise ContractError(f"{uri} names bucket {bucket}; this store is {self.bucket}",
                                code="invalid_artifact_uri")
        return name

    def _ref(self, uri: str, name: str, info: ObjectInfo) -> ev.ArtifactRef:
        """The ref an object's metadata describes; a mismatch if it is not ours or not intact."""
        if info.options is not None and info.options.link is not None:
            raise _mismatch(uri, "is a link, not content")
        headers = info.headers
        stored = _header(headers, H_BLAKE3)
        if stored != name:
            raise _mismatch(uri, f"metadata blake3 is {stored!r}, the name says {name}")
        try:
            return msgspec.convert({
                "uri": uri, "blake3": stored, "schema": _header(headers, H_SCHEMA),
                "producer": _header(headers, H_PRODUCER),
                "version": int(_header(headers, H_VERSION) or "1"), "size": info.size or 0,
            }, ev.ArtifactRef)
        except (msgspec.ValidationError, ValueError) as exc:
            raise _mismatch(uri, f"metadata is not what ArtifactStore.put writes: {exc}") from exc

    async def _info(self, uri: str, name: str) -> ObjectInfo | None:
        obs = await self._store(create=False)
        try:
            return await obs.get_info(name)
        except (ObjectNotFoundError, NatsNotFoundError):
            return None
        except BadObjectMetaError as exc:
            raise _mismatch(uri, "metadata does not parse") from exc
        except _NATS_UNAVAILABLE as exc:
            raise UnavailableError(f"artifact {uri}: {exc!r}") from exc

    async def put(self, data: bytes, *, schema: str, producer: str,
                  version: int = 1) -> ev.ArtifactRef:
        """Store ``data`` under its blake3 and return its ref, once durably stored.

        Identical content already stored intact is not written again; the ref
        returned names the caller's schema/producer/version (the metadata keeps
        those of the first writer). An object under that name whose metadata is
        not intact is overwritten with the right bytes.
        """
        data = bytes(data)
        digest = await _hash(data)
        uri = artifact_uri(self.bucket, digest)
        try:
            ref = msgspec.convert({"uri": uri, "blake3": digest, "schema": schema, "producer": producer,
                                   "version": version, "size": len(data)}, ev.ArtifactRef)
        except msgspec.ValidationError as exc:
            raise contract_error(exc) from exc
        obs = await self._store(create=True)
        try:
            existing = await obs.get_info(digest)
        except (ObjectNotFoundError, NatsNotFoundError, BadObjectMetaError):
            existing = None
        except _NATS_UNAVAILABLE as exc:
            raise UnavailableError(f"artifact {uri}: {exc!r}") from exc
        if existing is not None:
            try:
                if self._ref(uri, digest, existing).size == len(data):
                    return ref
            except AgentLedgerError:
                pass  # not intact: rewrite it below
        meta = ObjectMeta(name=digest, headers={
            H_BLAKE3: [digest], H_SCHEMA: [schema], H_PRODUCER: [producer],
            H_VERSION: [str(version)]})
        try:
            # Every chunk and the meta message are published with a JetStream ack awaited.
            await obs.put(digest, data, meta=meta)
        except _NATS_UNAVAILABLE as exc:
            raise UnavailableError(f"artifact {uri} not stored: {exc!r}") from exc
        return ref

    async def stat(self, uri: str) -> ev.ArtifactRef:
        """The ref of a stored artifact, from its metadata only (no content read)."""
        name = self._name(uri)
        info = await self._info(uri, name)
        if info is None:
            raise _missing(uri)
        return self._ref(uri, name, info)

    async def get(self, uri: str, expected_blake3: str | None = None) -> bytes:
        """The content of an artifact, re-hashed and checked against its name and metadata."""
        name = self._name(uri)
        obs = await self._store(create=False)
        try:
            # nats-py's get waits for chunks with no deadline; a purged chunk would hang it.
            result = await asyncio.wait_for(obs.get(name), self._read_timeout)
        except (ObjectNotFoundError, NatsNotFoundError):
            raise _missing(uri) from None
        except DigestMismatchError as exc:
            raise _mismatch(uri, "content does not match the object store's SHA-256") from exc
        except BadObjectMetaError as exc:
            raise _mismatch(uri, "metadata does not parse") from exc
        except (TimeoutError, *_NATS_UNAVAILABLE) as exc:
            raise UnavailableError(f"artifact {uri} not read: {exc!r}") from exc
        ref = self._ref(uri, name, result.info)
        data = result.data or b""
        actual = await _hash(data)
        if actual != ref.blake3:
            raise _mismatch(uri, f"content hashes to {actual}, metadata says {ref.blake3}")
        if expected_blake3 is not None and actual != expected_blake3:
            raise _mismatch(uri, f"content hashes to {actual}, expected {expected_blake3}")
        return data

    async def verify(self, ref: ev.ArtifactRef) -> None:
        """Read the artifact and check it is exactly the one ``ref`` cites (hash and size)."""
        data = await self.get(ref.uri, expected_blake3=ref.blake3)
        if ref.size is not None and len(data) != ref.size:
            raise _mismatch(ref.uri, f"content is {len(data)} bytes, the ref says {ref.size}")


async def open(nc: Client, settings: Settings) -> ArtifactStore:
    """The artifact store of ``settings``' prefix, its bucket created if missing."""
    store = ArtifactStore(nc, artifacts_bucket(settings), replicas=settings.stream_replicas)
    await store._store(create=True)
    return store


def artifact_refs(events: Sequence[ev.EventBase]) -> list[tuple[str, ev.ArtifactRef]]:
    """Every ArtifactRef the events carry, with its JSON path in the request."""
    found: list[tuple[str, ev.ArtifactRef]] = []
    for i, event in enumerate(events):
        payload = getattr(event, "payload", None)
        at = f"$.events[{i}].payload"
        if isinstance(payload, ev.StepSucceeded):
            found += [(f"{at}.artifacts[{j}]", ref) for j, ref in enumerate(payload.artifacts)]
        elif isinstance(payload, ev.StepFailed) and payload.evidence is not None:
            found.append((f"{at}.evidence", payload.evidence))
        elif isinstance(payload, ev.ArtifactRegistered):
            found.append((f"{at}.artifact", payload.artifact))
    return found


async def check_refs(store: ArtifactStore, events: Sequence[ev.EventBase]) -> None:
    """Refuse events citing an artifact that is not stored as cited.

    Raises ``ContractError`` for the first offending ref in document order,
    with its path and code ``invalid_artifact_uri``, ``artifact_missing`` or
    ``artifact_hash_mismatch`` (stored blake3 or size differs from the ref).
    Metadata only: content is not read. Store outages propagate as
    ``UnavailableError`` (retryable), not as contract errors.
    """
    refs = artifact_refs(events)
    if not refs:
        return
    gate = asyncio.Semaphore(_STAT_CONCURRENCY)

    async def stat(uri: str) -> ev.ArtifactRef | AgentLedgerError:
        async with gate:
            try:
                return await store.stat(uri)
            except (ContractError, NotFoundError) as exc:
                return exc
            except AgentLedgerError as exc:
                if exc.code == "artifact_hash_mismatch":
                    return exc
                raise

    uris = list(dict.fromkeys(ref.uri for _, ref in refs))
    stored = dict(zip(uris, await asyncio.gather(*(stat(u) for u in uris)), strict=True))
    for path, ref in refs:
        found = stored[ref.uri]
        if isinstance(found, AgentLedgerError):
            raise ContractError(found.message, code=found.code, path=path)
        if found.blake3 != ref.blake3:
            raise ContractError(f"{ref.uri} is stored with blake3 {found.blake3}, the ref says "
                                f"{ref.blake3}", code="artifact_hash_mismatch", path=path)
        if ref.size is not None and found.size != ref.size:
            raise ContractError(f"{ref.uri} is stored with {found.size} bytes, the ref says "
                                f"{ref.size}", code="artifact_hash_mismatch", path=path)
