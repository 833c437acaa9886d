"""Leases as capabilities, enforced by the ledger-writer on real NATS.

A grant returns a fencing token (the ledger sequence of its ``lease_granted``
event) and a secret bound to the holder. Exactly one executor holds a task's
lease at a time; tokens only grow, whatever happens to the lease bucket; renew,
release and every append to a leased task need the token and the secret (an
operator may append without them); expired entries leave the bucket by
themselves.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import nats.js.errors
import pytest

from agentledger.client import Client
from agentledger.config import Settings
from agentledger.contracts.codec import decode_event
from agentledger.contracts.events import LeaseGrantedEvent
from agentledger.core.reducer import fold
from agentledger.core.state import new_state, view
from agentledger.errors import AgentLedgerError
from agentledger.security import auth
from agentledger.security.identity import Caller
from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.stores import lease_bucket
from agentledger.stores.leases import Lease, secret_hash
from tenant_agents import agent_client
from helpers import assert_eventually
from test_writer import created, event, stored
from writer_support import running_writer


@pytest.fixture
async def stack(settings: Settings) -> AsyncIterator[tuple[LedgerWriter, Client]]:
    async with running_writer(settings) as started:
        yield started


@pytest.fixture
async def client(stack: tuple[LedgerWriter, Client]) -> Client:
    return stack[1]


async def lease(client: Client, action: str, task: str = "t1", **body: Any) -> dict[str, Any]:
    msg = await client.nc.request(f"{client.settings.prefix}.lease.{action}",
                                  json.dumps({"tenant": "acme", "task_id": task, **body}).encode(),
                                  timeout=10)
    return json.loads(msg.data)


async def fenced(client: Client, ev: dict[str, Any], grant: dict[str, Any] | None,
                 secret: str | None = None) -> str:
    """Append ``ev`` with the grant's token and ``secret``: "accepted" or the error code."""
    body: dict[str, Any] = {"events": [{**ev, "fencing_token": grant["token"]} if grant else ev]}
    if secret is not None:
        body["lease_secret"] = secret
    try:
        await client.append_raw(json.dumps(body).encode())
    except AgentLedgerError as exc:
        return exc.code
    return "accepted"


async def test_one_executor_wins_the_lease_and_tokens_grow(client: Client) -> None:
    """Two executors asking at once: one lease, with a secret; after release the next grant has a
    higher token."""
    await client.append(created())
    a, b = await asyncio.gather(lease(client, "acquire", holder="exec-a", ttl_s=30),
                                lease(client, "acquire", holder="exec-b", ttl_s=30))
    assert sorted([a["ok"], b["ok"]]) == [False, True]
    winner, loser = (a, b) if a["ok"] else (b, a)
    assert (loser["error"]["code"], loser["error"]["path"]) == ("lease_held", "$.task_id")
    first = winner["lease"]
    assert first["token"] >= 1 and len(first["secret"]) >= 40
    released = await lease(client, "release", holder=first["holder"], token=first["token"],
                           secret=first["secret"])
    assert released["ok"] is True
    other = "exec-b" if first["holder"] == "exec-a" else "exec-a"
    again = await lease(client, "acquire", holder=other, ttl_s=30)
    assert again["lease"]["token"] > first["token"]


async def test_a_grant_is_a_ledger_event_without_its_secret(client: Client,
                                                           settings: Settings) -> None:
    """The token is the sequence of the grant's lease_granted event; the event (and the Working
    Memory folded from it) names holder, token and expiry, and holds only a hash of the secret."""
    await client.append(created())
    got = (await lease(client, "acquire", holder="exec-a", ttl_s=30))["lease"]
    messages = await stored(settings)
    seq, body = messages[-1]
    assert (seq, body["kind"], body["payload"]["holder"]) == (got["token"], "lease_granted", "exec-a")
    assert body["payload"]["expires_at"] == got["expires_at"]
    assert got["secret"] not in json.dumps(body)
    assert body["payload"]["secret_hash"] == secret_hash("acme", "t1", "exec-a", got["secret"])
    assert isinstance(decode_event(json.dumps(body)), LeaseGrantedEvent)
    state, _ = fold(new_state("acme", "t1"), [(decode_event(json.dumps(m)), s) for s, m in messages])
    assert view(state, [])["lease"] == {"holder": "exec-a", "token": got["token"],
                                        "expires_at": got["expires_at"]}
    assert got["secret"] not in json.dumps(view(state, []))


