"""The content-addressed artifact store and its endpoints, against a real NATS JetStream server.

Content goes in once per tenant and blake3, comes back only if it still hashes
to its name, and is visible to its own tenant only: another tenant's URI is
answered exactly like a missing one. Events citing artifacts are refused (with
the exact path) unless the cited artifact is durably stored as cited and
belongs to the event's tenant. Clients reach the store only through the
ledger-writer's ``<prefix>.artifact.*`` endpoints.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import nats.js.errors
import pytest
from blake3 import blake3
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js.api import ObjectMeta

from agentledger.cli import main as cli
from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.artifacts import H_BLAKE3, H_TENANT, H_VERSION, ArtifactReply
from agentledger.contracts.codec import decode_event
from agentledger.errors import AgentLedgerError, ContractError, NotFoundError
from agentledger.security import auth
from agentledger.security.identity import OPERATOR, Caller, PermissionDeniedError
from agentledger.services.ledger_writer.artifact_endpoints import REPLY_HEADROOM, ArtifactEndpoints
from agentledger.stores import artifacts
from agentledger.stores.artifacts import ArtifactAddress, ArtifactStore, artifacts_bucket, check_refs, parse_uri
from tenant_agents import agent_client
from writer_support import running_writer

MISSING = "0" * 64
TENANT = "acme"
ALICE = Caller(tenant="a", agent="x")
BOB = Caller(tenant="b", agent="y")
EXAMPLES = Path(ev.__file__).resolve().parent / "examples"


@pytest.fixture
async def nc(settings: Settings) -> AsyncIterator[NatsClient]:
    """A connection as the ledger-writer, the services' user that owns the object store."""
    conn = await auth.connect(settings, auth.WRITER)
    yield conn
    await conn.close()


@pytest.fixture
async def store(nc: NatsClient, settings: Settings) -> ArtifactStore:
    return await artifacts.open(nc, settings)


@pytest.fixture
def endpoints(store: ArtifactStore, settings: Settings) -> ArtifactEndpoints:
    """The endpoints' rules without NATS requests: a 1 KiB put limit, the default max_payload."""
    limited = msgspec.structs.replace(settings, max_artifact_bytes=1024)
    return ArtifactEndpoints(store, limited, max_payload=8 * 1024 * 1024)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    """A ledger-writer serving the endpoints, and an operator client (no tenant credentials)."""
    async with running_writer(settings) as (_, started):
        yield started


def ref_dict(ref: ev.ArtifactRef, **changes: Any) -> dict[str, Any]:
    return {**msgspec.to_builtins(ref), **changes}


def event(kind: str, payload: dict[str, Any], n: int = 0, tenant: str = TENANT) -> ev.EventBase:
    return decode_event(msgspec.json.encode({
        "kind": kind, "event_id": f"e{n}", "tenant": tenant, "task_id": "t1", "producer": "agent-1",
        "occurred_at": "2026-11-29T10:00:00Z", "schema_version": 1, "payload": payload}))


def succeeded(*refs: dict[str, Any], n: int = 0) -> ev.EventBase:
    return event("step_succeeded", {"plan_version": 1, "step_id": "S1", "artifacts": list(refs)}, n)


def failed(ref: dict[str, Any], n: int = 0) -> ev.EventBase:
    return event("step_failed", {"plan_version": 1, "step_id": "S1", "error_code": "boom",
                                 "evidence": ref}, n)


def registered(ref: dict[str, Any], n: int = 0, tenant: str = TENANT) -> ev.EventBase:
    return event("artifact_registered", {"artifact": ref}, n, tenant)


def put_headers(**values: str) -> dict[str, str]:
    return {"Agentledger-Schema": "text/plain", "Agentledger-Producer": "p", **values}


def request(uri: str, **extra: str) -> bytes:
    return json.dumps({"uri": uri, **extra}).encode()


async def replace_raw(nc: NatsClient, uri: str, data: bytes, keep_headers: bool) -> None:
    """Overwrite an object under the same name through the raw Object Store API."""
    address = parse_uri(uri)
    obs = await nc.jetstream().object_store(address.bucket)
    headers = (await obs.get_info(address.name)).headers if keep_headers else None
    await obs.put(address.name, data, meta=ObjectMeta(name=address.name, headers=headers))


async def last_seq(nc: NatsClient, store: ArtifactStore) -> int:
    return (await nc.jetstream().stream_info(f"OBJ_{store.bucket}")).state.last_seq


def uri_of(store: ArtifactStore, tenant: str, digest: str = MISSING) -> str:
    return f"artifact://{store.bucket}/{tenant}/{digest}"


# ---- the store (inside the services' account) ------------------------------------------------

