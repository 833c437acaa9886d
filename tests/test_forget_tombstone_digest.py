"""A forgotten record's key, made of its value's words, leaves nothing of those words behind, and
the forget still holds: real agent credentials, real NATS JetStream and PostgreSQL, every service
in process (the tombstone-fanout's whole saga runs, statistics step included).

A record proposed without a key is keyed by its value's content words
(``build_quokkaberry_...``). Forgetting it used to keep that key in the tombstone row, its group,
its history row, the ``memory_forgotten`` event and, through them, the column statistics. The
scan here is the test's own: every row of every table in the database and every column
statistic, read as text, and every message of every stream as bytes; before the forget it finds
the word (so it would see it), after the receipt it finds nothing. A later proposal of the same
value by a lower source still finds the tombstone by the key's digest and stays below it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import nats.js.errors
import pytest

from agentledger.client import Client
from agentledger.config import Settings
from agentledger.security import auth, bindings
from agentledger.services.memory_policy.replay import verify_memory
from tenant_agents import agent_client
from ckpt_support import Stack
from test_memory_service import proposal

TENANT = "acme"
WORD = "quokkaberry"
VALUE = f"the staging build cache lives on host {WORD}"
OTHERS = [f"the nightly job number {i} runs on the shared runner pool" for i in range(8)]


@dataclass
class Env:
    stack: Stack
    agent: Client

    @property
    def db(self) -> asyncpg.Pool:
        assert self.stack.db is not None
        return self.stack.db


@pytest.fixture
async def env(admin: Settings) -> AsyncIterator[Env]:
    stack = await Stack(admin).start(memory=True, context=True, tombstone=True)
    await auth.tenant_add(admin, TENANT)
    await bindings.bind_agent(admin, TENANT, "keeper", [], ["p1"], roles=["project-admin"])
    agent = await agent_client(admin, TENANT, "keeper", timeout=30)
    try:
        yield Env(stack, agent)
    finally:
        await agent.close()
        await stack.stop()


async def rows_holding(db: asyncpg.Pool, needle: str) -> list[str]:
    """Every table of the database whose rows (bytea columns as their bytes), or whose column
    statistics, hold ``needle``."""
    found = []
    raw = needle.encode()
    async with db.acquire() as conn:
        tables = [r[0] for r in await conn.fetch(
            "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables"
            " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')")]
        for table in tables:
            for row in await conn.fetch(f"SELECT * FROM {table}"):
                if any(raw in v if isinstance(v, bytes) else needle in str(v) for v in row.values()):
                    found.append(table)
                    break
        stats = await conn.fetch(
            "SELECT tablename, attname FROM pg_stats WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
            " AND (position($1 in coalesce(most_common_vals::text, '')) > 0"
            " OR position($1 in coalesce(histogram_bounds::text, '')) > 0"
            # bytea statistics print as hex
            " OR position($2 in coalesce(most_common_vals::text, '')) > 0"
            " OR position($2 in coalesce(histogram_bounds::text, '')) > 0)", needle, raw.hex())
        found += [f"pg_stats:{r[0]}.{r[1]}" for r in stats]
    return found


async def messages_holding(env: Env, needle: bytes) -> list[str]:
    """Every stream (ledger, buckets, object stores) with a message whose bytes hold ``needle``."""
    js = env.stack.c.nc.jetstream()
    found = []
    for info in await js.streams_info():
        name, last = info.config.name, info.state.last_seq
        seq = info.state.first_seq
        while seq and seq <= last:
            try:
                msg = await js.get_msg(name, seq=seq, next=True)
            except nats.js.errors.NotFoundError:
                break
            assert msg.seq is not None
            headers = b"".join(f"{k}{v}".encode() for k, v in (msg.headers or {}).items())
            if needle in (msg.data or b"") + headers + (msg.subject or "").encode():
                found.append(f"{name}#{msg.seq}")
            seq = msg.seq + 1
    return found


async def test_a_forgotten_key_made_of_the_values_words_leaves_none_of_them(env: Env) -> None:
    """The scans find the word before the forget; after its receipt no row, column statistic or
    stream message holds it, the tombstone is there (forgotten, under the key's digest), and a
    model's new proposal of the same value is kept below it (superseded, ``forgotten_key``);
    a user's confirmed one becomes active. Replay of the memory ledger agrees throughout."""
    c = env.agent
    reply = await c.memory_propose(TENANT, [proposal("cache-host", VALUE, source="user_confirmed"),
                                            *(proposal(f"job-{i}", v) for i, v in enumerate(OTHERS))])
    record = reply.decisions[0].record_id
    assert record is not None and reply.decisions[0].action == "write", reply.decisions[0]
    key = await env.db.fetchval("SELECT key FROM memory_records WHERE record_id = $1", record)
    assert WORD in key  # the key was made of the value's words
    async with env.db.acquire() as conn:
        await conn.execute("ANALYZE")
    assert await rows_holding(env.db, WORD)
    assert await messages_holding(env, WORD.encode())

    forget = await c.forget(TENANT, {"kind": "record", "record_id": record}, reason="wrong host, remove it")
    done = await c.forget_wait(TENANT, forget.request_id, timeout_s=120)
    assert done.receipt is not None
    statuses = {i.index: i.status for i in done.receipt.indexes}
    assert statuses["memory"] == statuses["statistics"] == "done", done.receipt.indexes

    assert await rows_holding(env.db, WORD) == []
    assert await messages_holding(env, WORD.encode()) == []
    tomb = await env.db.fetchrow("SELECT status, key FROM memory_records WHERE record_id = $1", record)
    assert tomb is not None and tomb["status"] == "forgotten" and tomb["key"].startswith("forgotten:")
    shown = await c.memory_get(TENANT, key, "project", "p1")
    assert [(r.record_id, r.status, r.value) for r in shown.records] == [(record, "forgotten", None)]
    assert await verify_memory(env.stack.settings) == []

    # The hold still matches the key: a model saying the same again stays below the forget.
    guess = (await c.memory_propose(TENANT, [proposal("cache-host-2", VALUE, source="model_inference")]))
    guessed = guess.decisions[0].record_id
    row = await env.db.fetchrow("SELECT status, key, convert_from(row, 'UTF8')::jsonb ->> 'status_reason' AS why"
                                " FROM memory_records WHERE record_id = $1", guessed)
    assert row is not None and (row["status"], row["key"], row["why"]) == ("superseded", key, "forgotten_key")
    said = await c.memory_propose(TENANT, [proposal("cache-host-3", VALUE, source="user_confirmed")])
    assert said.decisions[0].record_id is not None
    statuses_now = {r.record_id: r.status for r in (await c.memory_get(TENANT, key, "project", "p1")).records}
    assert statuses_now == {record: "forgotten", guessed: "superseded", said.decisions[0].record_id: "active"}
    assert await verify_memory(env.stack.settings) == []
