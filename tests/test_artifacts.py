"""The content-addressed artifact store against a real NATS JetStream server.

Content goes in once per blake3, comes back only if it still hashes to its
name, and events citing artifacts are refused (with the exact path) unless the
cited artifact is durably stored as cited.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import nats
import pytest
from blake3 import blake3
from nats.aio.client import Client as NatsClient
from nats.js.api import ObjectMeta

from agentledger import artifacts
from agentledger.artifacts import ArtifactStore, artifacts_bucket, check_refs, parse_uri
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.codec import decode_event
from agentledger.errors import AgentLedgerError, ContractError, NotFoundError

MISSING = "0" * 64


@pytest.fixture
async def nc(settings: Settings) -> AsyncIterator[NatsClient]:
    conn = await nats.connect(settings.nats_url)
    yield conn
    await conn.close()


@pytest.fixture
async def store(nc: NatsClient, settings: Settings) -> ArtifactStore:
    return await artifacts.open(nc, settings)


def ref_dict(ref: ev.ArtifactRef, **changes: Any) -> dict[str, Any]:
    return {**msgspec.to_builtins(ref), **changes}


def event(kind: str, payload: dict[str, Any], n: int = 0) -> ev.EventBase:
    return decode_event(msgspec.json.encode({
        "kind": kind, "event_id": f"e{n}", "tenant": "acme", "task_id": "t1", "producer": "agent-1",
        "occurred_at": "2026-11-29T10:00:00Z", "schema_version": 1, "payload": payload}))


def succeeded(*refs: dict[str, Any], n: int = 0) -> ev.EventBase:
    return event("step_succeeded", {"plan_version": 1, "step_id": "S1", "artifacts": list(refs)}, n)


def failed(ref: dict[str, Any], n: int = 0) -> ev.EventBase:
    return event("step_failed", {"plan_version": 1, "step_id": "S1", "error_code": "boom",
                                 "evidence": ref}, n)


def registered(ref: dict[str, Any], n: int = 0) -> ev.EventBase:
    return event("artifact_registered", {"artifact": ref}, n)


async def replace_raw(nc: NatsClient, store: ArtifactStore, name: str, data: bytes,
                      keep_headers: bool) -> None:
    """Overwrite an object under the same name through the raw Object Store API."""
    obs = await nc.jetstream().object_store(store.bucket)
    headers = (await obs.get_info(name)).headers if keep_headers else None
    await obs.put(name, data, meta=ObjectMeta(name=name, headers=headers))


async def test_put_get_round_trip(store: ArtifactStore, settings: Settings) -> None:
    """put stores bytes under their blake3 with a full ref, and get returns them unchanged."""
    data = b"junit xml goes here"
    ref = await store.put(data, schema="application/junit+xml", producer="S4/pytest", version=2)
    digest = blake3(data).hexdigest()
    assert ref == ev.ArtifactRef(uri=f"artifact://{artifacts_bucket(settings)}/{digest}", blake3=digest,
                                 schema="application/junit+xml", producer="S4/pytest", version=2,
                                 size=len(data))
    assert artifacts_bucket(settings) == f"{settings.prefix.upper()}_ARTIFACTS"
    assert await store.get(ref.uri) == data
    assert await store.get(ref.uri, expected_blake3=digest) == data
    await store.verify(ref)


async def test_empty_artifact_round_trips(store: ArtifactStore) -> None:
    """Zero-byte content (no chunks in the Object Store) still stores, stats and reads back."""
    ref = await store.put(b"", schema="text/plain", producer="p")
    assert ref.size == 0 and ref.blake3 == blake3(b"").hexdigest()
    assert await store.stat(ref.uri) == ref
    assert await store.get(ref.uri) == b""


async def test_put_is_idempotent_by_content(store: ArtifactStore, nc: NatsClient) -> None:
    """Putting identical content again returns the same ref and writes nothing new."""
    first = await store.put(b"same bytes", schema="s", producer="p")
    stream = f"OBJ_{store.bucket}"
    before = (await nc.jetstream().stream_info(stream)).state.last_seq
    second = await store.put(b"same bytes", schema="s", producer="p")
    assert second == first
    assert (await nc.jetstream().stream_info(stream)).state.last_seq == before
    other = await store.put(b"other bytes", schema="s", producer="p")
    assert other.uri != first.uri


async def test_stat_returns_ref_from_metadata(store: ArtifactStore) -> None:
    """stat rebuilds the exact ref put returned, from the object's metadata."""
    ref = await store.put(b'{"a": 1}', schema="application/json", producer="agent-7", version=3)
    assert await store.stat(ref.uri) == ref