async def test_put_get_round_trip(store: ArtifactStore, settings: Settings) -> None:
    """put stores bytes under tenant and blake3 with a full ref, and get returns them unchanged."""
    data = b"junit xml goes here"
    ref = await store.put(data, tenant=TENANT, schema="application/junit+xml", producer="S4/pytest",
                          version=2)
    digest = blake3(data).hexdigest()
    assert ref == ev.ArtifactRef(uri=f"artifact://{artifacts_bucket(settings)}/{TENANT}/{digest}",
                                 blake3=digest, schema="application/junit+xml", producer="S4/pytest",
                                 version=2, size=len(data))
    assert artifacts_bucket(settings) == f"{settings.prefix.upper()}_ARTIFACTS"
    assert await store.get(ref.uri) == data
    assert await store.get(ref.uri, expected_blake3=digest, tenant=TENANT) == data
    await store.verify(ref)
    await store.verify(ref, tenant=TENANT)


async def test_empty_artifact_round_trips(store: ArtifactStore) -> None:
    """Zero-byte content (no chunks in the Object Store) still stores, stats and reads back."""
    ref = await store.put(b"", tenant=TENANT, schema="text/plain", producer="p")
    assert ref.size == 0 and ref.blake3 == blake3(b"").hexdigest()
    assert await store.stat(ref.uri) == ref
    assert await store.get(ref.uri) == b""


async def test_put_is_idempotent_by_content(store: ArtifactStore, nc: NatsClient) -> None:
    """Putting identical content again for one tenant returns the same ref and writes nothing new."""
    first = await store.put(b"same bytes", tenant=TENANT, schema="s", producer="p")
    before = await last_seq(nc, store)
    second = await store.put(b"same bytes", tenant=TENANT, schema="s", producer="p")
    assert second == first
    assert await last_seq(nc, store) == before
    other = await store.put(b"other bytes", tenant=TENANT, schema="s", producer="p")
    assert other.uri != first.uri


async def test_dedupe_stays_within_a_tenant(store: ArtifactStore, nc: NatsClient) -> None:
    """The same content put by two tenants is two objects: the second put writes, and says nothing."""
    a = await store.put(b"shared bytes", tenant="a", schema="s", producer="p")
    before = await last_seq(nc, store)
    b = await store.put(b"shared bytes", tenant="b", schema="s", producer="p")
    assert await last_seq(nc, store) > before
    assert (parse_uri(a.uri).tenant, parse_uri(b.uri).tenant) == ("a", "b")
    assert a.blake3 == b.blake3 and a.uri != b.uri
    await replace_raw(nc, a.uri, b"a's copy damaged", keep_headers=True)
    assert await store.get(b.uri) == b"shared bytes"


async def test_stat_returns_ref_from_metadata(store: ArtifactStore) -> None:
    """stat rebuilds the exact ref put returned, from the object's metadata."""
    ref = await store.put(b'{"a": 1}', tenant=TENANT, schema="application/json", producer="agent-7",
                          version=3)
    assert await store.stat(ref.uri) == ref


async def test_missing_artifact(store: ArtifactStore) -> None:
    """get, stat and verify of a URI never stored raise NotFoundError artifact_missing."""
    uri = uri_of(store, TENANT)
    for call in (store.get(uri), store.stat(uri),
                 store.verify(ev.ArtifactRef(uri=uri, blake3=MISSING, schema="s", producer="p"))):
        with pytest.raises(NotFoundError) as info:
            await call
        assert info.value.code == "artifact_missing"


async def test_scoped_lookup_of_another_tenant_is_missing(store: ArtifactStore) -> None:
    """With a tenant scope, another tenant's artifact is reported exactly like one never stored."""
    ref = await store.put(b"a's report", tenant="a", schema="s", producer="p")
    absent = uri_of(store, "a")
    for uri in (ref.uri, absent):
        for call in (store.stat(uri, tenant="b"), store.get(uri, tenant="b"),
                     store.verify(msgspec.structs.replace(ref, uri=uri), tenant="b")):
            with pytest.raises(NotFoundError) as info:
                await call
            assert (info.value.code, info.value.message) == ("artifact_missing",
                                                             f"artifact {uri} is not in the store")


@pytest.mark.parametrize("keep_headers", [True, False], ids=["headers-kept", "headers-dropped"])
async def test_replaced_content_is_a_hash_mismatch(store: ArtifactStore, nc: NatsClient,
                                                   keep_headers: bool) -> None:
    """Different bytes put under an artifact's name are caught by get and verify."""
    ref = await store.put(b"original", tenant=TENANT, schema="s", producer="p")
    await replace_raw(nc, ref.uri, b"tampered", keep_headers=keep_headers)
    for call in (store.get(ref.uri), store.get(ref.uri, expected_blake3=ref.blake3), store.verify(ref)):
        with pytest.raises(AgentLedgerError) as info:
            await call
        assert info.value.code == "artifact_hash_mismatch"