async def test_lease_on_a_task_that_does_not_exist_is_refused(client: Client,
                                                              settings: Settings) -> None:
    """No message on the task's subject: not_found, and nothing is written anywhere."""
    reply = await lease(client, "acquire", task="ghost", holder="exec-a", ttl_s=30)
    assert (reply["ok"], reply["error"]["code"], reply["error"]["path"]) == (False, "not_found",
                                                                           "$.task_id")
    assert await stored(settings) == []
    kv = await client.nc.jetstream().key_value(settings.leases_bucket)
    with pytest.raises(nats.js.errors.KeyNotFoundError):
        await kv.get("acme.ghost")


async def test_forged_or_missing_secret_is_refused(client: Client) -> None:
    """The live token without its secret (or with a made-up one) gets lease_secret_invalid, for
    appends, renewals and releases alike; with the secret all three work."""
    await client.append(created())
    got = (await lease(client, "acquire", holder="exec-a", ttl_s=30))["lease"]
    forged = "A" * 43
    assert await fenced(client, event("e1"), got) == "lease_secret_invalid"
    assert await fenced(client, event("e1"), got, forged) == "lease_secret_invalid"
    with pytest.raises(AgentLedgerError) as info:
        await client.append_raw(json.dumps({"events": [{**event("e1"), "fencing_token": got["token"]}],
                                            "lease_secret": forged}).encode())
    assert (info.value.code, info.value.path) == ("lease_secret_invalid", "$.lease_secret")
    for action in ("renew", "release"):
        reply = await lease(client, action, holder="exec-a", token=got["token"], secret=forged, ttl_s=30)
        assert (reply["error"]["code"], reply["error"]["path"]) == ("lease_secret_invalid", "$.secret")
        reply = await lease(client, action, holder="exec-a", token=got["token"], ttl_s=30)
        assert reply["error"]["code"] == "lease_secret_invalid"
    assert await fenced(client, event("e1"), got, got["secret"]) == "accepted"
    renewed = await lease(client, "renew", holder="exec-a", token=got["token"], secret=got["secret"],
                          ttl_s=60)
    assert renewed["ok"] and "secret" not in renewed["lease"]  # the secret is never sent back
    assert (await lease(client, "release", holder="exec-a", token=got["token"],
                        secret=got["secret"]))["ok"]


async def test_old_secret_after_a_takeover_is_refused(client: Client) -> None:
    """A dead executor's lease lapses; the next one gets a higher token and a new secret. The old
    token is stale, the old secret does not open the new lease, the old lease cannot be renewed;
    a re-grant to the same holder also retires the previous secret."""
    await client.append(created())
    dead = (await lease(client, "acquire", holder="exec-a", ttl_s=0.2))["lease"]

    async def taken() -> dict[str, Any] | None:
        reply = await lease(client, "acquire", holder="exec-b", ttl_s=30)
        return reply["lease"] if reply["ok"] else None

    new = await assert_eventually(taken, timeout=10)
    assert new["token"] > dead["token"]
    renewal = await lease(client, "renew", holder="exec-a", token=dead["token"],
                          secret=dead["secret"], ttl_s=30)
    assert renewal["error"]["code"] == "lease_lost"
    assert await fenced(client, event("late"), dead, dead["secret"]) == "stale_fencing_token"
    assert await fenced(client, event("late"), new, dead["secret"]) == "lease_secret_invalid"
    assert await fenced(client, event("ok1"), new, new["secret"]) == "accepted"

    regrant = (await lease(client, "acquire", holder="exec-b", ttl_s=30))["lease"]
    assert regrant["token"] > new["token"] and regrant["secret"] != new["secret"]
    assert await fenced(client, event("late2"), new, new["secret"]) == "stale_fencing_token"
    assert await fenced(client, event("late2"), regrant, new["secret"]) == "lease_secret_invalid"
    assert await fenced(client, event("ok2"), regrant, regrant["secret"]) == "accepted"


