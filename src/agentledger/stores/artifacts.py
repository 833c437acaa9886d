"""Content-addressed artifact store on a JetStream Object Store bucket, scoped per tenant.

Events never carry large content: they carry an ``ArtifactRef`` pointing here.
An artifact is named by its tenant and the blake3 of its bytes, so one tenant
putting the same content twice stores it once and always yields the same URI,
``artifact://<bucket>/<tenant>/<blake3 hex>``, while two tenants never share an
object: dedupe never tells a tenant what another one stored. The bucket is
``<PREFIX>_ARTIFACTS`` (derived like the other per-prefix names in ``config``).

Only the services open this store (tenants have no JetStream access); agents
reach it through the ledger-writer's ``<prefix>.artifact.*`` endpoints. A
``tenant`` given to ``stat`` / ``get`` / ``verify`` scopes the lookup: a URI of
another tenant answers exactly like a missing artifact.

The Object Store checks its own SHA-256 digest; the tenant, blake3, schema,
producer and version of an artifact travel in the object's ``headers`` (stored
in the meta message's JSON body, Go-compatible ``{name: [value]}`` form), so
``stat`` answers from metadata alone. ``get`` re-hashes the content and compares
it with the name, the metadata and the caller's expected hash, which catches an
object replaced under the same name. ``check_refs`` lets the ledger-writer
refuse an event that cites an artifact which is not durably stored (or not the
one cited, or another tenant's), so an artifact is always in the store before
the event that points at it.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

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
from agentledger.contracts.artifacts import H_BLAKE3, H_PRODUCER, H_SCHEMA, H_TENANT, H_VERSION
from agentledger.contracts.codec import contract_error
from agentledger.erasure.erase import erase_few
from agentledger.errors import AgentLedgerError, ContractError, NotFoundError, UnavailableError

URI_SCHEME = "artifact://"
_URI = re.compile(r"^artifact://([A-Za-z0-9_-]+)/([A-Za-z0-9_-]{1,64})/([0-9a-f]{64})$")

# Object headers written by ``put`` (canonical MIME case, as Go's nats.Header expects) are
# the endpoints' header names: H_TENANT, H_BLAKE3, H_SCHEMA, H_PRODUCER, H_VERSION.

# Above this size hashing runs in a thread (blake3 releases the GIL) to keep the loop free.
_THREAD_HASH_BYTES = 1 << 20
# Bounded concurrency of the metadata lookups of ``check_refs``.
_STAT_CONCURRENCY = 32

_NATS_UNAVAILABLE = (nats.errors.TimeoutError, nats.errors.NoRespondersError,
                     nats.errors.ConnectionClosedError)


def artifacts_bucket(settings: Settings) -> str:
    """Object Store bucket of the artifacts: ``<PREFIX>_ARTIFACTS``."""
    return f"{settings.prefix.upper().replace('-', '_')}_ARTIFACTS"


class ArtifactAddress(NamedTuple):
    """What an artifact URI names: a bucket, the owning tenant and the content's blake3."""

    bucket: str
    tenant: str
    blake3: str

    @property
    def name(self) -> str:
        """The object's name in the bucket: ``<tenant>/<blake3>``."""
        return f"{self.tenant}/{self.blake3}"


def artifact_uri(bucket: str, tenant: str, blake3_hex: str) -> str:
    return f"{URI_SCHEME}{bucket}/{tenant}/{blake3_hex}"


def parse_uri(uri: str) -> ArtifactAddress:
    """Split ``artifact://<bucket>/<tenant>/<64 hex>`` into its bucket, tenant and blake3."""
    match = _URI.match(uri) if isinstance(uri, str) else None
    if match is None:
        raise ContractError(f"{uri!r} is not artifact://<bucket>/<tenant>/<64 lowercase hex "
                            "blake3>", code="invalid_artifact_uri")
    return ArtifactAddress(match.group(1), match.group(2), match.group(3))


def _hash_now(data: bytes) -> str:
    return blake3(data).hexdigest()