async def test_object_moved_to_another_tenant_is_a_mismatch(store: ArtifactStore, nc: NatsClient) -> None:
    """An object copied raw under another tenant's name keeps its owner in metadata and is refused."""
    ref = await store.put(b"a's bytes", tenant="a", schema="s", producer="p")
    obs = await nc.jetstream().object_store(store.bucket)
    source = parse_uri(ref.uri)
    headers = (await obs.get_info(source.name)).headers
    target = ArtifactAddress(store.bucket, "b", source.blake3)
    await obs.put(target.name, b"a's bytes", meta=ObjectMeta(name=target.name, headers=headers))
    uri = artifacts.artifact_uri(store.bucket, "b", source.blake3)
    with pytest.raises(AgentLedgerError) as info:
        await store.get(uri, tenant="b")
    assert info.value.code == "artifact_hash_mismatch"


async def test_replaced_object_is_repaired_by_put(store: ArtifactStore, nc: NatsClient) -> None:
    """Putting the right bytes again over a tampered object (metadata lost) restores it."""
    ref = await store.put(b"original", tenant=TENANT, schema="s", producer="p")
    await replace_raw(nc, ref.uri, b"tampered", keep_headers=False)
    assert await store.put(b"original", tenant=TENANT, schema="s", producer="p") == ref
    assert await store.get(ref.uri) == b"original"


async def test_get_with_wrong_expected_hash(store: ArtifactStore) -> None:
    """get refuses content that is intact but not the content the caller expects."""
    ref = await store.put(b"abc", tenant=TENANT, schema="s", producer="p")
    with pytest.raises(AgentLedgerError) as info:
        await store.get(ref.uri, expected_blake3=MISSING)
    assert info.value.code == "artifact_hash_mismatch"


async def test_verify_checks_size(store: ArtifactStore) -> None:
    """verify refuses a ref whose size differs from the stored content."""
    ref = await store.put(b"abcdef", tenant=TENANT, schema="s", producer="p")
    with pytest.raises(AgentLedgerError) as info:
        await store.verify(msgspec.structs.replace(ref, size=5))
    assert info.value.code == "artifact_hash_mismatch"
    await store.verify(msgspec.structs.replace(ref, size=None))


@pytest.mark.parametrize("uri", [
    "s3://bucket/" + MISSING,
    "artifact://B/" + MISSING,  # the old form, without a tenant
    "artifact://B/t/" + MISSING[:63],
    "artifact://B/t/" + MISSING.upper().replace("0", "A"),
    "artifact://B/t/" + MISSING + "/x",
    "artifact:///t/" + MISSING,
    "artifact://B//" + MISSING,
    "artifact://B/a.b/" + MISSING,
    "artifact://B/" + "t" * 65 + "/" + MISSING,
    "artifact://a.b/t/" + MISSING,
    "",
])
def test_parse_uri_rejects_malformed(uri: str) -> None:
    """Anything but artifact://<bucket>/<tenant token>/<64 lowercase hex> is invalid_artifact_uri."""
    with pytest.raises(ContractError) as info:
        parse_uri(uri)
    assert info.value.code == "invalid_artifact_uri"


def test_parse_uri_splits() -> None:
    """A well-formed URI splits into bucket, tenant and blake3; the object name is tenant/blake3."""
    address = parse_uri(f"artifact://X_ARTIFACTS/acme-eng/{MISSING}")
    assert address == ("X_ARTIFACTS", "acme-eng", MISSING)
    assert address.name == f"acme-eng/{MISSING}"
    assert artifacts.artifact_uri(*address) == f"artifact://X_ARTIFACTS/acme-eng/{MISSING}"


def test_examples_cite_valid_artifact_uris() -> None:
    """Every artifact ref in the golden examples is an artifact:// URI of the event's own tenant."""
    cited = 0
    for path in sorted(EXAMPLES.glob("*.json")):
        if path.stem not in ev.EVENT_TYPES:
            continue
        example = decode_event(path.read_bytes())
        for _, tenant, ref in artifacts.artifact_refs([example]):
            address = parse_uri(ref.uri)
            assert (address.tenant, address.blake3) == (tenant, ref.blake3), path.name
            cited += 1
    assert cited == 3


async def test_uri_of_another_bucket_is_invalid(store: ArtifactStore) -> None:
    """A store does not resolve URIs naming a different bucket."""
    with pytest.raises(ContractError) as info:
        await store.stat(f"artifact://OTHER_ARTIFACTS/{TENANT}/{MISSING}")
    assert info.value.code == "invalid_artifact_uri"


async def test_large_artifact_round_trips(store: ArtifactStore) -> None:
    """A 5 MB artifact (many 128 KiB chunks) reads back byte for byte inside the services."""
    data = os.urandom(5 * 1024 * 1024)
    ref = await store.put(data, tenant=TENANT, schema="application/octet-stream", producer="p")
    assert ref.size == len(data)
    assert await store.get(ref.uri) == data
    await store.verify(ref)


async def test_store_without_bucket(nc: NatsClient, settings: Settings) -> None:
    """A store bound to a bucket that does not exist reports artifacts missing; put creates it."""
    store = ArtifactStore(nc, artifacts_bucket(settings))
    with pytest.raises(NotFoundError) as info:
        await store.stat(uri_of(store, TENANT))
    assert info.value.code == "artifact_missing"
    ref = await store.put(b"x", tenant=TENANT, schema="s", producer="p")
    assert await store.get(ref.uri) == b"x"