async def test_purged_deleted_or_forged_entries_do_not_reset_the_fencing_number(
        stack: tuple[LedgerWriter, Client], settings: Settings) -> None:
    """The lease entry purged, deleted or replaced by a hand-written one (with the services' own
    connection): every later grant's token is higher than any granted before, and a forged
    entry gives its author nothing."""
    writer, client = stack
    await client.append(created())
    services = await auth.connect(settings, auth.WRITER)
    try:
        kv = await services.jetstream().key_value(settings.leases_bucket)
        tokens = []
        for tamper in ("purge", "delete", "purge"):
            got = (await lease(client, "acquire", holder="exec-a", ttl_s=30))["lease"]
            tokens.append(got["token"])
            if tamper == "purge":
                await kv.purge("acme.t1")
            else:
                await kv.delete("acme.t1")
            await assert_eventually(lambda: "acme.t1" not in writer._leases._mirror)
        after = (await lease(client, "acquire", holder="exec-b", ttl_s=30))["lease"]
        assert tokens == sorted(tokens) and len(set(tokens)) == 3
        assert after["token"] > max(tokens)

        # A hand-written entry for mallory with a secret she knows, expiring in a minute.
        await lease(client, "release", holder="exec-b", token=after["token"], secret=after["secret"])
        mine = "mallory-knows-this-secret"
        mirror = writer._leases._mirror
        for token in (1, after["token"]):
            forged = Lease(holder="mallory", token=token, expires_at=time.time() + 60,
                           secret_hash=secret_hash("acme", "t1", "mallory", mine))
            revision = await kv.put("acme.t1", msgspec.json.encode(forged))
            await assert_eventually(  # the writer's watch has delivered it
                lambda r=revision: getattr(mirror.get("acme.t1"), "revision", 0) == r)
            code = await fenced(client, event(f"m{token}"), {"token": token}, mine)
            assert code == "stale_fencing_token"
            # Nobody holds the task: the forged "live" lease does not block the next grant.
            later = (await lease(client, "acquire", holder="exec-c", ttl_s=30))["lease"]
            assert later["token"] > after["token"]
            await lease(client, "release", holder="exec-c", token=later["token"],
                        secret=later["secret"])
    finally:
        await services.close()