async def hash_content(data: bytes) -> str:
    """The blake3 hex of ``data``; large content is hashed in a thread, off the event loop."""
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
                 read_timeout: float = 30.0, max_bytes: int = 0) -> None:
        self._js = nc.jetstream()
        self.bucket = bucket
        self._replicas = replicas
        # Size limit of a bucket this store creates (0: none of its own).
        self._max_bytes = max_bytes
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
                            max_bytes=self._max_bytes or -1,
                            description="agentledger artifacts, named by blake3")
                    except BadRequestError:
                        # Created concurrently by another process: bind to theirs.
                        self._obs = await self._js.object_store(self.bucket)
                except _NATS_UNAVAILABLE as exc:
                    raise UnavailableError(f"artifact bucket {self.bucket}: {exc!r}") from exc
        return self._obs

    def _address(self, uri: str, tenant: str | None) -> ArtifactAddress | None:
        """The address ``uri`` names in this store; None when ``tenant`` may not see it."""
        address = parse_uri(uri)
        if address.bucket != self.bucket:
            raise ContractError(f"{uri} names bucket {address.bucket}; this store is {self.bucket}",
                                code="invalid_artifact_uri")
        return address if tenant is None or address.tenant == tenant else None

    def _ref(self, uri: str, address: ArtifactAddress, info: ObjectInfo) -> ev.ArtifactRef:
        """The ref an object's metadata describes; a mismatch if it is not ours or not intact."""
        if info.options is not None and info.options.link is not None:
            raise _mismatch(uri, "is a link, not content")
        headers = info.headers
        stored = _header(headers, H_BLAKE3)
        if stored != address.blake3:
            raise _mismatch(uri, f"metadata blake3 is {stored!r}, the name says {address.blake3}")
        owner = _header(headers, H_TENANT)
        if owner != address.tenant:
            raise _mismatch(uri, f"metadata tenant is {owner!r}, the name says {address.tenant}")
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

    async def put(self, data: bytes, *, tenant: str, schema: str, producer: str,
                  version: int = 1, before_write: Callable[[], None] | None = None) -> ev.ArtifactRef:
        """Store ``data`` under ``tenant`` and its blake3; return its ref, once durably stored.

        Identical content the same tenant already stored intact is not written
        again; the ref returned names the caller's schema/producer/version (the
        metadata keeps those of the first writer). An object under that name
        whose metadata is not intact is overwritten with the right bytes.
        ``before_write`` is called just before content is written (never for
        content already stored); what it raises stops the put.
        """
        data = bytes(data)
        digest = await hash_content(data)
        try:
            address = ArtifactAddress(self.bucket, msgspec.convert(tenant, ev.Token), digest)
        except msgspec.ValidationError as exc:
            raise ContractError(f"tenant {tenant!r} is not a token: {exc}",
                                code="invalid_token", path="$.tenant") from exc
        uri = artifact_uri(self.bucket, tenant, digest)
        try:
            ref = msgspec.convert({"uri": uri, "blake3": digest, "schema": schema, "producer": producer,
                                   "version": version, "size": len(data)}, ev.ArtifactRef)
        except msgspec.ValidationError as exc:
            raise contract_error(exc) from exc
        obs = await self._store(create=True)
        try:
            existing = await obs.get_info(address.name)
        except (ObjectNotFoundError, NatsNotFoundError, BadObjectMetaError):
            existing = None
        except _NATS_UNAVAILABLE as exc:
            raise UnavailableError(f"artifact {uri}: {exc!r}") from exc
        if existing is not None:
            try:
                if self._ref(uri, address, existing).size == len(data):
                    return ref
            except AgentLedgerError:
                pass  # not intact: rewrite it below
        if before_write is not None:
            before_write()
        meta = ObjectMeta(name=address.name, headers={
            H_TENANT: [tenant], H_BLAKE3: [digest], H_SCHEMA: [schema], H_PRODUCER: [producer],
            H_VERSION: [str(version)]})
        try:
            # Every chunk and the meta message are published with a JetStream ack awaited.
            await obs.put(address.name, data, meta=meta)
        except _NATS_UNAVAILABLE as exc:
            raise UnavailableError(f"artifact {uri} not stored: {exc!r}") from exc
        return ref

    async def erase(self, uri: str) -> bool:
        """Securely erase an artifact: every chunk message, then its metadata; whether it was there.

        The Object Store's own delete purges the chunks, which leaves their bytes in the
        block files until compaction; the stream's message-delete API overwrites them
        (``agentledger.erasure.erase``). Without its metadata the object does not exist any more.
        """
        address = parse_uri(uri)
        try:
            await self._store(create=False)
        except NotFoundError:
            return False
        stream = f"OBJ_{self.bucket}"
        meta_subject = f"$O.{self.bucket}.M.{base64.urlsafe_b64encode(address.name.encode()).decode()}"
        try:
            info = await self._info(uri, address.name)
        except AgentLedgerError:
            info = None  # metadata that does not parse: its chunks cannot be found by it
        js = self._js
        erased = 0
        if info is not None and info.nuid:
            erased += await erase_few(js, stream, f"$O.{self.bucket}.C.{info.nuid}")
        erased += await erase_few(js, stream, meta_subject)
        return info is not None or erased > 0

    async def names(self, tenant: str) -> list[str]:
        """URIs of every artifact of ``tenant`` in the store (deleted ones left out)."""
        try:
            obs = await self._store(create=False)
        except NotFoundError:
            return []
        try:
            infos = await obs.list(ignore_deletes=True)
        except (ObjectNotFoundError, NatsNotFoundError):
            return []
        mark = f"{tenant}/"
        return sorted(artifact_uri(self.bucket, tenant, i.name[len(mark):]) for i in infos
                      if i.name and i.name.startswith(mark))

    async def stat(self, uri: str, *, tenant: str | None = None) -> ev.ArtifactRef:
        """The ref of a stored artifact, from its metadata only (no content read).

        With ``tenant``, an artifact of another tenant is reported missing.
        """
        address = self._address(uri, tenant)
        info = await self._info(uri, address.name) if address is not None else None
        if address is None or info is None:
            raise _missing(uri)
        return self._ref(uri, address, info)

    async def get(self, uri: str, expected_blake3: str | None = None, *,
                  tenant: str | None = None) -> bytes:
        """The content of an artifact, re-hashed and checked against its name and metadata.

        With ``tenant``, an artifact of another tenant is reported missing.
        """
        data, _ = await self.read(uri, expected_blake3, tenant=tenant)
        return data

    async def read(self, uri: str, expected_blake3: str | None = None, *,
                   tenant: str | None = None) -> tuple[bytes, ev.ArtifactRef]:
        """``get``, also returning the ref the object's metadata describes."""
        address = self._address(uri, tenant)
        if address is None:
            raise _missing(uri)
        obs = await self._store(create=False)
        try:
            # nats-py's get waits for chunks with no deadline; a purged chunk would hang it.
            result = await asyncio.wait_for(obs.get(address.name), self._read_timeout)
        except (ObjectNotFoundError, NatsNotFoundError):
            raise _missing(uri) from None
        except DigestMismatchError as exc:
            raise _mismatch(uri, "content does not match the object store's SHA-256") from exc
        except BadObjectMetaError as exc:
            raise _mismatch(uri, "metadata does not parse") from exc
        except (TimeoutError, *_NATS_UNAVAILABLE) as exc:
            raise UnavailableError(f"artifact {uri} not read: {exc!r}") from exc
        ref = self._ref(uri, address, result.info)
        data = result.data or b""
        actual = await hash_content(data)
        if actual != ref.blake3:
            raise _mismatch(uri, f"content hashes to {actual}, metadata says {ref.blake3}")
        if expected_blake3 is not None and actual != expected_blake3:
            raise _mismatch(uri, f"content hashes to {actual}, expected {expected_blake3}")
        return data, ref

    async def verify(self, ref: ev.ArtifactRef, *, tenant: str | None = None) -> None:
        """Read the artifact and check it is exactly the one ``ref`` cites (hash and size)."""
        data = await self.get(ref.uri, expected_blake3=ref.blake3, tenant=tenant)
        if ref.size is not None and len(data) != ref.size:
            raise _mismatch(ref.uri, f"content is {len(data)} bytes, the ref says {ref.size}")