async def test_put_rejects_invalid_ref_fields(store: ArtifactStore) -> None:
    """put refuses a schema/producer/version/tenant the contracts would refuse."""
    with pytest.raises(ContractError):
        await store.put(b"x", tenant=TENANT, schema="", producer="p")
    with pytest.raises(ContractError):
        await store.put(b"x", tenant=TENANT, schema="s", producer="p", version=0)
    with pytest.raises(ContractError) as info:
        await store.put(b"x", tenant="a/b", schema="s", producer="p")
    assert info.value.code == "invalid_token"


# ---- check_refs: what the writer accepts in events ----------------------------------------------

async def test_check_refs_accepts_stored_refs(store: ArtifactStore) -> None:
    """Events citing stored artifacts, in all three places, pass; events without refs too."""
    a = await store.put(b"a", tenant=TENANT, schema="s", producer="p")
    b = await store.put(b"b", tenant=TENANT, schema="s", producer="p")
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
@pytest.mark.parametrize("problem", ["missing", "wrong_hash", "wrong_size", "bad_uri", "other_bucket",
                                     "other_tenant"])
async def test_check_refs_refuses_bad_ref(store: ArtifactStore, place: str, problem: str) -> None:
    """A missing, mismatched, malformed or foreign ref is refused with its exact code and JSON path."""
    good = await store.put(b"good", tenant=TENANT, schema="s", producer="p")
    theirs = await store.put(b"good", tenant="globex", schema="s", producer="p")
    bad, code = {
        "missing": (ref_dict(good, uri=uri_of(store, TENANT), blake3=MISSING), "artifact_missing"),
        "wrong_hash": (ref_dict(good, blake3=MISSING), "artifact_hash_mismatch"),
        "wrong_size": (ref_dict(good, size=999), "artifact_hash_mismatch"),
        "bad_uri": (ref_dict(good, uri="s3://bucket/key"), "invalid_artifact_uri"),
        "other_bucket": (ref_dict(good, uri=f"artifact://OTHER/{TENANT}/{good.blake3}"),
                         "invalid_artifact_uri"),
        "other_tenant": (ref_dict(theirs), "invalid_artifact_ref"),
    }[problem]
    events = [registered(ref_dict(good), n=0), PLACES[place](ref_dict(good), bad)]
    with pytest.raises(ContractError) as info:
        await check_refs(store, events)
    assert (info.value.code, info.value.path) == (code, PATHS[place])


async def test_check_refs_foreign_ref_says_nothing_about_existence(store: ArtifactStore) -> None:
    """Citing another tenant's artifact gets one answer whether that artifact exists or not."""
    theirs = await store.put(b"globex's secret", tenant="globex", schema="s", producer="p")
    answers = []
    for ref in (ref_dict(theirs), ref_dict(theirs, uri=uri_of(store, "globex"), blake3=MISSING)):
        with pytest.raises(ContractError) as info:
            await check_refs(store, [registered(ref)])
        answers.append((info.value.code, info.value.path, info.value.message.replace(ref["uri"], "URI")))
    assert answers[0] == answers[1]
    assert answers[0][:2] == ("invalid_artifact_ref", "$.events[0].payload.artifact")


async def test_check_refs_reports_first_bad_ref_in_order(store: ArtifactStore) -> None:
    """With several bad refs, the first one in document order is the one reported."""
    good = await store.put(b"good", tenant=TENANT, schema="s", producer="p")
    theirs = await store.put(b"good", tenant="globex", schema="s", producer="p")
    missing = ref_dict(good, uri=uri_of(store, TENANT), blake3=MISSING)
    events = [registered(ref_dict(good), 0), failed(missing, 1), registered(ref_dict(theirs), 2),
              registered(ref_dict(good, uri="x"), 3)]
    with pytest.raises(ContractError) as info:
        await check_refs(store, events)
    assert (info.value.code, info.value.path) == ("artifact_missing", "$.events[1].payload.evidence")
    with pytest.raises(ContractError) as info:
        await check_refs(store, [events[0], *events[2:]])
    assert (info.value.code, info.value.path) == ("invalid_artifact_ref", "$.events[1].payload.artifact")


async def test_check_refs_catches_replaced_metadata(store: ArtifactStore, nc: NatsClient) -> None:
    """An object whose metadata was lost in a raw overwrite no longer satisfies a ref to it."""
    ref = await store.put(b"original", tenant=TENANT, schema="s", producer="p")
    await replace_raw(nc, ref.uri, b"tampered", keep_headers=False)
    with pytest.raises(ContractError) as info:
        await check_refs(store, [registered(ref_dict(ref))])
    assert (info.value.code, info.value.path) == ("artifact_hash_mismatch", "$.events[0].payload.artifact")


