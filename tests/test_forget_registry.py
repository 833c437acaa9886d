"""The index registry covers every store: a table or JetStream store that no forget handler claims
(and that is not listed as holding no content) fails here, so no index is added without saying how
it forgets. Against a stack that has run every service and touched every store."""

from __future__ import annotations

import asyncpg

from agentledger.chaos.health import MICRO_NAMES
from agentledger.config import Settings
from agentledger.erasure import evict
from agentledger.security import auth, bindings
from agentledger.services.tombstone_fanout.handlers import HANDLERS
from agentledger.services.tombstone_fanout.registry import NOT_CONTENT, NOT_CONTENT_STORES, stores_of
from ckpt_support import TENANT, created, event, running


async def _streams(settings: Settings) -> set[str]:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        jsm = nc.jsm()
        names, offset = set(), 0
        while batch := await jsm.streams_info(offset):
            names |= {i.config.name for i in batch if i.config.name}
            offset += len(batch)
    finally:
        await nc.close()
    tag = settings.prefix.upper().replace("-", "_")
    return {n for n in names if tag in n.upper()}


async def test_every_table_and_store_has_a_forget_handler(settings: Settings) -> None:
    async with running(settings, checkpointer=True, memory=True, context=True, tombstone=True) as stack:
        c = stack.c
        # Touch every store: a sealed value (keys), a lease, an artifact, a binding, memory, a build.
        await stack.append([created("t1"),
                            event("turn_appended", {"role": "user", "ordinal": 1, "content": "hello"}, "t1")
                            | {"data_subject": "s1"}])
        await c.acquire_lease(TENANT, "t1", "worker-1")
        await c.put_artifact(b"some bytes", schema="text/plain", producer="test", tenant=TENANT)
        await bindings.bind_agent(settings, TENANT, "agent-1", users=["u1"], projects=[])
        await stack.projected()
        streams = await _streams(settings)
        assert stack.db is not None
        tables = {r[0] for r in await stack.db.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")}
    claimed_tables = {t for h in HANDLERS for t in h.tables}
    unclaimed = tables - claimed_tables - set(NOT_CONTENT) - {"checkpoint_schema_migrations"}
    assert not unclaimed, f"tables with no forget handler: {sorted(unclaimed)}"
    assert not (claimed_tables - tables), "handlers claim tables that do not exist"
    roles = stores_of(settings)
    claimed_streams = {roles[r] for h in HANDLERS for r in h.stores} | {roles[r] for r in NOT_CONTENT_STORES}
    assert not (streams - claimed_streams), f"streams with no forget handler: {sorted(streams - claimed_streams)}"
    assert len({h.index for h in HANDLERS}) == len(HANDLERS)


def test_every_service_that_caches_answers_evictions() -> None:
    """The caches step asks every service but the fan-out itself; a new service is in that list."""
    assert set(MICRO_NAMES.values()) - {"agentledger-tombstone-fanout"} == set(evict.CACHE_HOLDERS)


async def test_the_registry_test_would_catch_a_new_table(settings: Settings) -> None:
    """A table added without a handler is reported (the check above is not vacuous)."""
    conn = await asyncpg.connect(settings.database_url)
    try:
        await conn.execute("CREATE TABLE stray_index (tenant text, body text)")
        tables = {r[0] for r in await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")}
    finally:
        await conn.close()
    claimed = {t for h in HANDLERS for t in h.tables} | set(NOT_CONTENT)
    assert "stray_index" in tables - claimed