async def test_every_kind_needs_token_and_secret_while_leased_unless_from_an_operator(
        stack: tuple[LedgerWriter, Client], monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests are made as tenant agents (the writer's caller lookup is replaced): while the task
    is leased to agent exec-a, another agent's task_cancelled, turn_appended and question_opened
    are refused without token and secret, and with the holder's token it is holder_mismatch;
    exec-a appends them with both. An operator caller appends without any."""
    writer, client = stack
    await client.append(created())
    who: list[Caller | None] = [None]
    operator_caller = writer._tenants.caller

    async def caller(headers: Any) -> Caller:
        return who[0] if who[0] is not None else await operator_caller(headers)

    monkeypatch.setattr(writer._tenants, "caller", caller)
    who[0] = Caller(tenant="acme", agent="exec-a")
    wrong = await lease(client, "acquire", holder="exec-b", ttl_s=30)
    assert (wrong["error"]["code"], wrong["error"]["path"]) == ("holder_mismatch", "$.holder")
    got = (await lease(client, "acquire", holder="exec-a", ttl_s=30))["lease"]

    def as_agent(agent: str, kind: str, payload: dict[str, Any], eid: str) -> dict[str, Any]:
        return {**event(eid, kind, payload), "producer": agent}

    kinds = [("task_cancelled", {"reason": "stop"}),
             ("turn_appended", {"role": "user", "ordinal": 1, "content": "hi"}),
             ("question_opened", {"question_id": "q1", "text": "why?"})]
    who[0] = Caller(tenant="acme", agent="intruder")
    for kind, payload in kinds:
        ev = {**as_agent("intruder", kind, payload, f"x-{kind}"), "data_subject": "u1"}
        assert await fenced(client, ev, None) == "fencing_token_required", kind
        assert await fenced(client, ev, got, got["secret"]) == "holder_mismatch", kind
    who[0] = Caller(tenant="acme", agent="exec-a")
    for kind, payload in kinds[1:]:
        ev = {**as_agent("exec-a", kind, payload, f"a-{kind}"), "data_subject": "u1"}
        assert await fenced(client, ev, None) == "fencing_token_required", kind
        assert await fenced(client, ev, got) == "lease_secret_invalid", kind
        assert await fenced(client, ev, got, got["secret"]) == "accepted", kind
    who[0] = None  # an operator (no identity header): the lease does not bind it
    assert await fenced(client, event("op-cancel", "task_cancelled", {"reason": "ops"}),
                        None) == "accepted"


async def test_lease_check_as_a_unit(stack: tuple[LedgerWriter, Client]) -> None:
    """LeaseTable.check directly, with Caller objects: the same rules without the wire."""
    writer, client = stack
    await client.append(created())
    table = writer._leases
    assert table is not None
    granted, secret = await table.acquire("acme", "t1", "exec-a", 30)
    agent = Caller(tenant="acme", agent="exec-a")
    other = Caller(tenant="acme", agent="exec-z")

    async def code(events: list[tuple[str, int | None]], sec: str | None, who: Caller) -> str:
        try:
            await table.check("acme", "t1", events, sec, who)
        except AgentLedgerError as exc:
            return f"{exc.code} {exc.path}"
        return "ok"

    t = granted.token
    assert await code([("turn_appended", t)], secret, agent) == "ok"
    assert await code([("turn_appended", t), ("task_cancelled", None)], secret, agent) == \
        "fencing_token_required $.events[1].fencing_token"
    assert await code([("turn_appended", t - 1)], secret, agent) == \
        "stale_fencing_token $.events[0].fencing_token"
    assert await code([("turn_appended", t)], "nope", agent) == "lease_secret_invalid $.lease_secret"
    assert await code([("turn_appended", t)], secret, other) == \
        "holder_mismatch $.events[0].fencing_token"
    assert await code([("task_cancelled", None)], None, Caller()) == "ok"
    assert await code([("task_cancelled", t)], None, Caller()) == "lease_secret_invalid $.lease_secret"


async def test_renew_extends_only_the_holders_live_lease(client: Client) -> None:
    """Renewal keeps the token and moves the expiry; a wrong token or holder is refused."""
    await client.append(created())
    got = (await lease(client, "acquire", holder="exec-a", ttl_s=5))["lease"]
    renewed = await lease(client, "renew", holder="exec-a", token=got["token"],
                          secret=got["secret"], ttl_s=60)
    assert renewed["lease"]["token"] == got["token"]
    assert renewed["lease"]["expires_at"] > got["expires_at"]
    wrong = await lease(client, "renew", holder="exec-b", token=got["token"], secret=got["secret"],
                        ttl_s=60)
    assert wrong["error"]["code"] == "lease_lost"
    no_token = await lease(client, "renew", holder="exec-a", ttl_s=60)
    assert (no_token["error"]["code"], no_token["error"]["path"]) == ("missing_field", "$.token")


async def test_lease_ttl_is_capped(client: Client) -> None:
    """A lease lasts at most 600 s (renewable): a longer one is a contract error."""
    await client.append(created())
    reply = await lease(client, "acquire", holder="exec-a", ttl_s=601)
    assert (reply["error"]["code"], reply["error"]["path"]) == ("invalid_value", "$.ttl_s")
    assert (await lease(client, "acquire", holder="exec-a", ttl_s=600))["ok"]


async def test_the_client_carries_the_secret(client: Client) -> None:
    """acquire_lease returns the secret; append(lease=...) fills in the token and sends the
    secret; renew_lease keeps it; release_lease ends the lease."""
    await client.append(created())
    got = await client.acquire_lease("acme", "t1", "exec-a", ttl_s=30)
    assert got.secret is not None
    assert (await client.append(event("e1"), lease=got)).duplicate is False
    renewed = await client.renew_lease("acme", "t1", got, ttl_s=60)
    assert renewed.secret == got.secret and renewed.expires_at > got.expires_at
    await client.append_batch([event("e2"), event("e3")], lease=renewed)
    await client.release_lease("acme", "t1", renewed)
    with pytest.raises(AgentLedgerError) as info:
        await client.renew_lease("acme", "t1", renewed)
    assert info.value.code == "lease_expired"


async def test_expired_entries_disappear(settings: Settings,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An expired lease's entry leaves the bucket through its own TTL (and so does the server's
    removal marker after it); the writer's mirror forgets it; the next grant still grows."""
    monkeypatch.setattr(lease_bucket, "LINGER_S", 1.0)
    monkeypatch.setattr(lease_bucket, "MARKER_TTL_S", 1.0)
    async with running_writer(settings) as (w, client):
        await client.append(created())
        got = await client.acquire_lease("acme", "t1", "exec-a", ttl_s=0.5)
        table = w._leases
        assert table is not None
        services = await auth.connect(settings, auth.WRITER)
        try:
            js = services.jetstream()

            async def empty() -> bool:
                info = await js.stream_info(f"KV_{settings.leases_bucket}")
                return info.state.messages == 0 and "acme.t1" not in table._mirror

            await assert_eventually(empty, timeout=15, interval=0.2)
        finally:
            await services.close()
        again = await client.acquire_lease("acme", "t1", "exec-b", ttl_s=30)
        assert again.token > got.token


async def test_tenant_agents_hold_leases_as_themselves(stack: tuple[LedgerWriter, Client],
                                                       settings: Settings) -> None:
    """With real NATS users of tenant acme: an agent takes a lease only as itself; while agent-a
    holds it, agent-a2 can neither cancel the task nor append a turn, without a token or with
    agent-a's token and secret; agent-a can; the operator cancels without any."""
    if settings.auth_dir is None:
        pytest.skip("the NATS server runs without accounts")
    _, operator = stack
    await auth.tenant_add(settings, "acme")
    agents: dict[str, Client] = {}
    for name in ("agent-a", "agent-a2"):
        agents[name] = await agent_client(settings, "acme", name, timeout=5)
    try:
        a, a2 = agents["agent-a"], agents["agent-a2"]
        await a.append({**created(), "producer": "agent-a"})
        with pytest.raises(AgentLedgerError) as info:
            await a.acquire_lease("acme", "t1", "agent-a2")
        assert (info.value.code, info.value.path) == ("holder_mismatch", "$.holder")
        got = await a.acquire_lease("acme", "t1", "agent-a")
        cancel = {**event("x1", "task_cancelled", {"reason": "mine now"}), "producer": "agent-a2"}
        turn = {**event("x2", "turn_appended", {"role": "user", "ordinal": 1, "content": "hi"}),
                "data_subject": "u1"}
        for ev in (cancel, {**turn, "producer": "agent-a2"}):
            with pytest.raises(AgentLedgerError) as info:
                await a2.append(ev)
            assert info.value.code == "fencing_token_required"
            with pytest.raises(AgentLedgerError) as info:
                await a2.append(ev, lease=got)
            assert info.value.code == "holder_mismatch"
        assert (await a.append({**turn, "producer": "agent-a"}, lease=got)).duplicate is False
        with pytest.raises(AgentLedgerError) as info:
            await a.append({**turn, "event_id": "x3", "producer": "agent-a"},
                           lease=msgspec.structs.replace(got, secret="guess"))
        assert info.value.code == "lease_secret_invalid"
        assert (await operator.append(event("op", "task_cancelled", {"reason": "ops"}))).seq > 0
    finally:
        for c in agents.values():
            await c.close()


async def test_a_retry_after_the_lease_moved_is_a_duplicate_not_a_refusal(client: Client) -> None:
    """Protects the retry contract: an append whose ack was lost, retried after its lease lapsed or
    moved, is stored, so the answer is `duplicate` with the original sequences. New events and
    resent ids with other content are still refused."""
    await client.append(created())
    first = (await lease(client, "acquire", holder="exec-a", ttl_s=0.3))["lease"]
    batch = [{**event("s1"), "fencing_token": first["token"]},
             {**event("s2"), "fencing_token": first["token"]}]
    body = json.dumps({"events": batch, "lease_secret": first["secret"]}).encode()
    original = await client.append_raw(body)
    assert [r.duplicate for r in original] == [False, False]

    async def taken() -> dict[str, Any] | None:
        reply = await lease(client, "acquire", holder="exec-b", ttl_s=30)
        return reply["lease"] if reply["ok"] else None

    await assert_eventually(taken, timeout=10)
    retried = await client.append_raw(body)  # the lost-ack retry, byte for byte
    assert [(r.seq, r.duplicate) for r in retried] == [(r.seq, True) for r in original]
    # A new event under the old lease is still refused, and so is an old id with new content.
    assert await fenced(client, event("s3"), first, first["secret"]) == "stale_fencing_token"
    changed = {**event("s1", payload={"name": "x", "value": "other"}), "fencing_token": first["token"]}
    code = await fenced(client, changed, None, first["secret"])
    assert code == "event_id_conflict"


# ---- the fence is tied to the commit (several writers; see test_writers_racing.py) ------------


async def test_one_writers_fenced_appends_are_committed_against_its_own_knowledge(
        stack: tuple[LedgerWriter, Client], settings: Settings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With one writer its own commits keep its knowledge of the task current: twenty fenced
    appends after the grant read nothing from the ledger. Each stored fenced message carries the
    grant it was checked against (Agentledger-Fence), and was committed with an expectation."""
    writer, client = stack
    await client.append(created())
    got = await client.acquire_lease("acme", "t1", "exec-a", ttl_s=30)
    grants = writer._leases._ledger
    reads: list[Any] = []
    real = grants.fence_at

    async def counted(*args: Any, **kw: Any) -> tuple[int, int]:
        reads.append(kw)
        return await real(*args, **kw)

    monkeypatch.setattr(grants, "fence_at", counted)
    for i in range(20):
        await client.append(event(f"f{i}"), lease=got)
    await client.append_batch([event("b1"), event("b2")], lease=got)
    assert reads == []
    services = await auth.connect(settings, auth.WRITER)
    try:
        js = services.jetstream()
        last = (await js.stream_info(settings.stream)).state.last_seq
        stamps = {(await js.get_msg(settings.stream, seq)).headers.get("Agentledger-Fence")
                  for seq in range(got.token + 1, last + 1)}
    finally:
        await services.close()
    assert stamps == {str(got.token)}


async def test_what_was_appended_since_is_read_when_the_expectation_fails(
        stack: tuple[LedgerWriter, Client], ledger: Any, settings: Settings) -> None:
    """Messages the writer did not commit (published raw, as another writer would: unstamped)
    make its expectation fail; it reads them, finds no grant and commits. A lease_granted among
    them, which no lease-table entry knows (a grant of another writer whose entry is not there
    yet), makes the holder's token stale, also when more messages follow it."""
    _, client = stack
    await client.append(created())
    got = await client.acquire_lease("acme", "t1", "exec-a", ttl_s=30)
    await client.append(event("a1"), lease=got)
    await ledger.publish_all([event("raw1"), event("raw2")])
    assert (await client.append(event("a2"), lease=got)).duplicate is False
    grant = {**event("g-raw", "lease_granted", {"holder": "exec-z", "expires_at": time.time() + 30,
                                                "secret_hash": "ab" * 32}),
             "producer": "agentledger-ledger-writer"}
    granted_at = await ledger.publish(grant)
    await ledger.publish(event("raw3"))
    with pytest.raises(AgentLedgerError) as info:
        await client.append(event("a3"), lease=got)
    assert (info.value.code, info.value.path) == ("stale_fencing_token", "$.events[0].fencing_token")
    assert str(granted_at) in info.value.message
    kinds = [body["event_id"] for _, body in await stored(settings)]
    assert kinds[-3:] == ["a2", "g-raw", "raw3"]


async def test_an_expectation_of_the_caller_is_checked_against_the_ledger_too(
        stack: tuple[LedgerWriter, Client]) -> None:
    """A fenced append with its own expected_last_seq: the current one is accepted; an old one,
    one from before the lease's grant and one beyond the task's last message are conflicts
    carrying the current sequence."""
    _, client = stack
    await client.append(created())
    got = await client.acquire_lease("acme", "t1", "exec-a", ttl_s=30)
    seq = (await client.append(event("e1"), lease=got)).seq
    nxt = (await client.append(event("e2"), lease=got, expected_last_seq=seq)).seq
    for wrong in (seq, got.token - 1, nxt + 5):
        with pytest.raises(AgentLedgerError) as info:
            await client.append(event(f"w{wrong}"), lease=got, expected_last_seq=wrong)
        assert (info.value.code, info.value.current_seq) == ("conflict", nxt)