# ---- the endpoints' rules, per caller -----------------------------------------------------------

async def test_tenant_puts_for_itself(endpoints: ArtifactEndpoints) -> None:
    """A tenant caller's artifact lands under its own tenant; it may name itself, not another."""
    ref = await endpoints.put(ALICE, b"alice's notes", put_headers(**{H_VERSION: "2"}))
    assert (parse_uri(ref.uri).tenant, ref.version, ref.size) == ("a", 2, 13)
    assert await endpoints.put(ALICE, b"alice's notes", put_headers(**{H_TENANT: "a"})) == \
        msgspec.structs.replace(ref, version=1)
    with pytest.raises(PermissionDeniedError) as info:
        await endpoints.put(ALICE, b"into bob's space", put_headers(**{H_TENANT: "b"}))
    assert (info.value.code, info.value.path) == ("tenant_mismatch", f"headers.{H_TENANT}")


async def test_operator_names_the_tenant(endpoints: ArtifactEndpoints) -> None:
    """The operator must say which tenant an artifact belongs to."""
    with pytest.raises(ContractError) as info:
        await endpoints.put(OPERATOR, b"whose?", put_headers())
    assert (info.value.code, info.value.path) == ("missing_field", f"headers.{H_TENANT}")
    ref = await endpoints.put(OPERATOR, b"bob's", put_headers(**{H_TENANT: "b"}))
    assert parse_uri(ref.uri).tenant == "b"
    assert await endpoints.stat(BOB, request(ref.uri)) == ref


@pytest.mark.parametrize(("headers", "code", "header"), [
    ({"Agentledger-Producer": "p"}, "missing_field", "Agentledger-Schema"),
    (put_headers(**{H_VERSION: "two"}), "invalid_type", "Agentledger-Version"),
    (put_headers(**{H_VERSION: "0"}), "invalid_value", "Agentledger-Version"),
    (put_headers(**{H_TENANT: "a.b"}), "invalid_token", "Agentledger-Tenant"),
    (put_headers(**{H_BLAKE3: "xyz"}), "invalid_value", "Agentledger-Blake3"),
])
async def test_put_headers_are_checked(endpoints: ArtifactEndpoints, headers: dict[str, str], code: str,
                                       header: str) -> None:
    """Bad put metadata is refused with a code and the header's name as the path."""
    with pytest.raises(ContractError) as info:
        await endpoints.put(ALICE, b"x", headers)
    assert (info.value.code, info.value.path) == (code, f"headers.{header}")


async def test_put_header_names_are_case_insensitive(endpoints: ArtifactEndpoints) -> None:
    """A client that lower-cases header names is understood."""
    ref = await endpoints.put(ALICE, b"x", {"agentledger-schema": "s", "AGENTLEDGER-PRODUCER": "p"})
    assert (ref.schema, ref.producer) == ("s", "p")


async def test_put_refuses_content_that_arrived_changed(endpoints: ArtifactEndpoints) -> None:
    """A put whose content does not hash to the caller's Agentledger-Blake3 stores nothing."""
    sent = blake3(b"what I sent").hexdigest()
    with pytest.raises(AgentLedgerError) as info:
        await endpoints.put(ALICE, b"what arrived", put_headers(**{H_BLAKE3: sent}))
    assert info.value.code == "artifact_hash_mismatch"
    arrived = blake3(b"what arrived").hexdigest()
    with pytest.raises(NotFoundError):
        await endpoints.stat(OPERATOR, request(uri_of(endpoints.store, "a", arrived)))
    ref = await endpoints.put(ALICE, b"what I sent", put_headers(**{H_BLAKE3: sent}))
    assert ref.blake3 == sent


async def test_size_limit(endpoints: ArtifactEndpoints) -> None:
    """Content over max_artifact_bytes is refused with artifact_too_large; the limit itself fits."""
    assert (await endpoints.put(ALICE, b"x" * 1024, put_headers())).size == 1024
    with pytest.raises(ContractError) as info:
        await endpoints.put(ALICE, b"x" * 1025, put_headers())
    assert info.value.code == "artifact_too_large"


async def test_get_refuses_what_cannot_fit_a_reply(store: ArtifactStore, settings: Settings) -> None:
    """An artifact larger than a NATS reply can carry is refused, not half-sent."""
    small = ArtifactEndpoints(store, settings, max_payload=REPLY_HEADROOM + 100)
    fits = await store.put(b"x" * 100, tenant="a", schema="s", producer="p")
    too_big = await store.put(b"x" * 101, tenant="a", schema="s", producer="p")
    assert (await small.get(ALICE, request(fits.uri)))[0] == b"x" * 100
    with pytest.raises(ContractError) as info:
        await small.get(ALICE, request(too_big.uri))
    assert (info.value.code, info.value.path) == ("artifact_too_large", "$.uri")