async def test_missing_artifact(store: ArtifactStore, settings: Settings) -> None:
    """get, stat and verify of a URI never stored raise NotFoundError artifact_missing."""
    uri = f"artifact://{artifacts_bucket(settings)}/{MISSING}"
    for call in (store.get(uri), store.stat(uri),
                 store.verify(ev.ArtifactRef(uri=uri, blake3=MISSING, schema="s", producer="p"))):
        with pytest.raises(NotFoundError) as info:
            await call
        assert info.value.code == "artifact_missing"


@pytest.mark.parametrize("keep_headers", [True, False], ids=["headers-kept", "headers-dropped"])
async def test_replaced_content_is_a_hash_mismatch(store: ArtifactStore, nc: NatsClient,
                                                   keep_headers: bool) -> None:
    """Different bytes put under an artifact's name are caught by get and verify."""
    ref = await store.put(b"original", schema="s", producer="p")
    await replace_raw(nc, store, ref.blake3, b"tampered", keep_headers=keep_headers)
    for call in (store.get(ref.uri), store.get(ref.uri, expected_blake3=ref.blake3), store.verify(ref)):
        with pytest.raises(AgentLedgerError) as info:
            await call
        assert info.value.code == "artifact_hash_mismatch"


async def test_replaced_object_is_repaired_by_put(store: ArtifactStore, nc: NatsClient) -> None:
    """Putting the right bytes again over a tampered object (metadata lost) restores it."""
    ref = await store.put(b"original", schema="s", producer="p")
    await replace_raw(nc, store, ref.blake3, b"tampered", keep_headers=False)
    assert await store.put(b"original", schema="s", producer="p") == ref
    assert await store.get(ref.uri) == b"original"


async def test_get_with_wrong_expected_hash(store: ArtifactStore) -> None:
    """get refuses content that is intact but not the content the caller expects."""
    ref = await store.put(b"abc", schema="s", producer="p")
    with pytest.raises(AgentLedgerError) as info:
        await store.get(ref.uri, expected_blake3=MISSING)
    assert info.value.code == "artifact_hash_mismatch"


async def test_verify_checks_size(store: ArtifactStore) -> None:
    """verify refuses a ref whose size differs from the stored content."""
    ref = await store.put(b"abcdef", schema="s", producer="p")
    with pytest.raises(AgentLedgerError) as info:
        await store.verify(msgspec.structs.replace(ref, size=5))
    assert info.value.code == "artifact_hash_mismatch"
    await store.verify(msgspec.structs.replace(ref, size=None))


@pytest.mark.parametrize("uri", [
    "s3://bucket/" + MISSING,
    "artifact://B/" + MISSING[:63],
    "artifact://B/" + MISSING.upper().replace("0", "A"),
    "artifact://B/" + MISSING + "/x",
    "artifact:///" + MISSING,
    "artifact://a.b/" + MISSING,
    "",
])
def test_parse_uri_rejects_malformed(uri: str) -> None:
    """Anything but artifact://<bucket>/<64 lowercase hex> is invalid_artifact_uri."""
    with pytest.raises(ContractError) as info:
        parse_uri(uri)
    assert info.value.code == "invalid_artifact_uri"


def test_parse_uri_splits() -> None:
    """A well-formed URI splits into bucket and object name."""
    assert parse_uri(f"artifact://X_ARTIFACTS/{MISSING}") == ("X_ARTIFACTS", MISSING)


async def test_uri_of_another_bucket_is_invalid(store: ArtifactStore) -> None:
    """A store does not resolve URIs naming a different bucket."""
    with pytest.raises(ContractError) as info:
        await store.stat(f"artifact://OTHER_ARTIFACTS/{MISSING}")
    assert info.value.code == "invalid_artifact_uri"


async def test_large_artifact_round_trips(store: ArtifactStore) -> None:
    """A 5 MB artifact (many 128 KiB chunks) reads back byte for byte."""
    data = os.urandom(5 * 1024 * 1024)
    ref = await store.put(data, schema="application/octet-stream", producer="p")
    assert ref.size == len(data)
    assert await store.get(ref.uri) == data
    await store.verify(ref)