async def open(nc: Client, settings: Settings) -> ArtifactStore:
    """The artifact store of ``settings``' prefix, its bucket created if missing."""
    store = ArtifactStore(nc, artifacts_bucket(settings), replicas=settings.stream_replicas,
                          max_bytes=settings.max_artifact_store_bytes)
    await store._store(create=True)
    return store


def artifact_refs(events: Sequence[ev.EventBase]) -> list[tuple[str, str, ev.ArtifactRef]]:
    """Every ArtifactRef the events carry, with its JSON path in the request and its event's tenant."""
    found: list[tuple[str, str, ev.ArtifactRef]] = []
    for i, event in enumerate(events):
        payload = getattr(event, "payload", None)
        at = f"$.events[{i}].payload"
        if isinstance(payload, ev.StepSucceeded):
            found += [(f"{at}.artifacts[{j}]", event.tenant, ref)
                      for j, ref in enumerate(payload.artifacts)]
        elif isinstance(payload, ev.StepFailed) and payload.evidence is not None:
            found.append((f"{at}.evidence", event.tenant, payload.evidence))
        elif isinstance(payload, ev.ArtifactRegistered):
            found.append((f"{at}.artifact", event.tenant, payload.artifact))
    return found


def _owner(uri: str) -> str | None:
    """The tenant a URI names, None when it is malformed (``stat`` then says why)."""
    try:
        return parse_uri(uri).tenant
    except ContractError:
        return None