async def test_tenants_do_not_see_each_other(endpoints: ArtifactEndpoints) -> None:
    """Bob's get and stat of Alice's artifact answer exactly as for an artifact that never existed."""
    ref = await endpoints.put(ALICE, b"alice's report", put_headers())
    assert await endpoints.stat(ALICE, request(ref.uri)) == ref
    assert await endpoints.get(ALICE, request(ref.uri)) == (b"alice's report", ref)
    never = uri_of(endpoints.store, "a")
    for action in (endpoints.get, endpoints.stat):
        answers = []
        for uri in (ref.uri, never):
            with pytest.raises(NotFoundError) as info:
                await action(BOB, request(uri))
            answers.append((type(info.value), info.value.code, info.value.path,
                            info.value.message.replace(uri, "URI")))
        assert answers[0] == answers[1]
        assert answers[0][1:3] == ("artifact_missing", "$.uri")


async def test_same_content_two_tenants(endpoints: ArtifactEndpoints, nc: NatsClient) -> None:
    """Bob putting Alice's content gets his own object (a write), never a hint that it exists."""
    alice = await endpoints.put(ALICE, b"common text", put_headers())
    before = await last_seq(nc, endpoints.store)
    bob = await endpoints.put(BOB, b"common text", put_headers())
    assert await last_seq(nc, endpoints.store) > before
    assert bob.uri != alice.uri and bob.blake3 == alice.blake3
    again = await last_seq(nc, endpoints.store)
    assert await endpoints.put(BOB, b"common text", put_headers()) == bob
    assert await last_seq(nc, endpoints.store) == again


async def test_operator_reads_any_tenant(endpoints: ArtifactEndpoints) -> None:
    """The operator (inside the services' account) stats and gets every tenant's artifacts."""
    a = await endpoints.put(ALICE, b"from a", put_headers())
    b = await endpoints.put(BOB, b"from b", put_headers())
    assert await endpoints.stat(OPERATOR, request(a.uri)) == a
    assert (await endpoints.get(OPERATOR, request(b.uri)))[0] == b"from b"


async def test_get_with_expected_hash(endpoints: ArtifactEndpoints) -> None:
    """A get naming the blake3 it expects is refused when the stored content differs."""
    ref = await endpoints.put(ALICE, b"abc", put_headers())
    assert (await endpoints.get(ALICE, request(ref.uri, blake3=ref.blake3)))[0] == b"abc"
    with pytest.raises(AgentLedgerError) as info:
        await endpoints.get(ALICE, request(ref.uri, blake3="1" * 64))
    assert info.value.code == "artifact_hash_mismatch"


async def test_bad_requests(endpoints: ArtifactEndpoints) -> None:
    """Undecodable requests and malformed URIs name their path."""
    for body, code, path in [(b"{", "malformed_json", "$"), (b"{}", "missing_field", "$.uri"),
                             (request("s3://x/y"), "invalid_artifact_uri", "$.uri"),
                             (b'{"uri": "u", "extra": 1}', "unknown_field", "$.extra")]:
        with pytest.raises(ContractError) as info:
            await endpoints.stat(ALICE, body)
        assert (info.value.code, info.value.path) == (code, path)


# ---- end to end: client -> NATS -> ledger-writer (operator identity) ------------------------------

async def test_client_round_trip(client: Client) -> None:
    """put, stat and get through the endpoints; the client never opens the object store."""
    data = os.urandom(300_000)
    ref = await client.put_artifact(data, schema="application/octet-stream", producer="S2/tar",
                                    version=3, tenant=TENANT)
    assert (parse_uri(ref.uri).tenant, ref.blake3, ref.size, ref.version) == \
        (TENANT, blake3(data).hexdigest(), len(data), 3)
    assert await client.stat_artifact(ref.uri) == ref
    assert await client.get_artifact(ref.uri) == data
    empty = await client.put_artifact(b"", schema="text/plain", producer="p", tenant=TENANT)
    assert await client.get_artifact(empty.uri) == b""
    assert not hasattr(client, "artifacts")


async def test_client_errors(client: Client) -> None:
    """Errors come back typed: missing, no tenant named by the operator, malformed URI."""
    with pytest.raises(NotFoundError) as info:
        await client.get_artifact(f"artifact://{artifacts_bucket(client.settings)}/{TENANT}/{MISSING}")
    assert info.value.code == "artifact_missing"
    with pytest.raises(NotFoundError):
        await client.stat_artifact(f"artifact://{artifacts_bucket(client.settings)}/{TENANT}/{MISSING}")
    with pytest.raises(ContractError) as info:
        await client.put_artifact(b"x", schema="s", producer="p")
    assert (info.value.code, info.value.path) == ("missing_field", f"headers.{H_TENANT}")
    with pytest.raises(ContractError):
        await client.get_artifact("s3://bucket/key")
    with pytest.raises(ContractError) as info:
        await client.stat_artifact("s3://bucket/key")
    assert (info.value.code, info.value.path) == ("invalid_artifact_uri", "$.uri")
    with pytest.raises(ContractError) as info:
        await client.put_artifact(b"x", schema="two\nlines", producer="p", tenant=TENANT)
    assert info.value.path == "headers.Agentledger-Schema"