async def test_check_refs_accepts_stored_refs(store: ArtifactStore) -> None:
    """Events citing stored artifacts, in all three places, pass; events without refs too."""
    a = await store.put(b"a", schema="s", producer="p")
    b = await store.put(b"b", schema="s", producer="p")
    events = [
        event("task_completed", {}, 0),
        succeeded(ref_dict(a), ref_dict(b), ref_dict(a, size=None), n=1),
        failed(ref_dict(b), n=2),
        registered(ref_dict(a), n=3),
        event("step_failed", {"plan_version": 1, "step_id": "S1", "error_code": "x"}, 4),
    ]
    await check_refs(store, events)
    await check_refs(store, [])


# Each place builds a second event (index 1) with the good ref before the bad one when it can.
PLACES = {
    "artifacts": lambda good, bad: succeeded(good, bad, n=1),
    "evidence": lambda good, bad: failed(bad, n=1),
    "artifact": lambda good, bad: registered(bad, n=1),
}
PATHS = {"artifacts": "$.events[1].payload.artifacts[1]", "evidence": "$.events[1].payload.evidence",
         "artifact": "$.events[1].payload.artifact"}


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("problem", ["missing", "wrong_hash", "wrong_size", "bad_uri", "other_bucket"])
async def test_check_refs_refuses_bad_ref(store: ArtifactStore, settings: Settings, place: str,
                                          problem: str) -> None:
    """A missing, mismatched or malformed ref is refused with its exact code and JSON path."""
    good = await store.put(b"good", schema="s", producer="p")
    bucket = artifacts_bucket(settings)
    bad, code = {
        "missing": (ref_dict(good, uri=f"artifact://{bucket}/{MISSING}", blake3=MISSING),
                    "artifact_missing"),
        "wrong_hash": (ref_dict(good, blake3=MISSING), "artifact_hash_mismatch"),
        "wrong_size": (ref_dict(good, size=999), "artifact_hash_mismatch"),
        "bad_uri": (ref_dict(good, uri="s3://bucket/key"), "invalid_artifact_uri"),
        "other_bucket": (ref_dict(good, uri=f"artifact://OTHER/{good.blake3}"), "invalid_artifact_uri"),
    }[problem]
    events = [registered(ref_dict(good), n=0), PLACES[place](ref_dict(good), bad)]
    with pytest.raises(ContractError) as info:
        await check_refs(store, events)
    assert (info.value.code, info.value.path) == (code, PATHS[place])


async def test_check_refs_reports_first_bad_ref_in_order(store: ArtifactStore, settings: Settings) -> None:
    """With several bad refs, the first one in document order is the one reported."""
    good = await store.put(b"good", schema="s", producer="p")
    missing = ref_dict(good, uri=f"artifact://{artifacts_bucket(settings)}/{MISSING}", blake3=MISSING)
    events = [registered(ref_dict(good), 0), failed(missing, 1), registered(ref_dict(good, uri="x"), 2)]
    with pytest.raises(ContractError) as info:
        await check_refs(store, events)
    assert (info.value.code, info.value.path) == ("artifact_missing", "$.events[1].payload.evidence")


async def test_check_refs_catches_replaced_metadata(store: ArtifactStore, nc: NatsClient) -> None:
    """An object whose metadata was lost in a raw overwrite no longer satisfies a ref to it."""
    ref = await store.put(b"original", schema="s", producer="p")
    await replace_raw(nc, store, ref.blake3, b"tampered", keep_headers=False)
    with pytest.raises(ContractError) as info:
        await check_refs(store, [registered(ref_dict(ref))])
    assert (info.value.code, info.value.path) == ("artifact_hash_mismatch", "$.events[0].payload.artifact")


async def test_store_without_bucket(nc: NatsClient, settings: Settings) -> None:
    """A store bound to a bucket that does not exist reports artifacts missing; put creates it."""
    store = ArtifactStore(nc, artifacts_bucket(settings))
    uri = f"artifact://{store.bucket}/{MISSING}"
    with pytest.raises(NotFoundError) as info:
        await store.stat(uri)
    assert info.value.code == "artifact_missing"
    ref = await store.put(b"x", schema="s", producer="p")
    assert await store.get(ref.uri) == b"x"


async def test_put_rejects_invalid_ref_fields(store: ArtifactStore) -> None:
    """put refuses a schema/producer/version the ArtifactRef contract would refuse."""
    with pytest.raises(ContractError):
        await store.put(b"x", schema="", producer="p")
    with pytest.raises(ContractError):
        await store.put(b"x", schema="s", producer="p", version=0)