async def check_refs(store: ArtifactStore, events: Sequence[ev.EventBase]) -> None:
    """Refuse events citing an artifact that is not stored as cited, or is not their tenant's
    (``check_ref_list`` of their ``artifact_refs``)."""
    await check_ref_list(store, artifact_refs(events))


async def evidence_problems(store: ArtifactStore, tenant: str,
                            cited: Sequence[Sequence[ev.ArtifactRef]]) -> list[str | None]:
    """For each list of refs (the evidence of one memory proposal of ``tenant``), why it cannot be
    trusted, or None when every ref is stored, is the tenant's, and has the hash and size it says.
    Each distinct ref is looked up once, however many proposals cite it (a bulk import of
    episodes citing one report)."""
    distinct = {msgspec.json.encode(ref): ref for refs in cited for ref in refs}

    async def problem(ref: ev.ArtifactRef) -> str | None:
        try:
            await check_ref_list(store, [("", tenant, ref)])
        except ContractError as exc:
            return exc.code
        return None

    found = dict(zip(distinct, await asyncio.gather(*(problem(r) for r in distinct.values())), strict=True))
    out: list[str | None] = []
    for refs in cited:
        codes = [(i, found[msgspec.json.encode(ref)]) for i, ref in enumerate(refs)]
        out.append(next((f"evidence[{i}]: {code}" for i, code in codes if code is not None), None))
    return out


async def check_ref_list(store: ArtifactStore, refs: Sequence[tuple[str, str, ev.ArtifactRef]]) -> None:
    """Refuse refs ``(path, tenant, ref)`` citing an artifact that is not stored as cited, or is
    not the tenant's.

    Raises ``ContractError`` for the first offending ref in document order,
    with its path and code ``invalid_artifact_uri``, ``invalid_artifact_ref``
    (the URI names another tenant: refused from the URI alone, so the answer
    says nothing about what that tenant stored), ``artifact_missing`` or
    ``artifact_hash_mismatch`` (stored blake3 or size differs from the ref).
    Metadata only: content is not read. Store outages propagate as
    ``UnavailableError`` (retryable), not as contract errors.
    """
    if not refs:
        return
    gate = asyncio.Semaphore(_STAT_CONCURRENCY)

    async def stat(uri: str, tenant: str) -> ev.ArtifactRef | AgentLedgerError:
        async with gate:
            try:
                return await store.stat(uri, tenant=tenant)
            except (ContractError, NotFoundError) as exc:
                return exc
            except AgentLedgerError as exc:
                if exc.code == "artifact_hash_mismatch":
                    return exc
                raise

    keys = list(dict.fromkeys((ref.uri, tenant) for _, tenant, ref in refs
                              if _owner(ref.uri) in (None, tenant)))
    stored = dict(zip(keys, await asyncio.gather(*(stat(*key) for key in keys)), strict=True))
    for path, tenant, ref in refs:
        if (ref.uri, tenant) not in stored:
            raise ContractError(f"{ref.uri} is not an artifact of tenant {tenant!r}; an event may "
                                "only cite artifacts of its own tenant", code="invalid_artifact_ref",
                                path=path)
        found = stored[(ref.uri, tenant)]
        if isinstance(found, AgentLedgerError):
            raise ContractError(found.message, code=found.code, path=path)
        if found.blake3 != ref.blake3:
            raise ContractError(f"{ref.uri} is stored with blake3 {found.blake3}, the ref says "
                                f"{ref.blake3}", code="artifact_hash_mismatch", path=path)
        if ref.size is not None and found.size != ref.size:
            raise ContractError(f"{ref.uri} is stored with {found.size} bytes, the ref says "
                                f"{ref.size}", code="artifact_hash_mismatch", path=path)