async def test_a_secret_in_a_header_is_refused_and_nothing_is_stored(client: Client, nc: NatsClient,
                                                                     store: ArtifactStore) -> None:
    """Issue 49, item 4: a token in ``Agentledger-Producer`` (or the schema) is refused as a
    secret in an identifier, and the object store holds neither the object nor the token."""
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    data = b"the report of run 7"
    for headers, path in (({"producer": f"ci {token}", "schema": "s"}, "headers.Agentledger-Producer"),
                          ({"producer": "ci", "schema": f"text/plain; key={token}"}, "headers.Agentledger-Schema")):
        with pytest.raises(ContractError) as info:
            await client.put_artifact(data, tenant=TENANT, **headers)
        assert (info.value.code, info.value.path) == ("secret_in_identifier", path)
        assert token not in info.value.message
    with pytest.raises(NotFoundError):
        await client.stat_artifact(artifacts.artifact_uri(store.bucket, TENANT, blake3(data).hexdigest()))
    obs = await nc.jetstream().object_store(store.bucket)
    try:
        listed = await obs.list(ignore_deletes=True)
    except nats.js.errors.NotFoundError:  # an empty bucket
        listed = []
    assert all(token not in str(info.headers) for info in listed)


async def test_default_size_limit_end_to_end(client: Client) -> None:
    """With the default 4 MiB limit: exactly 4 MiB round-trips, one byte more is refused, 9 MB never leaves."""
    limit = Settings().max_artifact_bytes
    assert limit == client.settings.max_artifact_bytes == 4 * 1024 * 1024
    data = os.urandom(limit)
    ref = await client.put_artifact(data, schema="s", producer="p", tenant=TENANT)
    assert await client.get_artifact(ref.uri) == data
    with pytest.raises(AgentLedgerError) as info:
        await client.put_artifact(data + b"!", schema="s", producer="p", tenant=TENANT)
    assert info.value.code == "artifact_too_large"
    with pytest.raises(ContractError) as info:
        await client.put_artifact(os.urandom(9_000_000), schema="s", producer="p", tenant=TENANT)
    assert info.value.code == "artifact_too_large"


async def test_corrupted_object_is_refused_on_get(client: Client, nc: NatsClient) -> None:
    """Bytes replaced in the object store never reach the client: the service refuses them."""
    ref = await client.put_artifact(b"the real report", schema="s", producer="p", tenant=TENANT)
    await replace_raw(nc, ref.uri, b"a forged report", keep_headers=True)
    with pytest.raises(AgentLedgerError) as info:
        await client.get_artifact(ref.uri)
    assert info.value.code == "artifact_hash_mismatch"


async def test_client_rehashes_what_it_receives(settings: Settings, nc: NatsClient) -> None:
    """A reply whose bytes do not hash to the URI (a faulty or forged responder) is refused."""
    uri = f"artifact://{artifacts_bucket(settings)}/{TENANT}/{blake3(b'genuine').hexdigest()}"

    async def forged(msg: Msg) -> None:
        await nc.publish(msg.reply, b"forged", headers={H_BLAKE3: parse_uri(uri).blake3})

    sub = await nc.subscribe(f"{settings.prefix}.artifact.get", cb=forged)
    async with await connect(settings) as conn:
        with pytest.raises(AgentLedgerError) as info:
            await conn.get_artifact(uri)
    await sub.unsubscribe()
    assert info.value.code == "artifact_hash_mismatch"


async def test_error_replies_are_marked_by_a_header(settings: Settings, client: Client) -> None:
    """A get error carries Agentledger-Error and an ArtifactReply; success carries the ref in headers."""
    ref = await client.put_artifact(b"", schema="text/plain", producer="p", tenant=TENANT)
    ok = await client.nc.request(f"{settings.prefix}.artifact.get", request(ref.uri), timeout=10)
    assert ok.data == b"" and ok.headers is not None and "Agentledger-Error" not in ok.headers
    assert (ok.headers[H_BLAKE3], ok.headers["Agentledger-Size"]) == (ref.blake3, "0")
    missing = f"artifact://{artifacts_bucket(settings)}/{TENANT}/{MISSING}"
    bad = await client.nc.request(f"{settings.prefix}.artifact.get", request(missing), timeout=10)
    assert bad.headers is not None and bad.headers["Agentledger-Error"] == "artifact_missing"
    reply = msgspec.json.decode(bad.data, type=ArtifactReply)
    assert not reply.ok and reply.error is not None and reply.error.code == "artifact_missing"


async def test_writer_refuses_event_citing_another_tenants_artifact(client: Client) -> None:
    """An append citing another tenant's artifact is refused with the ref's path; its own lands."""
    theirs = await client.put_artifact(b"globex data", schema="s", producer="p", tenant="globex")
    ours = await client.put_artifact(b"globex data", schema="s", producer="p", tenant=TENANT)
    base = {"tenant": TENANT, "task_id": "t1", "producer": "agent-1",
            "occurred_at": "2026-11-29T10:00:00Z", "schema_version": 1}
    note = {**base, "kind": "artifact_registered", "event_id": "r1"}
    with pytest.raises(AgentLedgerError) as info:
        await client.append({**note, "payload": {"artifact": msgspec.to_builtins(theirs)}})
    assert (info.value.code, info.value.path) == ("invalid_artifact_ref", "$.events[0].payload.artifact")
    result = await client.append({**note, "payload": {"artifact": msgspec.to_builtins(ours)}})
    assert result.seq == 1


@pytest.fixture
async def tenants(settings: Settings, client: Client) -> AsyncIterator[dict[str, Client]]:
    """One agent connection per tenant (acme, globex), with its own NATS credentials."""
    if settings.auth_dir is None:
        pytest.skip("the NATS server runs without accounts")
    conns: dict[str, Client] = {}
    try:
        for tenant in (TENANT, "globex"):
            await auth.tenant_add(settings, tenant)
            conns[tenant] = await agent_client(settings, tenant, f"agent-{tenant}", timeout=5)
        yield conns
    finally:
        for conn in conns.values():
            await conn.close()


async def test_tenants_end_to_end(tenants: dict[str, Client], client: Client) -> None:
    """Real tenant users: each stores for itself, cannot see or cite the other's, cannot put for it."""
    acme, globex = tenants[TENANT], tenants["globex"]
    ref = await acme.put_artifact(b"acme's plan", schema="text/plain", producer="S1")
    assert parse_uri(ref.uri).tenant == TENANT
    assert await acme.stat_artifact(ref.uri) == ref
    assert await acme.get_artifact(ref.uri) == b"acme's plan"
    never = artifacts.artifact_uri(parse_uri(ref.uri).bucket, TENANT, MISSING)
    answers = []
    for uri in (ref.uri, never):
        for call in (globex.get_artifact(uri), globex.stat_artifact(uri)):
            with pytest.raises(NotFoundError) as info:
                await call
            answers.append((info.value.code, info.value.message.replace(uri, "URI")))
    assert len(set(answers)) == 1 and answers[0][0] == "artifact_missing"
    with pytest.raises(AgentLedgerError) as info:
        await globex.put_artifact(b"planted", schema="s", producer="p", tenant=TENANT)
    assert info.value.code == "tenant_mismatch"
    theirs = await globex.put_artifact(b"acme's plan", schema="text/plain", producer="S1")
    assert parse_uri(theirs.uri).tenant == "globex" and theirs.uri != ref.uri
    assert await client.get_artifact(theirs.uri) == b"acme's plan"  # the operator reads any tenant
    cite = {"kind": "artifact_registered", "event_id": "r1", "tenant": TENANT, "task_id": "t1",
            "producer": f"agent-{TENANT}", "occurred_at": "2026-11-29T10:00:00Z", "schema_version": 1}
    with pytest.raises(AgentLedgerError) as info:
        await acme.append({**cite, "payload": {"artifact": msgspec.to_builtins(theirs)}})
    assert (info.value.code, info.value.path) == ("invalid_artifact_ref", "$.events[0].payload.artifact")
    assert (await acme.append({**cite, "payload": {"artifact": msgspec.to_builtins(ref)}})).seq == 1
    # The tenant account's limits let the largest accepted artifact through, both ways.
    big = os.urandom(Settings().max_artifact_bytes)
    assert await acme.get_artifact((await acme.put_artifact(big, schema="s", producer="p")).uri) == big


async def test_cli_put_stat_get(settings: Settings, client: Client, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`agentledger artifact put|stat|get` work through the endpoints with the operator identity."""
    for name, value in {"NATS_URL": settings.nats_url, "DATABASE_URL": settings.database_url,
                        "PREFIX": settings.prefix, "DATA_DIR": str(tmp_path),
                        "AUTH_DIR": str(settings.auth_root)}.items():
        monkeypatch.setenv(f"AGENTLEDGER_{name}", value)
    source = tmp_path / "report.txt"
    source.write_bytes(b"12 passed")

    def run(*argv: str) -> int:
        # The command itself, without main()'s log setup, which would bind logs to capsys' stream.
        args = cli.build_parser().parse_args(list(argv))
        return int(args.fn(args))

    assert await asyncio.to_thread(run, "artifact", "put", str(source), "--schema", "text/plain",
                                   "--producer", "ci", "--tenant", TENANT) == 0
    ref = json.loads(capsys.readouterr().out)
    assert parse_uri(ref["uri"]).tenant == TENANT
    assert await asyncio.to_thread(run, "artifact", "stat", ref["uri"]) == 0
    assert json.loads(capsys.readouterr().out) == ref
    target = tmp_path / "copy.txt"
    assert await asyncio.to_thread(run, "artifact", "get", ref["uri"], "-o", str(target)) == 0
    assert target.read_bytes() == b"12 passed"
